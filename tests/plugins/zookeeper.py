"""zookeeper:// on a 3-node ZooKeeper ensemble started for the session (or $DISTLOCK_TEST_ZOOKEEPER_URL).

The ensemble is shared by every test of the session (JVM start-up is the slow part). Fault tests that kill
servers start their own (tests/test_zookeeper_faults.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.servers.zookeeper import ZkEnsemble, available, zookeeper_ensemble


@pytest.fixture(scope="session")
def zookeeper_ensemble_3() -> Iterator[ZkEnsemble]:
    if not available():
        pytest.skip("ZooKeeper is not installed (scripts/install_servers.sh installs it)")
    with zookeeper_ensemble(3) as ens:
        yield ens


@pytest.fixture(scope="session")
def zookeeper_url(request: pytest.FixtureRequest) -> str:
    env = os.environ.get("DISTLOCK_TEST_ZOOKEEPER_URL")
    if env:
        return env
    ens: ZkEnsemble = request.getfixturevalue("zookeeper_ensemble_3")
    # a short session timeout: a crashed holder frees its locks within 4 s in the tests
    return f"{ens.url}?session_timeout=4"

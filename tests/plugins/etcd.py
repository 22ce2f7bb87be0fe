"""etcd:// on a 3-member etcd cluster on loopback (or $DISTLOCK_TEST_ETCD_URL)."""

import os
from collections.abc import Iterator

import pytest

from tests.servers.etcd import EtcdCluster, etcd_cluster


@pytest.fixture(scope="session")
def etcd_cluster_3() -> Iterator[EtcdCluster]:
    """The shared 3-member cluster (tests that kill members start their own)."""
    with etcd_cluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def etcd_url(request: pytest.FixtureRequest) -> str:
    env = os.environ.get("DISTLOCK_TEST_ETCD_URL")
    if env:
        return env
    cluster: EtcdCluster = request.getfixturevalue("etcd_cluster_3")
    return cluster.url

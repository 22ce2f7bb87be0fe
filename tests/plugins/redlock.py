"""redlock:// over five independent redis-server masters started for the session (or $DISTLOCK_TEST_REDLOCK_URL)."""

import os
from collections.abc import Iterator

import pytest

from tests.servers import redis as servers
from tests.servers.proc import ServerProc


@pytest.fixture(scope="session")
def redlock_url_servers() -> Iterator[list[ServerProc]]:
    with servers.redis_masters(5) as masters:
        yield masters


@pytest.fixture(scope="session")
def redlock_url(request: pytest.FixtureRequest) -> str:
    env = os.environ.get("DISTLOCK_TEST_REDLOCK_URL")
    if env:
        return env
    return servers.redlock_url(request.getfixturevalue("redlock_url_servers"))

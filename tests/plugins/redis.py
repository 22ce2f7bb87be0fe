"""redis:// on one redis-server started for the session (or $DISTLOCK_TEST_REDIS_URL)."""

import os
from collections.abc import Iterator

import pytest

from tests.servers.redis import redis_server


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    env = os.environ.get("DISTLOCK_TEST_REDIS_URL")
    if env:
        yield env
        return
    with redis_server() as srv:
        yield srv.url

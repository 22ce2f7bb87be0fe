"""redis:// on a 3-master Redis Cluster started for the session (or $DISTLOCK_TEST_REDIS_CLUSTER_URL).

The seed URL is a plain ``redis://`` URL: distlock detects the cluster (``cluster=auto``). Time budget: by
default only a focused subset of the conformance suite runs here (``FOCUSED``: acquire and fences, push
hand-off, rwlock, semaphore, multilock over several slots, inspect/list/break); ``--backend redis_cluster``
runs all of it. ``tests/test_redis_cluster.py`` has the cluster-specific tests (slots, names with braces).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.servers.redis_cluster import RedisCluster, redis_cluster

FOCUSED = (
    "test_acquire_release_and_fences_increase",
    "test_waiter_is_handed_the_lock_on_release",
    "test_rwlock_waiting_writer_is_not_starved",
    "test_semaphore_contention_holds_at_most_n",
    "test_multilock_all_or_nothing",
    "test_inspect_list_and_break",
)


@pytest.fixture(scope="session")
def redis_cluster_servers() -> Iterator[RedisCluster]:
    with redis_cluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_cluster_url(request: pytest.FixtureRequest) -> str:
    env = os.environ.get("DISTLOCK_TEST_REDIS_CLUSTER_URL")
    if env:
        return env
    cluster: RedisCluster = request.getfixturevalue("redis_cluster_servers")
    return cluster.url


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "redis_cluster" in (config.getoption("--backend") or []):
        return
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        mine = callspec is not None and callspec.params.get("backend") == "redis_cluster"
        focused = getattr(item, "originalname", item.name) in FOCUSED
        (drop if mine and not focused else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep

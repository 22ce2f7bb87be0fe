"""The conformance table: every backend the suite runs on, one row each (a pytest plugin, loaded by conftest).

A row names the backend and says where its store URL comes from: a server this plugin starts once per test
session (the ``*_servers`` fixtures below, from ``tools/servers/``), or another row's URL with options added
(the SQL session modes run on the lease mode's server). ``$DISTLOCK_TEST_<NAME>_URL`` replaces a row's URL
with an external server's. For each row the plugin defines the session fixture ``<name>_url``; the
conformance tests (``backend_url``) are parametrized over the rows, sync and async.

A row may also say which conformance tests it refuses by design (``unsupported``: they raise
UnsupportedFeature, which ``tests/test_sql_faults.py`` checks itself), whether it documents the weaker
writer-starvation guarantee of the session modes (``weaker``), and how much of the suite runs on it by
default (``focused``: only those tests, ``opt_in``: none) to keep the whole suite within its time budget;
``--backend NAME`` runs everything on NAME.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tools.servers import redis as redis_srv
from tools.servers.etcd import EtcdCluster, etcd_cluster
from tools.servers.mysql import mariadb_server
from tools.servers.postgres import postgres_server
from tools.servers.proc import ServerProc
from tools.servers.redis_cluster import RedisCluster, redis_cluster
from tools.servers.redis_sentinel import SentinelDeployment, redis_sentinel
from tools.servers.zookeeper import ZkEnsemble, available, zookeeper_ensemble

#: session mode queues a waiting writer in the server only while its blocking wait runs: a reader arriving
#: in the one round trip between the writer's failed try and that wait still gets in (docs/sql.md)
WEAKER = ("waiting_writer_is_not_starved",)
WEAKER_REASON = "session mode: writers queue server-side only once their wait runs (documented in docs/sql.md)"


@dataclass(frozen=True)
class Row:
    name: str
    #: the store URL, from the test session (``request``): usually a ``*_servers`` fixture's URL
    url: Callable[[pytest.FixtureRequest], str] | None = None
    #: or: the URL of the row named here, with these URL options added
    on: str | None = None
    options: str = ""
    #: parts of the names of conformance tests this backend refuses by design (UnsupportedFeature)
    unsupported: tuple[str, ...] = ()
    #: the session modes' documented weaker guarantee (see WEAKER)
    weaker: bool = False
    #: default run: only the conformance tests named here (``--backend NAME`` runs all)
    focused: tuple[str, ...] | None = None
    #: default run: no conformance test (``--backend NAME`` runs them)
    opt_in: bool = False


def _sqlite(request: pytest.FixtureRequest) -> str:
    factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
    return f"sqlite:///{factory.mktemp('sqlite') / 'locks.db'}"


def _of(fixture: str, suffix: str = "") -> Callable[[pytest.FixtureRequest], str]:
    """The ``url`` of a session fixture's server (plus ``suffix``)."""
    return lambda request: str(request.getfixturevalue(fixture).url) + suffix


ROWS: tuple[Row, ...] = (
    Row("memory", url=lambda _request: "memory://"),
    Row("sqlite", url=_sqlite),
    Row("redis", url=_of("redis_servers")),
    # no quorum latch (UnsupportedFeature: a count on a majority cannot be taken off exactly once)
    Row(
        "redlock",
        url=lambda request: redis_srv.redlock_url(request.getfixturevalue("redlock_url_servers")),
        unsupported=("test_latch", "test_barrier", "test_double_barrier"),
    ),
    Row(
        "redis_cluster",  # the seed URL is plain redis://: distlock detects the cluster (cluster=auto)
        url=_of("redis_cluster_servers"),
        focused=(
            "test_acquire_release_and_fences_increase",
            "test_waiter_is_handed_the_lock_on_release",
            "test_rwlock_waiting_writer_is_not_starved",
            "test_semaphore_contention_holds_at_most_n",
            "test_multilock_all_or_nothing",
            "test_inspect_list_and_break",
            "test_election_campaign_proclaim_resign_and_the_leader_seen_by_anyone",
            "test_election_observe_reports_every_leader_and_value_and_no_leader",
            "test_a_store_under_python_w_error_warns_nothing",
            "test_latch_counts_down_from_many_owners_and_releases_every_waiter",
            "test_latch_a_waiter_is_woken_promptly_at_zero",
            "test_barrier_releases_every_party_of_two_stores_together",
            "test_double_barrier_enter_waits_for_all_and_leave_for_all_to_leave",
            "test_semaphore_permits_are_taken_all_or_nothing_as_one_holding",
            "test_semaphore_leaves_nothing_on_the_server_once_nobody_uses_it",
        ),
    ),
    Row(
        "redis_sentinel",  # the master of a Sentinel-managed service (tests/test_redis_sentinel.py: failovers)
        url=_of("redis_sentinel_servers"),
        focused=(
            "test_acquire_release_and_fences_increase",
            "test_waiter_is_handed_the_lock_on_release",
            "test_semaphore_contention_holds_at_most_n",
            "test_inspect_list_and_break",
            "test_a_store_under_python_w_error_warns_nothing",
            "test_latch_counts_down_from_many_owners_and_releases_every_waiter",
            "test_barrier_releases_every_party_of_two_stores_together",
            "test_semaphore_leaves_nothing_on_the_server_once_nobody_uses_it",
        ),
    ),
    # a short session timeout: a crashed holder frees its locks within 4 s in the tests
    Row("zookeeper", url=_of("zookeeper_ensemble_3", "?session_timeout=4")),
    Row("etcd", url=_of("etcd_cluster_3")),
    Row("mysql", url=_of("mysql_servers")),
    # GET_LOCK has no shared mode (rwlock); semaphore tests check the refusal themselves
    Row(
        "mysql_session",
        on="mysql",
        options="mode=session",
        unsupported=("rwlock", "timed_out_acquire_leaves_nothing_behind", "-write]", "test_election"),
    ),
    # opt-in (time budget): tests/test_sql_faults.py covers this variant in the default run
    Row(
        "mysql_rowlock",
        on="mysql",
        options="mode=session&session_lock=row",
        weaker=True,
        opt_in=True,
        unsupported=("test_election",),
    ),
    Row("postgres", url=_of("postgres_servers")),
    # elections need the lease tables' queue (UnsupportedFeature: tests/test_sql_election.py checks it)
    Row("postgres_session", on="postgres", options="mode=session", weaker=True, unsupported=("test_election",)),
)
BY_NAME = {row.name: row for row in ROWS}


# -- the servers, one start per test session (tests that break servers start their own) ------------------
@pytest.fixture(scope="session")
def redis_servers() -> Iterator[ServerProc]:
    with redis_srv.redis_server() as srv:
        yield srv


@pytest.fixture(scope="session")
def redlock_url_servers() -> Iterator[list[ServerProc]]:
    with redis_srv.redis_masters(5) as masters:
        yield masters


@pytest.fixture(scope="session")
def redis_cluster_servers() -> Iterator[RedisCluster]:
    with redis_cluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_sentinel_servers() -> Iterator[SentinelDeployment]:
    with redis_sentinel() as deployment:
        yield deployment


@pytest.fixture(scope="session")
def zookeeper_ensemble_3() -> Iterator[ZkEnsemble]:
    if not available():
        pytest.skip("ZooKeeper is not installed (scripts/install_servers.sh installs it)")
    # 25 ticks (5 s) before a follower that lost the leader drops its clients (production's default is 10 s):
    # shared by every worker, this ensemble runs on a loaded machine; its own fault tests use their own
    with zookeeper_ensemble(3, sync_limit=25) as ens:
        yield ens


@pytest.fixture(scope="session")
def etcd_cluster_3() -> Iterator[EtcdCluster]:
    with etcd_cluster(3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def mysql_servers() -> Iterator[ServerProc]:
    with mariadb_server() as srv:
        yield srv


@pytest.fixture(scope="session")
def postgres_servers() -> Iterator[ServerProc]:
    with postgres_server() as srv:
        yield srv


# -- one ``<name>_url`` fixture per row ------------------------------------------------------------------
def _url_fixture(row: Row) -> Any:
    @pytest.fixture(scope="session", name=f"{row.name}_url")
    def url(request: pytest.FixtureRequest) -> str:
        env = os.environ.get(f"DISTLOCK_TEST_{row.name.upper()}_URL")
        if env:
            return env
        if row.on is not None:
            base = str(request.getfixturevalue(f"{row.on}_url"))
            return f"{base}{'&' if '?' in base else '?'}{row.options}"
        assert row.url is not None, row.name
        return row.url(request)

    return url


for _row in ROWS:
    globals()[f"_{_row.name}_url"] = _url_fixture(_row)


# -- what runs on each row -----------------------------------------------------------------------------
#: A default run runs the sync twins (tests/_sync/, generated) of the row-parametrised tests on these rows only:
#: one per driver seam (SQLite's worker thread, which memory:// shares; redis-py's two clients; kazoo; the etcd
#: client; PyMySQL/aiomysql; psycopg's two connections), and the Redis Cluster and Sentinel rows' focused tests.
#: Both sides are generated from one async source and differ only at those seams. The other rows run the async
#: originals; their sync side is driven elsewhere too (Redlock's fan-out by tests/test_redlock_*.py, the SQL
#: session modes by tests/test_sql_*.py). ``--backend NAME`` runs both sides on a row. (The suite's time.)
SEAM_ROWS = frozenset({"sqlite", "redis", "redis_cluster", "redis_sentinel", "zookeeper", "etcd", "mysql", "postgres"})


def _sync_twin_elsewhere(item: pytest.Item, row: Row) -> bool:
    """A sync twin on a row that is not one of ``SEAM_ROWS``."""
    return row.name not in SEAM_ROWS and f"{os.sep}_sync{os.sep}" in str(item.path)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = config.getoption("--backend") or []
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        row = BY_NAME.get(callspec.params.get("backend", "")) if callspec is not None else None
        if row is None:
            keep.append(item)
            continue
        everything = row.name in chosen
        original = getattr(item, "originalname", item.name)
        if not everything and (
            row.opt_in or (row.focused is not None and original not in row.focused) or _sync_twin_elsewhere(item, row)
        ):
            drop.append(item)
            continue
        keep.append(item)
        if any(part in item.name for part in row.unsupported):
            item.add_marker(pytest.mark.skip(reason=f"{row.name} does not offer this kind (UnsupportedFeature)"))
        elif row.weaker and any(part in item.name for part in WEAKER):
            item.add_marker(pytest.mark.skip(reason=WEAKER_REASON))
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep

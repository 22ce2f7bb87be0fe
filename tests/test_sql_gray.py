"""MySQL/MariaDB and PostgreSQL lease mode under gray link failures (a loopback FaultProxy between one store
and the server), and what stays on the server after use.

* a renewal whose COMMIT lands after the lease end while another store acquires: never two live holders;
* ``acquire(timeout=T)`` on a silent link returns within T plus the documented bound (sync; asyncio with
  ``asyncio.timeout`` around it), clean-up included;
* a half-open pooled connection does not stop the renewal of a lock;
* churn over fresh names leaves no row; fences of a reused name go up after release and ``break_lock``;
* a 0.1.0 table (per-name fence rows, no ``layout`` column) is upgraded: its fences are honoured, its rows
  removed, and a 0.1.0 client can no longer acquire.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

import distlock
from distlock._backends.sql import dialects as sd
from distlock._backends.sql import lease as sq
from distlock._backends.sql import names as sn
from distlock.checker.proxy import FaultProxy
from tests.test_sql_faults import one, raw_conn

DBS = ["mysql", "postgres"]


@pytest.fixture(params=DBS)
def db(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(db: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{db}_url"))


def with_options(url: str, **options: object) -> str:
    extra = "&".join(f"{k}={v}" for k, v in options.items())
    return url + ("&" if "?" in url else "?") + extra


@pytest.fixture
def proxy(url: str) -> Iterator[FaultProxy]:
    host, port = distlock._url.parse_url(url).hosts[0]
    with FaultProxy(host, port) as p:
        yield p


def via(url: str, p: FaultProxy) -> str:
    host, port = distlock._url.parse_url(url).hosts[0]
    return url.replace(f"{host}:{port}", f"127.0.0.1:{p.port}", 1)


def fresh_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def count_rows(db: str, url: str, prefix: str) -> dict[str, int]:
    conn = raw_conn(db, url)
    try:
        return {t: int(one(conn, f"SELECT COUNT(*) FROM {prefix}_{t}")) for t in ("holders", "queue", "fences")}
    finally:
        conn.close()


# -- renewals serialised with acquires through the holder row --------------------------------------------
def test_late_renewal_commit_never_leaves_two_live_holders(db: str, url: str, proxy: FaultProxy, name: str) -> None:
    """The holder's renewal is held by the link until after the lease end, when another store's acquire
    finds the row expired. In 0.1.0 the acquire's stale-row DELETE skipped a row a renewal had just extended
    and inserted itself: two live holders in the table. MySQL/MariaDB renew in a
    transaction (UPDATE, then a COMMIT the link holds back: the acquire's DELETE waits for the row lock and
    sees the renewal won). PostgreSQL renews in one autocommit UPDATE (docs/models/sql_lease_statement.pml,
    RENEW_COMMIT_DELAYED): a late one finds the row expired or deleted, and the old holder is told."""
    with distlock.connect(via(url, proxy)) as a, distlock.connect(url) as b:
        la = a.lock(name, ttl=4)
        assert la.acquire(timeout=5)
        if db == "mysql":  # the renewal at ~ttl/3 commits at ~4.6 s: after the lease end
            # (the transaction's COMMIT, not the "SET AUTOCOMMIT" of the bell connection the store's bell
            # thread may be opening right now)
            hit = proxy.delay_next(b"COMMIT; DO RELEASE_ALL_LOCKS", 3.3)
        else:  # every renewal (and its retry on a fresh connection) arrives 3.3 s late: past the lease end
            hit = proxy.delay_next(b"UPDATE", 3.3)
            for _ in range(12):
                proxy.delay_next(b"UPDATE", 3.3)
        lb = b.lock(name, ttl=4)
        assert lb.acquire(timeout=20)
        try:
            assert hit.is_set(), "the renewal's COMMIT went through the proxy"
            info = b.inspect(name)
            assert info is not None
            assert len(info.holders) == 1, f"two live holders of an exclusive lock: {info.holders}"
            assert la.lost.is_set(), "the old holder was told"
        finally:
            lb.release()


# -- every call bounded ---------------------------------------------------------------------------------
CALL = 1.0  # call_timeout used below
# acquire(timeout=T) on a silent link returns within T + BOUND: one call in flight (call_timeout) and the
# clean-up (1 s, or libpq's 2 s minimum connect timeout for the fresh connection it needs), plus slack
# for a loaded 2-core machine
BOUND = CALL + 2.0 + 2.5


def test_acquire_timeout_on_a_frozen_link_is_bounded(db: str, url: str, proxy: FaultProxy, name: str) -> None:
    with distlock.connect(url) as holder, distlock.connect(with_options(via(url, proxy), call_timeout=CALL)) as s:
        held = holder.lock(name, ttl=10)
        assert held.acquire(timeout=5)
        assert s.inspect(name) is not None  # the store has a pooled connection through the proxy
        proxy.freeze()
        t0 = time.monotonic()
        try:
            got = s.lock(name, ttl=5).acquire(timeout=2)
            assert not got
        except distlock.BackendError:
            pass  # the try in flight timed out: an error, within the bound too
        elapsed = time.monotonic() - t0
        assert elapsed < 2 + BOUND, f"acquire(timeout=2) on a silent link took {elapsed:.1f} s"
        proxy.heal()
        held.release()


def test_asyncio_timeout_around_acquire_on_a_frozen_link_is_bounded(
    db: str, url: str, proxy: FaultProxy, name: str
) -> None:
    async def main() -> float:
        holder = await distlock.connect_async(url)
        store = await distlock.connect_async(via(url, proxy))  # default call_timeout: asyncio.timeout ends it
        try:
            held = holder.lock(name, ttl=10)
            assert await held.acquire(timeout=5)
            assert await store.inspect(name) is not None
            proxy.freeze()
            t0 = time.monotonic()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(2):
                    await store.lock(name, ttl=5).acquire()
            elapsed = time.monotonic() - t0
            proxy.heal()
            await held.release()
            return elapsed
        finally:
            proxy.heal()
            await holder.aclose()
            await store.aclose()

    elapsed = asyncio.run(main())
    assert elapsed < 2 + BOUND, f"asyncio.timeout(2) around acquire took {elapsed:.1f} s"


def test_async_acquire_timeout_on_a_frozen_link_is_bounded(db: str, url: str, proxy: FaultProxy, name: str) -> None:
    async def main() -> float:
        holder = await distlock.connect_async(url)
        store = await distlock.connect_async(with_options(via(url, proxy), call_timeout=CALL))
        try:
            held = holder.lock(name, ttl=10)
            assert await held.acquire(timeout=5)
            assert await store.inspect(name) is not None
            proxy.freeze()
            t0 = time.monotonic()
            try:
                assert not await store.lock(name, ttl=5).acquire(timeout=2)
            except distlock.BackendError:
                pass
            elapsed = time.monotonic() - t0
            proxy.heal()
            await held.release()
            return elapsed
        finally:
            proxy.heal()
            await holder.aclose()
            await store.aclose()

    elapsed = asyncio.run(main())
    assert elapsed < 2 + BOUND, f"async acquire(timeout=2) on a silent link took {elapsed:.1f} s"


def test_half_open_pooled_connection_does_not_stop_renewal(db: str, url: str, proxy: FaultProxy, name: str) -> None:
    """Every connection the store has open goes silent for good (new ones work): the renewals that land on
    one of them cost a try, not the lock."""
    with distlock.connect(via(url, proxy)) as s:
        lock = s.lock(name, ttl=3)
        assert lock.acquire(timeout=5)
        assert proxy.half_open() >= 1
        time.sleep(7.0)  # more than two TTLs: the lock lives only if renewals got through
        assert not lock.lost.is_set(), lock.lost_reason if hasattr(lock, "lost_reason") else "lost"
        assert lock.owned()
        lock.release()


def test_session_mode_half_open_pinned_connection_costs_only_its_own_lock(
    db: str, url: str, proxy: FaultProxy, name: str
) -> None:
    """Session mode: the holding whose pinned connection went silent is reported lost; a lock taken later on
    a healthy connection keeps being renewed."""
    with distlock.connect(with_options(via(url, proxy), mode="session")) as s:
        first = s.lock(name, ttl=3)
        assert first.acquire(timeout=5)
        assert proxy.half_open() >= 1
        second = s.lock(name + "-b", ttl=3)
        assert second.acquire(timeout=10)
        assert first.lost.wait(10), "the silent connection's holding must be reported lost"
        time.sleep(4.0)  # more than a TTL after: the healthy one was renewed throughout
        assert not second.lost.is_set()
        assert second.owned()
        second.release()


def test_session_mode_silent_pinned_connection_is_at_risk_before_it_is_lost(
    db: str, url: str, proxy: FaultProxy, name: str
) -> None:
    """Session mode: a check of the pinned connection that gets no answer ends the lock, so it must wait past
    the at-risk mark (half the lease) and the holder hears ``at_risk`` well before ``lost``. (Cut at a quarter
    of the TTL, it gave up about a twelfth of a TTL after the mark, or before it: no warning at all.) The
    moments are the log events', made where each happened (the lease clock's thread, the renewer's)."""
    seen: list[tuple[str, float]] = []

    class Events(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            event = getattr(record, "event", None)
            if event in ("at-risk", "lost") and getattr(record, "lock", None) == name:
                seen.append((str(event), record.created))

    handler = Events()
    logging.getLogger("distlock").addHandler(handler)
    try:
        with distlock.connect(with_options(via(url, proxy), mode="session")) as s:
            lock = s.lock(name, ttl=6)
            assert lock.acquire(timeout=5)
            proxy.freeze()
            assert lock.lost.wait(20)
    finally:
        logging.getLogger("distlock").removeHandler(handler)
    assert [what for what, _ in seen] == ["at-risk", "lost"], seen
    # expected about 1.7 s (the check sent a third of the lease in, cut at 45% of it); the old cut gave 0.5 s
    assert seen[1][1] - seen[0][1] > 1.0, seen


# -- nothing of a free name stays; fences from one counter ----------------------------------------------
def test_churn_over_fresh_names_leaves_no_row(db: str, url: str) -> None:
    prefix = fresh_prefix()
    u = with_options(url, table_prefix=prefix)
    with distlock.connect(u) as a, distlock.connect(u) as b:
        for i in range(40):
            lock = a.lock(f"order-{i}", ttl=5)
            with lock:
                assert not b.lock(f"order-{i}", ttl=5).acquire(blocking=False)  # a try that did not win
        barrier = threading.Barrier(2)
        done: list[bool] = []

        def hold_and_release(store: distlock.Store) -> None:  # two holders of one name release at once
            sem = store.semaphore("pool", 2, ttl=5)
            assert sem.acquire(timeout=5)
            barrier.wait(10)
            sem.release()
            done.append(True)

        threads = [threading.Thread(target=hold_and_release, args=(s,)) for s in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
        assert done == [True, True]
        rw = a.rwlock("doc")
        with rw.read:
            pass
        with rw.write:
            pass
    rows = count_rows(db, url, prefix)
    assert rows == {"holders": 0, "queue": 0, "fences": 0}, rows


def test_fences_of_a_reused_name_go_up_after_release_and_break(db: str, url: str, name: str) -> None:
    with distlock.connect(url) as a, distlock.connect(url) as b:
        fences = []
        for _ in range(3):
            with a.lock(name, ttl=5) as lock:
                fences.append(lock.fence)
        lock = b.lock(name, ttl=30)
        assert lock.acquire(timeout=5)
        fences.append(lock.fence)
        assert a.break_lock(name)
        with a.lock(name, ttl=5) as again:
            fences.append(again.fence)
        assert all(f is not None for f in fences)
        assert fences == sorted(fences) and len(set(fences)) == len(fences), fences


def _old_schema(db: str, prefix: str) -> list[str]:
    """The 0.1.0 lease tables (no ``layout`` column, one fence row per name)."""
    d = sd.mysql(prefix) if db == "mysql" else sd.postgres(prefix)
    return [s.replace(", layout SMALLINT NOT NULL", "") for s in d.schema if "fence_seq" not in s]


def test_upgrade_from_0_1_0_honours_old_fences_and_removes_their_rows(db: str, url: str, name: str) -> None:
    prefix = fresh_prefix()
    admin = raw_conn(db, url)
    cur = admin.cursor()
    for stmt in _old_schema(db, prefix):
        cur.execute(stmt)
    cur.execute(f"SELECT 1 FROM information_schema.columns WHERE table_name = '{prefix}_holders' "
                "AND column_name = 'layout'")  # fmt: skip
    assert not cur.fetchall()
    # what 0.1.0 left: the fence rows of a busy name (fence 500) and of a free one (fence 7)
    for n, f in ((name, 500), (name + "-free", 7)):
        cur.execute(f"INSERT INTO {prefix}_fences (name_key, name, fence) VALUES (%s, %s, %s)", (sn.name_key(n), n, f))
    u = with_options(url, table_prefix=prefix)
    with distlock.connect(u) as store:
        with store.lock(name, ttl=5) as lock:
            assert lock.fence is not None and lock.fence > 500
        with store.lock(name + "-other", ttl=5) as lock:  # one counter: every name is above the old ones
            assert lock.fence is not None and lock.fence > 500
        # a 0.1.0 client (its INSERT has no layout value) can no longer take a lock here
        with pytest.raises(Exception, match="layout"):
            cur.execute(
                f"INSERT INTO {prefix}_holders (token, name_key, name, owner, mode, fence, expires_at, acquired_at) "
                "VALUES ('old', %s, %s, 'old', 'exclusive', 501, 0, 0)",
                (sn.name_key(name), name),
            )
    admin.close()
    rows = count_rows(db, url, prefix)
    assert rows == {"holders": 0, "queue": 0, "fences": 0}, rows


def test_mysql_batch_statements_do_not_leak_results(mysql_url: str, name: str) -> None:
    """The MySQL release is one batch (delete, ROW_COUNT, name row): the next call on the connection works."""
    with distlock.connect(mysql_url) as s:
        for _ in range(5):
            lock = s.lock(name, ttl=5)
            assert lock.acquire(timeout=5)
            lock.release()
        assert s.inspect(name) is None


def test_mysql_without_sequences_draws_fences_from_an_auto_increment_ticket(
    mysql_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MySQL servers without SEQUENCE (MySQL 8, MariaDB < 10.5): the lease-mode fence is an AUTO_INCREMENT
    ticket whose row is deleted in the same batch; a 0.1.0 fence raises the counter. Simulated on MariaDB."""
    from distlock._backends.mysql._sync import driver as sync_mysql_driver

    monkeypatch.setattr(sync_mysql_driver, "has_sequences", lambda version: False)
    prefix = fresh_prefix()
    admin = raw_conn("mysql", mysql_url)
    cur = admin.cursor()
    for stmt in _old_schema("mysql", prefix):
        cur.execute(stmt)
    cur.execute(f"INSERT INTO {prefix}_fences (name_key, name, fence) VALUES (%s, %s, 300)", (sn.name_key(name), name))
    with distlock.connect(with_options(mysql_url, table_prefix=prefix)) as a:
        assert not a._backend.ops.sequences
        fences = []
        for _ in range(3):
            with a.lock(name, ttl=5) as lock:
                fences.append(lock.fence)
        lock = a.lock(name, ttl=30)
        assert lock.acquire(timeout=5)
        fences.append(lock.fence)
        assert a.break_lock(name)
        with a.lock(name + "-2", ttl=5) as other:
            fences.append(other.fence)
    assert all(f is not None and f > 300 for f in fences), fences
    assert fences == sorted(fences) and len(set(fences)) == len(fences), fences
    assert int(one(admin, f"SELECT COUNT(*) FROM {prefix}_fence_ids")) == 0
    admin.close()
    assert count_rows("mysql", mysql_url, prefix) == {"holders": 0, "queue": 0, "fences": 0}


def test_mysql_schema_change_waiting_on_a_long_transaction_gives_up_on_the_server_too(
    mysql_url: str, name: str
) -> None:
    """The 0.1.0 upgrade (an ALTER) must wait for the metadata lock of a table that a long transaction touched.
    The store's open gives up after call_timeout, and so does the server (lock_wait_timeout; where no proxy sits
    between, the server also notices the client left): an ALTER left waiting there (MySQL's default wait is a
    day) would queue every later statement on that table behind it."""
    prefix = fresh_prefix()
    admin = raw_conn("mysql", mysql_url)
    cur = admin.cursor()
    for stmt in _old_schema("mysql", prefix):
        cur.execute(stmt)
    other = raw_conn("mysql", mysql_url)
    other.autocommit(False)
    one(other, f"SELECT COUNT(*) FROM {prefix}_holders")  # a transaction holding the table's metadata lock
    url = with_options(mysql_url, table_prefix=prefix, call_timeout=1)
    t0 = time.monotonic()
    with pytest.raises(distlock.BackendError):
        distlock.connect(url).close()
    assert time.monotonic() - t0 < 10

    def waiting() -> int:
        return int(one(admin, "SELECT COUNT(*) FROM information_schema.processlist "
                              "WHERE state LIKE 'Waiting for table metadata lock%%'"))  # fmt: skip

    deadline = time.monotonic() + 5
    while waiting() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert waiting() == 0, "the ALTER is still waiting on the server"
    other.rollback()
    other.close()
    with distlock.connect(url) as store, store.lock(name, ttl=5) as lock:  # the upgrade runs now
        assert lock.fence is not None
    admin.close()


# -- PostgreSQL's one-Query try -------------------------------------------------------------------------
def test_pg_try_that_fails_midway_writes_nothing_and_its_connection_serves_on(postgres_url: str, name: str) -> None:
    """A try is three statements in one Query (one transaction). When it stops at its first one (the name's
    advisory lock, held by another session, past the try's wait for it), nothing of it stays (no holder or
    queue row), and the store's next tries are granted with increasing fences."""
    url = with_options(postgres_url, call_timeout=1)
    key = sn.name_key(name)
    a, b = sq.LeaseOps(sd.postgres("distlock"), "distlock", "")._lock_name(key).params
    other = raw_conn("postgres", postgres_url)
    with distlock.connect(url) as s:
        lk = s.lock(name, ttl=10, fair=True)
        fences = []
        for _ in range(6):
            assert lk.acquire(timeout=5)
            fences.append(lk.fence)
            lk.release()
        other.execute("BEGIN")
        other.execute("SELECT pg_advisory_xact_lock(%s, %s)", (a, b))
        try:
            try:
                got = lk.acquire(timeout=1.5)
            except distlock.LockError:
                got = False
            assert not got
            rows = one(other, f"SELECT (SELECT COUNT(*) FROM distlock_holders WHERE name_key = '{key}') + "
                              f"(SELECT COUNT(*) FROM distlock_queue WHERE name_key = '{key}')")  # fmt: skip
            assert int(rows) == 0, "a try that failed midway left rows"
        finally:
            other.execute("ROLLBACK")
            other.close()
        for _ in range(6):
            assert lk.acquire(timeout=5)
            fences.append(lk.fence)
            lk.release()
        assert fences == sorted(fences) and len(set(fences)) == len(fences)

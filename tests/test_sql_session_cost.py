"""What a session-mode acquire writes, and that what ``inspect`` shows stays exact without the rest.

The holder record (``<prefix>_session_holders``: owner, mode, name of a connection's holding) is written only
when it changes; a loop on one lock does not write it again. The fence is read from the holding connection's
``application_name`` (PostgreSQL, ``pg_stat_activity``: the acquire writes no row at all) or from its row of
``<prefix>_session_fences`` (MariaDB, a MEMORY table of two integers). On real servers: the record stays as
it was over a loop of acquisitions while every holding shows its own fence, a fence that ended is never
confirmed (also for a waiter granted on a connection that held the name before), a request made to one
holding is not told to the connection's next one, and a store that opens (its clean-up) leaves a live
connection's record alone.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import distlock
from distlock._backends.sql import dialects as sql_dialects
from distlock._backends.sql import session as sql_session
from distlock._core.types import Claim, Mode
from tests.test_sql_faults import holding_conn_id, one, raw_conn


def run(conn: Any, sql: str, *params: object) -> None:
    cur = conn.cursor()
    cur.execute(sql, params or None)
    cur.close()


DBS = ["mysql", "postgres"]


def _url(base: str) -> tuple[str, str]:
    prefix = f"sc{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in base else "?"
    return prefix, f"{base}{sep}mode=session&table_prefix={prefix}"


@pytest.fixture(params=DBS)
def db(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def base(db: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{db}_url"))


@contextlib.contextmanager
def held_once(db: str, base: str, name: str) -> Iterator[tuple[str, Any, distlock.Store, distlock.Store, Any]]:
    """(prefix, an admin connection, a store, another store, a lock of the first) once the lock was held and
    released: its connection, idle in the store's pool, has its record."""
    prefix, url = _url(base)
    admin = raw_conn(db, base)
    try:
        with distlock.connect(url) as store, distlock.connect(url) as other:
            lock = store.lock(name, ttl=10)
            assert lock.acquire(timeout=5)
            lock.release()
            yield prefix, admin, store, other, lock
    finally:
        admin.close()


def test_a_loop_on_one_lock_writes_the_record_once_and_shows_each_fence(db: str, base: str, name: str) -> None:
    """The record is written by the connection's first grant only: an owner an admin wrote into it after that
    is still what ``inspect`` shows after three more acquisitions (it was rewritten by every acquire before),
    while each holding shows its own fence and an ended one's fence is never confirmed."""
    with held_once(db, base, name) as (prefix, admin, _, other, lock):
        run(admin, f"UPDATE {prefix}_session_holders SET owner = %s WHERE name = %s", "x:1:written-once", name)
        fences: list[int] = []
        for _ in range(3):
            assert lock.acquire(timeout=5)
            fence = lock.fence
            assert fence is not None
            info = other.inspect(name)
            assert info is not None and [(h.owner, h.fence) for h in info.holders] == [("x:1:written-once", fence)]
            assert other.check_fence(name, fence)
            assert not any(other.check_fence(name, f) for f in fences)  # an ended holding's fence
            fences.append(fence)
            lock.release()
        assert fences == sorted(set(fences))


def test_postgres_the_fence_is_the_holding_connection_s_application_name(postgres_url: str, name: str) -> None:
    prefix, url = _url(postgres_url)
    admin = raw_conn("postgres", postgres_url)
    try:
        with distlock.connect(url) as store:
            lock = store.lock(name, ttl=10)
            versions = set()
            for _ in range(3):
                assert lock.acquire(timeout=5)
                pid = holding_conn_id("postgres", admin, name)
                versions.add(str(one(admin, f"SELECT xmin FROM {prefix}_session_holders WHERE conn_id = %s", pid)))
                app = one(admin, "SELECT application_name FROM pg_stat_activity WHERE pid = %s", pid)
                assert app == f"distlock|{lock.fence}"
                lock.release()
                # the fence goes with the lock: the idle connection shows none
                assert one(admin, "SELECT application_name FROM pg_stat_activity WHERE pid = %s", pid) == "distlock"
            assert len(versions) == 1, "the record's row was written again by an acquire that changed nothing"
    finally:
        admin.close()


def test_a_new_owner_name_or_mode_on_the_connection_rewrites_the_record(postgres_url: str, name: str) -> None:
    _, url = _url(postgres_url)
    with distlock.connect(url) as store, distlock.connect(url) as other:
        first = store.lock(name, ttl=10)
        assert first.acquire(timeout=5)
        first.release()
        rw = store.rwlock(name + "/rw", ttl=10)  # the same pooled connection, another name and mode
        assert rw.read.acquire(timeout=5)
        info = other.inspect(name + "/rw")
        assert info is not None and info.holders[0].mode == "read" and info.holders[0].fence == rw.read.fence
        rw.read.release()
        assert first.acquire(timeout=5)
        info = other.inspect(name)
        assert info is not None and info.holders[0].mode == "lock" and info.holders[0].fence == first.fence
        first.release()


def test_a_waiter_shows_its_own_fence_on_a_connection_that_held_the_name_before(db: str, base: str, name: str) -> None:
    """A blocking wait on a connection whose last holding was of the same name: granted, it shows the fence of
    the new holding (MariaDB clears the connection's fence before the wait, PostgreSQL at the release)."""
    _, url = _url(base)
    with distlock.connect(url) as store, distlock.connect(url) as other, distlock.connect(url) as looker:
        lock = store.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        old = lock.fence
        lock.release()
        blocker = other.lock(name, ttl=10)
        assert blocker.acquire(timeout=5)
        done: list[int | None] = []
        seen = threading.Event()

        def wait() -> None:  # the same store and pooled connection, another owner (this thread)
            assert lock.acquire(timeout=10)
            done.append(lock.fence)
            seen.wait(10)
            lock.release()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.3)  # the waiter is blocked in the server (GET_LOCK / pg_advisory_lock)
        blocker.release()
        for _ in range(100):
            if done:
                break
            time.sleep(0.05)
        try:
            assert done and done[0] is not None and old is not None and done[0] > old
            info = looker.inspect(name)
            assert info is not None and [h.fence for h in info.holders] == done
            assert not looker.check_fence(name, old)
        finally:
            seen.set()
            t.join(10)


def check_now(store: distlock.Store) -> None:
    """The renewer's check of every holding of ``store``, now (its own runs every ttl/3)."""
    backend = store._backend
    assert all(backend.renew([p.claim for p in backend._pinned.values()]))  # type: ignore[attr-defined]


def test_a_request_to_an_ended_holding_is_not_told_to_the_next(db: str, base: str, name: str) -> None:
    """The record outlives a holding, so a request written for one holding must not reach the connection's next
    one (the request names the fence it was made to)."""
    prefix, url = _url(base)
    admin = raw_conn(db, base)
    try:
        with distlock.connect(url) as store, distlock.connect(url) as asker:
            lock = store.lock(name, ttl=30)  # checks every 10 s: none runs during this test
            assert lock.acquire(timeout=5)
            assert asker.request_release(name, "for the first holding")
            lock.release()  # before its check read the request
            asked = one(admin, f"SELECT asked FROM {prefix}_session_holders WHERE name = %s", name)
            assert asked is not None  # still in the record: the release does not write it
            assert lock.acquire(timeout=5)
            check_now(store)
            assert not lock.revoke_requested.is_set()
            assert asker.request_release(name, "for the second")
            check_now(store)
            assert lock.revoke_requested.wait(5) and lock.revoke_reason == "for the second"
            lock.release()
    finally:
        admin.close()


def test_a_store_that_opens_keeps_a_live_connection_s_record(db: str, base: str, name: str) -> None:
    """The clean-up at open deletes the records of connections that are gone, not of idle live ones: the
    record is not rewritten by the next acquire of the same lock, so it must still be there."""
    prefix, url = _url(base)
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        lock.release()
        with distlock.connect(url) as opened:  # its clean-up runs now, while the connection holds nothing
            assert lock.acquire(timeout=5)
            info = opened.inspect(name)
            assert info is not None and info.holders[0].fence == lock.fence
            assert ":connection:" not in info.holders[0].owner
            lock.release()
    admin = raw_conn(db, base)
    try:  # every connection of the store is gone: the next store's clean-up leaves no record
        with distlock.connect(url):
            pass
        assert one(admin, f"SELECT count(*) FROM {prefix}_session_holders") == 0
        if db == "mysql":
            assert one(admin, f"SELECT count(*) FROM {prefix}_session_fences") == 0
    finally:
        admin.close()


@pytest.mark.parametrize("mode", [Mode.EXCLUSIVE, Mode.READ])
@pytest.mark.parametrize("wait", [None, 1.5])
def test_the_steady_postgres_acquire_is_one_select_that_writes_no_row(mode: Mode, wait: float | None) -> None:
    dialect = sql_dialects.postgres("distlock")
    claim = Claim(name="n", mode=mode, token="t" * 32, owner="h:1:thread-1", ttl=30.0)
    steady = sql_session.session_acquire(dialect, "distlock", claim, wait, 30.0, True, recorded=True)
    assert steady.sql.startswith("SELECT ") and ";" not in steady.sql
    assert not any(word in steady.sql.upper() for word in ("INSERT", "UPDATE", "DELETE", "WITH "))
    first = sql_session.session_acquire(dialect, "distlock", claim, wait, 30.0, True)
    assert "INSERT INTO distlock_session_holders" in first.sql  # a connection's first grant writes its record
    # the answers: a grant's fence and connection, or nothing
    assert sql_session.session_acquired(dialect, [[(None, "distlock|42", 7)]], True) == (42, 7)
    assert sql_session.session_acquired(dialect, [[(None, None, 7)]], True) is None
    assert sql_session.session_acquired(dialect, [[("distlock|43", 8)]], True) == (43, 8)
    assert sql_session.session_acquired(dialect, [], True) is None


def test_a_release_request_is_read_only_by_the_holding_it_was_made_to() -> None:
    assert sql_session.session_request("42|abc|why", 42) == "abc|why"
    assert sql_session.session_request("41|abc|why", 42) is None
    assert sql_session.session_request(None, 42) is None


def test_the_steady_mariadb_acquire_writes_only_the_fence() -> None:
    dialect = sql_dialects.mysql("distlock")
    claim = Claim(name="n", mode=Mode.EXCLUSIVE, token="t" * 32, owner="h:1:thread-1", ttl=30.0)
    steady = sql_session.session_acquire(dialect, "distlock", claim, None, None, True, recorded=True)
    assert steady.sql.startswith("INSERT INTO distlock_session_fences ") and ";" not in steady.sql
    assert "session_holders" not in steady.sql
    first = sql_session.session_acquire(dialect, "distlock", claim, None, None, True)
    assert first.sql.startswith("REPLACE INTO distlock_session_holders ")  # the first grant writes the record
    # the fence INSERT's answer: rows changed and LAST_INSERT_ID; the connection id is the driver's
    assert sql_session.session_acquired(dialect, [[(1, 42)]], True, 7) == (42, 7)
    assert sql_session.session_acquired(dialect, [[(2, 43)]], True, 7) == (43, 7)
    assert sql_session.session_acquired(dialect, [[(0, 0)]], True, 7) is None
    assert sql_session.session_acquired(dialect, [[(1,)], [(0, 0)]], True, 7) is None  # a wait that timed out


def test_a_record_deleted_by_an_older_store_is_written_again(db: str, base: str, name: str) -> None:
    """A store of an earlier version deletes the record of a connection that holds nothing (its clean-up rule).
    The holding taken on it next shows as another application's until its renewal check sees the record gone;
    the connection's acquire after that writes it again."""
    with held_once(db, base, name) as (prefix, admin, store, other, lock):
        run(admin, f"DELETE FROM {prefix}_session_holders WHERE name = %s", name)
        assert lock.acquire(timeout=5)
        info = other.inspect(name)
        assert info is None or ":connection:" in info.holders[0].owner  # no record of ours
        check_now(store)
        lock.release()
        assert lock.acquire(timeout=5)
        info = other.inspect(name)
        assert info is not None and [h.fence for h in info.holders] == [lock.fence]
        assert ":connection:" not in info.holders[0].owner
        lock.release()


def test_only_a_mariadb_session_store_makes_the_fence_table(mysql_url: str) -> None:
    """A lease-mode store (an application that never uses session mode, whose user may lack CREATE on a
    deployment made before this table) opens without making it; a session-mode store makes it."""
    prefix, url = _url(mysql_url)
    lease_url = url.replace("mode=session&", "")
    admin = raw_conn("mysql", mysql_url)
    exists = "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = %s"
    try:
        with distlock.connect(lease_url):
            pass
        assert one(admin, exists, f"{prefix}_session_fences") == 0
        with distlock.connect(url):
            pass
        assert one(admin, exists, f"{prefix}_session_fences") == 1
    finally:
        admin.close()

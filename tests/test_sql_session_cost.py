"""What a PostgreSQL session-mode acquire writes, and that what ``inspect`` shows stays exact without it.

The holder record (``<prefix>_session_holders``: owner, mode, name of a connection's holding) is written only
when it changes; a loop on one lock writes no row after its first acquire, and the fence is read from the
holding connection's ``application_name`` (``pg_stat_activity``). These tests pin that down on a real
PostgreSQL: the record's row version (``xmin``) stays put over a loop of acquisitions while every holding
shows its own fence, a fence that ended is never confirmed, a request made to one holding is not told to the
connection's next one, and a store that opens (its clean-up) leaves a live connection's record alone.
"""

from __future__ import annotations

import uuid

import pytest

import distlock
from distlock._backends.sql import dialects as sql_dialects
from distlock._backends.sql import session as sql_session
from distlock._core.types import Claim, Mode
from tests.test_sql_faults import holding_conn_id, one, raw_conn


def _url(postgres_url: str) -> tuple[str, str]:
    prefix = f"sc{uuid.uuid4().hex[:8]}"
    sep = "&" if "?" in postgres_url else "?"
    return prefix, f"{postgres_url}{sep}mode=session&table_prefix={prefix}"


def test_a_loop_on_one_lock_writes_the_record_once_and_shows_each_fence(postgres_url: str, name: str) -> None:
    prefix, url = _url(postgres_url)
    admin = raw_conn("postgres", postgres_url)
    try:
        with distlock.connect(url) as store, distlock.connect(url) as other:
            lock = store.lock(name, ttl=10)
            versions, fences = set(), []
            for _ in range(4):
                assert lock.acquire(timeout=5)
                pid = holding_conn_id("postgres", admin, name)
                versions.add(str(one(admin, f"SELECT xmin FROM {prefix}_session_holders WHERE conn_id = %s", pid)))
                assert one(admin, "SELECT application_name FROM pg_stat_activity WHERE pid = %s", pid) == (
                    f"distlock|{lock.fence}"
                )
                info = other.inspect(name)
                assert info is not None and [h.fence for h in info.holders] == [lock.fence]
                assert other.check_fence(name, lock.fence)
                assert not any(other.check_fence(name, f) for f in fences)  # an ended holding's fence
                fences.append(lock.fence)
                lock.release()
                # the fence goes with the lock: the idle connection shows none
                assert one(admin, "SELECT application_name FROM pg_stat_activity WHERE pid = %s", pid) == "distlock"
            assert fences == sorted(set(fences))
            assert len(versions) == 1, "the record was rewritten by an acquire that changed nothing in it"
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


def check_now(store: distlock.Store) -> None:
    """The renewer's check of every holding of ``store``, now (its own runs every ttl/3)."""
    backend = store._backend
    assert all(backend.renew([p.claim for p in backend._pinned.values()]))  # type: ignore[attr-defined]


def test_a_request_to_an_ended_holding_is_not_told_to_the_next(postgres_url: str, name: str) -> None:
    """The record outlives a holding, so a request written for one holding must not reach the connection's next
    one (the request names the fence it was made to)."""
    prefix, url = _url(postgres_url)
    admin = raw_conn("postgres", postgres_url)
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


def test_a_store_that_opens_keeps_a_live_connection_s_record(postgres_url: str, name: str) -> None:
    """The clean-up at open deletes the records of connections that are gone, not of idle live ones: the
    record is not rewritten by the next acquire of the same lock, so it must still be there."""
    prefix, url = _url(postgres_url)
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        lock.release()
        with distlock.connect(url) as opened:  # its clean-up runs now, while the connection holds nothing
            assert lock.acquire(timeout=5)
            info = opened.inspect(name)
            assert info is not None and info.holders[0].fence == lock.fence
            assert not info.holders[0].owner.startswith("postgres:connection:")
            lock.release()
    admin = raw_conn("postgres", postgres_url)
    try:  # every connection of the store is gone: the next store's clean-up leaves no record
        with distlock.connect(url):
            pass
        assert one(admin, f"SELECT count(*) FROM {prefix}_session_holders") == 0
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
    pg, my = sql_dialects.postgres("distlock"), sql_dialects.mysql("distlock")
    assert sql_session.session_request(pg, "42|abc|why", 42) == "abc|why"
    assert sql_session.session_request(pg, "41|abc|why", 42) is None
    assert sql_session.session_request(pg, None, 42) is None
    assert sql_session.session_request(my, "abc|why", 42) == "abc|why"  # MariaDB's record is per acquire

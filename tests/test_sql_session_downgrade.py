"""PostgreSQL session mode's write-to-read downgrade: the write holder's connection takes the shared advisory
lock beside its exclusive one (granted at once), and the two holdings share that connection until both are
let go of. On a real PostgreSQL: a writer queued in the server stays out until the read ends, a connection
the server drops loses both holdings, ``break_lock`` breaks both, the holder records follow the holdings, and
the connection holds nothing once both are released, in either order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import distlock
from distlock._backends.sql import names as sn
from tests.test_sql_faults import holding_conn_id, kill, one, raw_conn, session_url, wait_for

TTL = 6.0  # renewals every 2 s


@pytest.fixture
def admin(postgres_url: str) -> Iterator[Any]:
    conn = raw_conn("postgres", postgres_url)
    try:
        yield conn
    finally:
        conn.close()


def _key_match(name: str) -> tuple[str, tuple[int, int]]:
    key = sn.advisory_key(name)
    return (
        "locktype = 'advisory' AND objsubid = 1 AND classid::bigint = ((%s::bigint >> 32) & 4294967295) "
        "AND objid::bigint = (%s::bigint & 4294967295)",
        (key, key),
    )


def locks_on(admin: Any, name: str) -> list[tuple[int, str, bool]]:
    """(pid, mode, granted) of every advisory lock on ``name``'s key, held or waited for."""
    where, args = _key_match(name)
    cur = admin.cursor()
    cur.execute(f"SELECT pid, mode, granted FROM pg_locks WHERE {where} ORDER BY pid, mode", args)
    rows = [(int(r[0]), str(r[1]), bool(r[2])) for r in cur.fetchall()]
    cur.close()
    return rows


def queued_writer(store: distlock.Store, name: str, admin: Any) -> tuple[threading.Thread, threading.Event]:
    """A writer of another store, waiting in the server for ``name`` (its acquire runs in a thread)."""
    got = threading.Event()

    def run() -> None:
        w = store.rwlock(name, ttl=TTL).write
        assert w.acquire(timeout=60)
        got.set()
        w.release()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_for(lambda: any(not granted for _, _, granted in locks_on(admin, name)), what="the writer queued")
    return t, got


def test_a_queued_writer_stays_out_until_the_downgrades_read_is_released(
    postgres_url: str, name: str, admin: Any
) -> None:
    url = session_url(postgres_url)
    with distlock.connect(url) as store, distlock.connect(url) as other:
        rw = store.rwlock(name, ttl=TTL)
        assert rw.write.acquire(timeout=5)
        write_fence = rw.write.fence
        assert write_fence is not None
        pid = holding_conn_id("postgres", admin, name)
        t, got = queued_writer(other, name, admin)
        assert rw.read.acquire(blocking=False)  # at once, the queued writer notwithstanding
        read_fence = rw.read.fence
        assert read_fence is not None and read_fence > write_fence  # each holding its own fence
        assert {(p, m) for p, m, g in locks_on(admin, name) if g} == {(pid, "ExclusiveLock"), (pid, "ShareLock")}
        info = store.inspect(name)
        assert info is not None
        assert sorted((h.mode, h.fence) for h in info.holders) == [("read", read_fence), ("write", write_fence)]
        assert len({h.owner for h in info.holders}) == 1
        assert other.check_fence(name, read_fence) and other.check_fence(name, write_fence)
        assert other.request_release(name, "w")  # made to the write, whose fence the connection shows
        assert rw.write.revoke_requested.wait(TTL / 3 + 2.5) and rw.write.revoke_reason == "w"

        rw.write.release()  # downgraded: the read alone, on the same connection
        assert [(p, m) for p, m, g in locks_on(admin, name) if g] == [(pid, "ShareLock")]
        info = store.inspect(name)
        assert info is not None and [(h.mode, h.fence) for h in info.holders] == [("read", read_fence)]
        assert not other.check_fence(name, write_fence)
        assert [i.name for i in store.list("")] == [name]
        time.sleep(TTL / 3 * 2 + 0.5)  # two renewals of the read alone
        assert not got.is_set(), "the writer got in beside the downgrade's read"
        assert rw.read.owned() and not rw.read.lost.is_set()
        assert not rw.read.revoke_requested.is_set()  # the write's request was not the read's
        assert store.request_release(name, "r")  # now made to the read, whose fence the connection shows
        assert rw.read.revoke_requested.wait(TTL / 3 + 2.5) and rw.read.revoke_reason == "r"

        rw.read.release()
        assert got.wait(30), "the queued writer must get in once the read is released"
        t.join(30)
        assert locks_on(admin, name) == []


def test_a_dropped_shared_connection_loses_both_holdings(postgres_url: str, name: str, admin: Any) -> None:
    with distlock.connect(session_url(postgres_url)) as store:
        rw = store.rwlock(name, ttl=TTL)
        assert rw.write.acquire(timeout=5)
        assert rw.read.acquire(blocking=False)
        kill("postgres", admin, holding_conn_id("postgres", admin, name))
        killed = time.monotonic()
        assert rw.write.lost.wait(TTL / 3 + 2.5) and rw.read.lost.wait(5), "both holdings must be told lost"
        assert time.monotonic() - killed < TTL / 3 + 5
        assert not rw.write.owned() and not rw.read.owned()
        with pytest.raises(distlock.LockLost):
            rw.write.release()
        with pytest.raises(distlock.LockLost):
            rw.read.release()
        other = store.rwlock(name, ttl=TTL).write
        assert other.acquire(timeout=5)  # the server freed both with the connection
        other.release()


def test_break_lock_on_a_downgrade_breaks_both_holdings(postgres_url: str, name: str, admin: Any) -> None:
    url = session_url(postgres_url)
    with distlock.connect(url) as store, distlock.connect(url) as breaker:
        rw = store.rwlock(name, ttl=TTL)
        assert rw.write.acquire(timeout=5)
        assert rw.read.acquire(blocking=False)
        rw.write.release()
        assert not breaker.rwlock(name, ttl=TTL).write.acquire(blocking=False)  # the downgrade's read holds
        assert breaker.break_lock(name)
        assert rw.read.lost.wait(TTL / 3 + 2.5), "the broken read must be told lost"
        assert locks_on(admin, name) == []
        w = breaker.rwlock(name, ttl=TTL).write
        assert w.acquire(timeout=5)
        w.release()

        rw = store.rwlock(name, ttl=TTL)  # and break_lock in the store that holds the pair
        assert rw.write.acquire(timeout=5)
        assert rw.read.acquire(blocking=False)
        assert store.break_lock(name)
        assert rw.write.lost.is_set() and rw.read.lost.is_set()
        assert locks_on(admin, name) == []


@pytest.mark.parametrize("first", ["read", "write"])
def test_both_releases_in_either_order_leave_the_connection_holding_nothing(
    postgres_url: str, name: str, admin: Any, first: str
) -> None:
    with distlock.connect(session_url(postgres_url)) as store:
        rw = store.rwlock(name, ttl=TTL)
        assert rw.write.acquire(timeout=5)
        pid = holding_conn_id("postgres", admin, name)
        assert rw.read.acquire(blocking=False)
        fences = {"write": rw.write.fence, "read": rw.read.fence}
        (rw.read if first == "read" else rw.write).release()
        left = "ExclusiveLock" if first == "read" else "ShareLock"
        assert [(p, m) for p, m, g in locks_on(admin, name) if g] == [(pid, left)]
        rest = "write" if first == "read" else "read"
        info = store.inspect(name)  # the holding left, with its own fence; none of the one released
        assert info is not None and [(h.mode, h.fence) for h in info.holders] == [(rest, fences[rest])]
        assert not store.check_fence(name, fences[first])
        (rw.write if first == "read" else rw.read).release()
        assert locks_on(admin, name) == []
        app = one(admin, "SELECT application_name FROM pg_stat_activity WHERE pid = %s", pid)
        assert app in (None, "distlock")  # no fence shown: the connection, back in the pool, holds nothing
        assert rw.write.acquire(timeout=5)  # and it takes the next holding as before
        rw.write.release()

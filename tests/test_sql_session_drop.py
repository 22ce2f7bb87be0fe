"""Session mode (MySQL/MariaDB ``GET_LOCK``, its row-lock variant, PostgreSQL advisory locks) when the server
drops the holder's connection: ``KILL CONNECTION`` / ``pg_terminate_backend`` from another connection, and the
idle timeout (``wait_timeout`` / ``idle_session_timeout``, the session lease) of a holder that stopped
renewing. The lock goes with the connection at once on the server; the holder must hear of it within one
renewal interval (ttl/3, the renewer's check on the pinned connection sees the connection gone), and a holder
that stopped renewing is told before the server lets anyone else in. Real MariaDB and PostgreSQL.
"""

from __future__ import annotations

import time

import pytest

import distlock
from tests.test_sql_faults import holding_conn_id, kill, one, raw_conn, wait_for

VARIANTS = {
    "mysql_get_lock": ("mysql", "mode=session"),
    "mysql_row_lock": ("mysql", "mode=session&session_lock=row"),
    "postgres_advisory": ("postgres", "mode=session"),
}


@pytest.fixture(params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    db, query = VARIANTS[str(request.param)]
    base = str(request.getfixturevalue(f"{db}_url"))
    return db, base, f"{base}{'&' if '?' in base else '?'}{query}"


def row_holder(admin: object, name: str) -> int:
    """The connection holding row-lock mode's lock on ``name`` (its record; that variant has no GET_LOCK)."""
    return int(one(admin, "SELECT conn_id FROM distlock_session_holders WHERE name = %s", name))


def test_a_killed_connection_is_lost_within_one_renewal(variant: tuple[str, str, str], name: str) -> None:
    db, base, url = variant
    admin = raw_conn(db, base)
    try:
        with distlock.connect(url) as store:
            ttl = 6.0  # renewals every 2 s: a kill right after the acquire is seen at the first one
            lock = store.lock(name, ttl=ttl)
            assert lock.acquire(timeout=5)
            cid = row_holder(admin, name) if "row" in url else holding_conn_id(db, admin, name)
            kill(db, admin, cid)
            killed = time.monotonic()
            assert lock.lost.wait(ttl / 3 + 1.5), "the renewer's check must see the dropped connection"
            assert time.monotonic() - killed < ttl / 3 + 1.5
            assert not lock.owned()
            with pytest.raises(distlock.LockLost):
                lock.release()
            other = store.lock(name, ttl=2)
            assert other.acquire(timeout=5)  # the server freed it with the connection
            other.release()
    finally:
        admin.close()


def test_an_idle_timeout_is_told_before_anyone_else_gets_in(variant: tuple[str, str, str], name: str) -> None:
    """A holder that stopped renewing (auto_renew=False, as a stalled renewer): the server ends its connection
    at the idle timeout (the TTL, MySQL: rounded up to whole seconds), and by then ``lost`` has fired."""
    url = variant[2]
    with distlock.connect(url) as store, distlock.connect(url) as rival:
        lock = store.lock(name, ttl=1.0, auto_renew=False)
        assert lock.acquire(timeout=5)
        started = time.monotonic()
        probe = rival.lock(name, ttl=5)
        wait_for(lambda: probe.acquire(blocking=False), timeout=10, what="the server to free the idle holder's lock")
        assert lock.lost.is_set(), "the holder must be told before another gets the lock"
        assert 0.9 <= time.monotonic() - started
        assert probe.fence is not None and lock.fence is not None and probe.fence > lock.fence
        with pytest.raises(distlock.LockLost):
            lock.release()
        probe.release()

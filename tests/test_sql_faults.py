"""MySQL/MariaDB and PostgreSQL: connections killed from the server side, interop with plain connection-bound
locks, the idle timeout as the session-mode lease, wrong passwords, and a server restart while locks are held.

Kill -9 of a holder process and SIGSTOP past the TTL run for all four (``mysql``, ``mysql_session``,
``postgres``, ``postgres_session``) in ``tests/test_processes.py``; the conformance suite runs on all four.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pymysql
import pytest

import distlock
from distlock._backends.sql import names as sn
from tools.servers.mysql import start_mariadb
from tools.servers.postgres import start_postgres, stop_postgres
from tools.servers.proc import ServerProc, free_port, workdir

DBS = ["mysql", "postgres"]


def wait_for(pred: Callable[[], object], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(params=DBS)
def db(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(db: str, request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{db}_url"))


def raw_conn(db: str, url: str) -> Any:
    """A plain driver connection to the same database (what another application would use)."""
    cfg = distlock._url.parse_url(url)
    host, port = cfg.hosts[0]
    dbname = cfg.path.lstrip("/")
    if db == "mysql":
        return pymysql.connect(
            host=host, port=port, user=cfg.username, password=cfg.password, database=dbname, autocommit=True
        )
    return psycopg.connect(host=host, port=port, user=cfg.username, password=cfg.password, dbname=dbname,
                           autocommit=True)  # fmt: skip


def one(conn: Any, sql: str, *params: object) -> Any:
    cur = conn.cursor()
    cur.execute(sql, params or None)
    row = cur.fetchone()
    cur.close()
    return None if row is None else row[0]


def session_url(url: str) -> str:
    return url + ("&" if "?" in url else "?") + "mode=session"


def holding_conn_id(db: str, admin: Any, name: str) -> int:
    """The server's id of the connection that holds session-mode lock ``name``, asked of the server."""
    if db == "mysql":
        return int(one(admin, "SELECT IS_USED_LOCK(%s)", sn.get_lock_name(name)))
    key = sn.advisory_key(name)
    return int(
        one(
            admin,
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
            "AND classid::bigint = ((%s::bigint >> 32) & 4294967295) AND objid::bigint = (%s::bigint & 4294967295)",
            key,
            key,
        )
    )


def kill(db: str, admin: Any, conn_id: int) -> None:
    if db == "mysql":
        one(admin, "SELECT 1")
        admin.cursor().execute(f"KILL CONNECTION {int(conn_id)}")
    else:
        assert one(admin, "SELECT pg_terminate_backend(%s)", conn_id)


def test_session_mode_connection_killed_from_server_sets_lost(db: str, url: str, name: str) -> None:
    admin = raw_conn(db, url)
    with distlock.connect(session_url(url)) as store:
        lock = store.lock(name, ttl=1.5)
        assert lock.acquire(timeout=5)
        lost = threading.Event()
        lock.on_lost(lambda _lock: lost.set())
        kill(db, admin, holding_conn_id(db, admin, name))
        assert lock.lost.wait(10), "the renewer must notice the dropped connection"
        assert lost.wait(5)
        other = store.lock(name, ttl=5)
        assert other.acquire(timeout=5)  # the server freed it with the connection
        assert other.fence is not None
        with pytest.raises(distlock.LockLost):
            lock.release()
        other.release()
    admin.close()


def test_lease_mode_survives_killed_pool_connections(db: str, url: str, name: str) -> None:
    """Lease mode holds no lock on a connection: killing the store's connections costs nothing."""
    admin = raw_conn(db, url)
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=1.5)
        assert lock.acquire(timeout=5)
        if db == "mysql":
            cur = admin.cursor()
            cur.execute("SELECT id FROM information_schema.processlist WHERE user = %s AND id <> CONNECTION_ID()",
                        ("distlock",))  # fmt: skip
            ids = [int(r[0]) for r in cur.fetchall()]
        else:
            cur = admin.cursor()
            cur.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'distlock'")
            ids = [int(r[0]) for r in cur.fetchall()]
        for cid in ids:
            try:
                kill(db, admin, cid)
            except (pymysql.err.MySQLError, AssertionError):
                pass  # gone meanwhile
        time.sleep(2.5)  # > TTL: renewals ran on fresh connections
        assert not lock.lost.is_set()
        assert lock.owned()
        assert not store.lock(name).acquire(blocking=False)
        lock.release()
    admin.close()


def test_session_lock_excludes_plain_connection_bound_locks(db: str, url: str, name: str) -> None:
    """A plain ``GET_LOCK(name)`` / ``pg_advisory_lock(key)`` and a session-mode lock exclude each other."""
    raw = raw_conn(db, url)
    if db == "mysql":
        take, drop = "SELECT GET_LOCK(%s, 0)", "SELECT RELEASE_LOCK(%s)"
        key: object = sn.get_lock_name(name)
    else:
        take, drop = "SELECT pg_try_advisory_lock(%s)", "SELECT pg_advisory_unlock(%s)"
        key = sn.advisory_key(name)
    with distlock.connect(session_url(url)) as store:
        lock = store.lock(name, ttl=10)
        assert bool(one(raw, take, key))  # the other application holds it
        assert not lock.acquire(timeout=0.3)
        got, done = threading.Event(), threading.Event()

        def waiter() -> None:  # the holding belongs to this thread: it releases it too
            if lock.acquire(timeout=20):
                got.set()
                done.wait(20)
                lock.release()

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        assert not got.is_set()
        assert bool(one(raw, drop, key))
        assert got.wait(10), "the server hands the lock over when the other application lets go"
        assert not bool(one(raw, take, key))  # now distlock holds it
        done.set()
        t.join(10)
        assert bool(one(raw, take, key))
        assert bool(one(raw, drop, key))
    raw.close()


def test_long_names_map_to_a_full_hash(db: str, url: str, name: str) -> None:
    long_a = name + "x" * 200 + "a"
    long_b = name + "x" * 200 + "b"
    raw = raw_conn(db, url)
    with distlock.connect(session_url(url)) as store:
        a, b = store.lock(long_a, ttl=10), store.lock(long_b, ttl=10)
        assert a.acquire(blocking=False) and b.acquire(blocking=False)
        if db == "mysql":
            mapped = sn.get_lock_name(long_a)
            assert len(mapped) <= 64 and mapped != sn.get_lock_name(long_b)
            assert one(raw, "SELECT IS_USED_LOCK(%s)", mapped) is not None
        else:
            assert sn.advisory_key(long_a) != sn.advisory_key(long_b)
            assert not one(raw, "SELECT pg_try_advisory_lock(%s)", sn.advisory_key(long_a))
        a.release()
        b.release()
    raw.close()


def test_session_mode_refuses_what_it_cannot_do(db: str, url: str, name: str) -> None:
    with distlock.connect(session_url(url)) as store:
        with pytest.raises(distlock.UnsupportedFeature):
            store.semaphore(name, permits=2)
        with pytest.raises(distlock.UnsupportedFeature):
            store.lock(name, fair=True)
        if db == "mysql":
            with pytest.raises(distlock.UnsupportedFeature):
                store.rwlock(name)
        else:
            rw = store.rwlock(name, ttl=10)
            with rw.read:
                assert store.inspect(name) is not None


def test_session_mode_idle_holder_is_freed_by_the_server(db: str, url: str, name: str) -> None:
    """auto_renew=False: the connection's idle timeout (the TTL) ends the session and frees the lock."""
    with distlock.connect(session_url(url)) as store:
        first = store.lock(name, ttl=1.0, auto_renew=False)
        started = time.monotonic()  # before the grant: its reply may reach a busy client late
        assert first.acquire()
        second = store.lock(name, ttl=10)
        assert second.acquire(timeout=15)
        assert time.monotonic() - started >= 0.8
        assert second.fence is not None and first.fence is not None and second.fence > first.fence
        with pytest.raises(distlock.LockLost):
            first.release()
        second.release()


def test_wrong_password_and_dead_port_are_backend_errors_without_secrets(db: str, url: str) -> None:
    bad = url.replace("s3cret-pw", "wrong-pw-123")
    with pytest.raises(distlock.BackendError) as err:
        distlock.connect(bad)
    assert "wrong-pw-123" not in str(err.value)
    scheme = url.split("://")[0]
    started = time.monotonic()
    with pytest.raises(distlock.BackendError) as err:
        distlock.connect(f"{scheme}://u:topsecret@127.0.0.1:{free_port()}/x?connect_timeout=2")
    assert time.monotonic() - started < 15
    assert "topsecret" not in str(err.value)
    with pytest.raises(distlock.ConfigError):
        distlock.connect(url + ("&" if "?" in url else "?") + "mode=nope")


def test_lease_rows_use_the_database_clock(db: str, url: str, name: str) -> None:
    raw = raw_conn(db, url)
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=30)
        assert lock.acquire()
        now = float(one(raw, "SELECT UNIX_TIMESTAMP(NOW(6))" if db == "mysql" else "SELECT extract(epoch from now())"))
        acquired, expires = (
            float(x)
            for x in (
                one(raw, "SELECT acquired_at FROM distlock_holders WHERE token IS NOT NULL AND name = %s", name),
                one(raw, "SELECT expires_at FROM distlock_holders WHERE name = %s", name),
            )
        )
        assert abs(now - acquired) < 5
        assert 29 < expires - acquired <= 30.5
        lock.release()
    raw.close()


# -- a server restart while locks are held and waited on (own servers: they are restarted) ---------------
def start(db: str, d: Path, port: int | None = None) -> ServerProc:
    return start_mariadb(d, db, port) if db == "mysql" else start_postgres(d, db, port)


def stop(db: str, srv: ServerProc) -> None:
    stop_postgres(srv) if db == "postgres" else srv.stop(grace=20)


@pytest.fixture(scope="module", params=DBS)
def own_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, list[ServerProc]]]:
    """A server of our own (it is restarted); the list holds the current process."""
    db = str(request.param)
    with workdir(f"{db}-restart") as d:
        current = [start(db, d)]
        try:
            yield db, current
        finally:
            stop(db, current[0])


def test_server_restart_while_held_and_waited_on(own_server: tuple[str, list[ServerProc]], name: str) -> None:
    db, current = own_server
    srv = current[0]
    with distlock.connect(srv.url) as store, distlock.connect(srv.url) as other:
        lock = store.lock(name, ttl=6)
        assert lock.acquire()
        fence = lock.fence
        result: list[bool] = []
        waiter_lock = other.lock(name, ttl=6)
        errors: list[BaseException] = []
        fences: list[int | None] = []

        def waiter() -> None:  # a waiter sees BackendError while the server is down, and tries again
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                try:
                    if waiter_lock.acquire(timeout=deadline - time.monotonic()):
                        result.append(True)
                        fences.append(waiter_lock.fence)
                        waiter_lock.release()
                    return
                except distlock.BackendError as exc:
                    errors.append(exc)
                    time.sleep(0.2)

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        stop(db, srv)
        current[0] = start(db, srv.workdir.parent, srv.port)
        time.sleep(1.0)
        assert not result, "the waiter must not get a lock that is still held"
        wait_for(lambda: lock.owned(), 15, "the holder to see its lease again")
        assert not lock.lost.is_set()
        lock.release()
        t.join(40)
        assert result == [True]
        assert fence is not None and fences[0] is not None and fences[0] > fence


def test_fences_survive_a_restart_and_tables_are_idempotent(
    own_server: tuple[str, list[ServerProc]], name: str
) -> None:
    url = own_server[1][0].url
    with distlock.connect(url) as a:
        lock = a.lock(name, ttl=5)
        with lock:
            f1 = lock.fence
    with distlock.connect(url) as b:  # the tables exist: CREATE ... IF NOT EXISTS is a no-op
        lock = b.lock(name, ttl=5)
        with lock:
            assert lock.fence is not None and f1 is not None and lock.fence > f1


@pytest.mark.parametrize("mode", ["lease", "session"])
def test_concurrent_first_use_creates_the_tables_once(db: str, url: str, mode: str) -> None:
    """Eight stores open at once on a table prefix nobody used yet: every one opens (no duplicate-type or
    duplicate-table error from racing ``CREATE ... IF NOT EXISTS``) and they exclude each other."""
    prefix = f"race_{mode}_{time.monotonic_ns() % 10**9}"
    target = (
        url + ("&" if "?" in url else "?") + f"table_prefix={prefix}" + ("&mode=session" if mode == "session" else "")
    )
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []
    inside = [0]
    overlaps = [0]
    guard = threading.Lock()

    def worker() -> None:
        try:
            barrier.wait(10)
            with distlock.connect(target) as store:
                with store.lock("first-use", ttl=10, timeout=30):
                    with guard:
                        inside[0] += 1
                        overlaps[0] += inside[0] > 1
                    time.sleep(0.005)
                    with guard:
                        inside[0] -= 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [], errors
    assert overlaps == [0]


def test_mysql_portable_session_layout(mysql_url: str, name: str) -> None:
    """The layout for MySQL servers without SEQUENCE/RETURNING (fence row bumped in a multi-statement)."""
    with distlock.connect(session_url(mysql_url)) as store:
        backend: Any = store._backend
        assert backend.fast_session  # MariaDB >= 10.5 here
        backend.fast_session = False
        lock = store.lock(name, ttl=10)
        fences = []
        for _ in range(2):
            assert lock.acquire(timeout=5)
            fences.append(lock.fence)
            info = store.inspect(name)
            assert info is not None and [h.fence for h in info.holders] == [lock.fence]
            assert not store.lock(name).acquire(timeout=0.2)
            lock.release()
            assert store.inspect(name) is None
        assert fences[0] is not None and fences[1] is not None and fences[1] > fences[0]


def test_mysql_row_lock_mode_interop_and_refusals(mysql_url: str, name: str) -> None:
    """``session_lock=row``: a plain ``SELECT ... FOR UPDATE`` on the name's row excludes the lock and the
    other way round; rwlock works, semaphores are refused; ``session_lock`` is validated."""
    raw = raw_conn("mysql", mysql_url)
    with distlock.connect(session_url(mysql_url) + "&session_lock=row") as store:
        lock = store.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        cur = raw.cursor()
        cur.execute("START TRANSACTION")
        with pytest.raises(pymysql.err.OperationalError):
            cur.execute("SELECT 1 FROM distlock_rows WHERE name_key = %s FOR UPDATE NOWAIT", (sn.name_key(name),))
        cur.execute("ROLLBACK")
        lock.release()
        cur.execute("START TRANSACTION")
        cur.execute("SELECT 1 FROM distlock_rows WHERE name_key = %s FOR UPDATE NOWAIT", (sn.name_key(name),))
        assert not store.lock(name).acquire(timeout=0.2)  # the other application holds the row
        cur.execute("ROLLBACK")
        assert lock.acquire(timeout=5)
        lock.release()
        with pytest.raises(distlock.UnsupportedFeature):
            store.semaphore(name, permits=2)
    with pytest.raises(distlock.ConfigError):
        distlock.connect(session_url(mysql_url) + "&session_lock=nope")
    raw.close()


def test_dead_waiter_does_not_stall_a_fair_queue(db: str, url: str, name: str) -> None:
    """F12 in docs/safety.md: a queued waiter that died (its entry is no longer refreshed) drops out at its deadline."""
    raw = raw_conn(db, url)
    now_sql = "UNIX_TIMESTAMP(NOW(6))" if db == "mysql" else "extract(epoch from clock_timestamp())"
    with distlock.connect(url) as store:
        holder = store.lock(name, ttl=10, fair=True)
        assert holder.acquire()
        cur = raw.cursor()
        cur.execute(  # a waiter that queued, then died: nobody refreshes its deadline (1.5 s ahead)
            "INSERT INTO distlock_queue (token, name_key, name, mode, expires_at) "
            f"VALUES (%s, %s, %s, %s, {now_sql} + 1.5)",
            ("dead-waiter-token", sn.name_key(name), name, "lock"),
        )
        holder.release()
        started = time.monotonic()
        fair = store.lock(name, ttl=10, fair=True)
        assert fair.acquire(timeout=15), "the dead waiter stalled the queue"
        assert time.monotonic() - started < 10
        fair.release()
        assert store.inspect(name) is None
    raw.close()


def test_mysql_lease_bell_is_held_exactly_while_the_name_is(mysql_url: str, name: str) -> None:
    """MySQL lease mode's wake-up hint: the holder's companion GET_LOCK ("bell") is taken and let go by the
    store's bell worker, in the order asked for, while acquire() and release() return without waiting for it.
    A holding's bell must never outlive it (a GET_LOCK queued behind its RELEASE_LOCK would keep the next
    waiters of the name blocked until their wait slice ends): after quick acquire/release pairs, each with its
    hold and drop queued back to back, the bell is free; while a holding lasts, it is held."""
    from distlock._url import parse_url

    cfg = parse_url(mysql_url)
    host, port = cfg.hosts[0]
    probe = pymysql.connect(
        host=host, port=port, user=cfg.username, password=cfg.password, database=cfg.path.lstrip("/"), autocommit=True
    )

    def bell_used() -> bool:
        with probe.cursor() as cur:
            cur.execute("SELECT IS_USED_LOCK(%s)", (sn.bell_name(sn.name_key(name)),))
            row = cur.fetchone()
            return row is not None and row[0] is not None

    def until(want: bool) -> None:
        deadline = time.monotonic() + 5
        while bell_used() != want:
            assert time.monotonic() < deadline, f"the bell stayed {'free' if want else 'held'}"
            time.sleep(0.01)

    try:
        with distlock.connect(mysql_url) as store:
            lock = store.lock(name, ttl=10)
            for _ in range(50):
                assert lock.acquire(timeout=5)
                lock.release()
            until(False)
            assert lock.acquire(timeout=5)
            until(True)
            lock.release()
            until(False)
    finally:
        probe.close()

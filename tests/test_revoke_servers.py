"""Revocation leaves nothing per free name, on the servers themselves: a request for a free name writes nothing,
and a request goes with the holding it was made to (its release, or the end of its lease), in the name's own
keys (Redis: a field of the name's details hash; ZooKeeper: the holder node's data). tests/_async/test_revoke.py
checks what a holder sees on every backend."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from kazoo.client import KazooClient

import distlock
import distlock._url
from distlock._backends.zookeeper import layout


@pytest.fixture
def name() -> str:
    return f"rv-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    yield client
    client.close()


def keys_with(client: redis.Redis, text: str) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match="*" + text + "*", count=1000))


def test_redis_a_request_lives_in_the_name_s_details_and_goes_with_the_release(
    redis_url: str, raw: redis.Redis, name: str
) -> None:
    with distlock.connect(redis_url) as store:
        assert store.request_release(name, "x") is False
        assert keys_with(raw, name) == []  # a free name: nothing written
        lock = store.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        assert store.request_release(name, "x") is True
        assert keys_with(raw, name) == sorted([name, "{" + name + "}:i"])  # no key of its own
        fields = sorted(f.decode() for f in raw.hkeys("{" + name + "}:i"))
        assert len(fields) == 2 and fields[1] == fields[0] + "!r"
        lock.release()
        assert keys_with(raw, name) == []


def test_redis_a_request_goes_with_a_lease_that_ran_out(redis_url: str, raw: redis.Redis, name: str) -> None:
    with distlock.connect(redis_url) as store:
        lock = store.lock(name, ttl=0.5, auto_renew=False)
        assert lock.acquire(timeout=5)
        assert store.request_release(name, "x") is True
        deadline = time.monotonic() + 10
        while keys_with(raw, name) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert keys_with(raw, name) == []
        assert lock.lost.wait(5)


def test_redis_a_semaphore_holder_s_request_outlives_another_grant(redis_url: str, name: str) -> None:
    """A grant next to a live holder forgets the details of holders that died: never a live one's request."""
    with distlock.connect(redis_url) as store:
        a = store.semaphore(name, permits=3, ttl=3)
        assert a.acquire(timeout=5)
        assert store.request_release(name, "x") is True
        b = store.semaphore(name, permits=3, ttl=3)
        assert b.acquire(timeout=5)  # before a's next renewal reads its request
        assert a.revoke_requested.wait(10)
        assert not b.revoke_requested.wait(2)
        a.release()
        b.release()


def test_zookeeper_a_request_writes_nothing_for_a_free_name_and_goes_with_the_node(
    zookeeper_url: str, name: str
) -> None:
    hosts = zookeeper_url.split("://", 1)[1].split("?", 1)[0].split("/", 1)[0]
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(10)
    try:
        with distlock.connect(zookeeper_url) as store:
            path = layout.lock_path(name)
            assert store.request_release(name, "x") is False
            assert zk.exists(path) is None  # not even the lock's parent
            lock = store.lock(name)
            assert lock.acquire(timeout=5)
            assert store.request_release(name, "why") is True
            zk.sync(path)  # this client's server may not have applied what the store's session wrote yet
            (child,) = zk.get_children(path)
            data, _ = zk.get(f"{path}/{child}")
            assert layout.revoke_reason(data) == "why"
            info = store.inspect(name)
            assert info is not None and not info.holders[0].owner.startswith("foreign:")  # owner kept
            lock.release()
            zk.sync(path)
            assert zk.get_children(path) == [] if zk.exists(path) else True
    finally:
        zk.stop()
        zk.close()


def test_sqlite_a_file_made_before_release_requests_gets_the_column(tmp_path: Path) -> None:
    """A table of an earlier version (no ``revoke`` column, not even ``proc``) keeps working: the column is
    added at connect, and a holder there is asked, and hears of it, with its next renewal."""
    path = tmp_path / "locks.db"
    conn = sqlite3.connect(str(path))
    conn.executescript(
        """CREATE TABLE distlock_holders (token TEXT PRIMARY KEY, name TEXT NOT NULL, owner TEXT NOT NULL,
               mode TEXT NOT NULL, fence INTEGER NOT NULL, expires_at REAL NOT NULL, acquired_at REAL NOT NULL);
           INSERT INTO distlock_holders VALUES ('t', 'old', 'h:1:x', 'lock', 7, 1e12, 0);"""
    )
    conn.close()
    with distlock.connect(f"sqlite:///{path}") as s:
        assert s.request_release("old", "the old row") is True  # a row of the old table is asked too
        lock = s.lock("new", ttl=1.5)
        assert lock.acquire(timeout=5)
        assert s.request_release("new", "r") is True
        assert lock.revoke_requested.wait(10) and lock.revoke_reason == "r"
        lock.release()
        assert s.request_release("new") is False
    conn = sqlite3.connect(str(path))
    assert "revoke" in {row[1] for row in conn.execute("PRAGMA table_info(distlock_holders)")}
    assert conn.execute("SELECT count(*) FROM distlock_holders WHERE name = 'new'").fetchone() == (0,)
    conn.close()


@pytest.mark.parametrize(
    ("db", "options", "table"),
    [
        ("mysql", "", "holders"),
        ("postgres", "", "holders"),
        ("mysql", "&mode=session", "session_holders"),
        ("postgres", "&mode=session", "session_holders"),
        ("mysql", "&mode=session&session_lock=row", "session_holders"),
    ],
)
def test_sql_a_table_made_before_release_requests_gets_the_column(
    db: str, options: str, table: str, request: pytest.FixtureRequest, name: str
) -> None:
    """A table of an earlier version (no ``asked`` column: the lease mode's holder rows, the session mode's
    holder records) keeps working: the column is added when a store opens, a request goes into the holder's
    row or record, its renewal (the session check) reads it back, and a free name gets nothing. In session
    mode a released holder's record stays, and the connection's next holding starts clean."""
    url = str(request.getfixturevalue(f"{db}_url"))
    prefix = f"rv{uuid.uuid4().hex[:8]}"
    url = f"{url}{'&' if '?' in url else '?'}table_prefix={prefix}{options}"
    with distlock.connect(url):
        pass  # tables made
    conn = raw_conn(db, url)
    try:
        run(conn, f"ALTER TABLE {prefix}_{table} DROP COLUMN asked")
        with distlock.connect(url) as store, distlock.connect(url) as asker:
            lock = store.lock(name, ttl=1.5)
            assert lock.acquire(timeout=5)
            assert asker.request_release(name, "r") is True
            assert lock.revoke_requested.wait(10) and lock.revoke_reason == "r"
            lock.release()
            assert asker.request_release(name) is False
            again = store.lock(name, ttl=1.5)
            assert again.acquire(timeout=5)
            assert not again.revoke_requested.wait(1.5)
            again.release()
        assert "asked" in rows(conn, f"SELECT * FROM {prefix}_{table} WHERE 1 = 0", described=True)
    finally:
        conn.close()


def raw_conn(db: str, url: str) -> Any:
    cfg = distlock._url.parse_url(url)
    host, port = cfg.hosts[0]
    dbname = cfg.path.lstrip("/")
    if db == "mysql":
        import pymysql

        return pymysql.connect(
            host=host, port=port, user=cfg.username, password=cfg.password, database=dbname, autocommit=True
        )
    import psycopg

    return psycopg.connect(
        host=host, port=port, user=cfg.username, password=cfg.password, dbname=dbname, autocommit=True
    )


def run(conn: Any, sql: str) -> None:
    cur = conn.cursor()
    cur.execute(sql)
    cur.close()


def rows(conn: Any, sql: str, described: bool = False) -> list[Any]:
    cur = conn.cursor()
    cur.execute(sql)
    out = [d[0] for d in cur.description] if described else list(cur.fetchall())
    cur.close()
    return out


def test_mysql_row_lock_holder_record_outlives_another_store_s_open(mysql_url: str, name: str) -> None:
    """The open's clean-up judged every holder record by GET_LOCK, which a row-lock holder never takes: any
    store that opened deleted the records of the live row-lock holders, and ``inspect`` said free."""
    url = f"{mysql_url}{'&' if '?' in mysql_url else '?'}mode=session&session_lock=row"
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire(timeout=5)
        with distlock.connect(url) as other:
            info = other.inspect(name)
            assert info is not None and len(info.holders) == 1
            assert other.request_release(name, "x") is True
        lock.release()



def test_zookeeper_a_lock_whose_name_holds_latch_gets_its_reason(zookeeper_url: str, name: str) -> None:
    """A node is an election's by its own name, not by its path: a lock named ``...latch-...`` is a lock."""
    with distlock.connect(zookeeper_url) as store:
        lock = store.lock(f"{name}-latch-x")
        assert lock.acquire(timeout=5)
        assert store.request_release(f"{name}-latch-x", "mine") is True
        assert lock.revoke_requested.wait(10)
        assert lock.revoke_reason == "mine"
        lock.release()

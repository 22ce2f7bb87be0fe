"""Fenced writes where the data lives (``distlock.fencing``): a stale holder's write is refused by the resource.

Each test takes two real holdings of one lock in turn (the old holder's fence, then the new one's, which is
higher), lets the new holder write, then has the old one try: the resource must refuse it and keep the new
holder's data. On sqlite3, PostgreSQL (psycopg, sync and asyncio), MariaDB (PyMySQL, aiomysql), Redis (a key
and a hash field) and a local file; and ``store.check_fence`` asks the lock's store itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

import distlock
from distlock import fencing
from tests.test_sql_faults import raw_conn


@pytest.fixture
def fences(tmp_path: Path) -> tuple[int, int]:
    """(old, new): two holdings of one lock, one after the other."""
    with distlock.connect(f"sqlite:///{tmp_path}/locks.db") as store:
        lock = store.lock("fencing/resource", ttl=10)
        with lock as held:
            old = held.fence
        with lock as held:
            new = held.fence
    assert old < new
    return old, new


def _write(conn: Any, resource: str, fence: int, value: str) -> None:
    """What an application does: the check, then its write, in one transaction."""
    try:
        fencing.check(conn, resource, fence)
        cur = conn.cursor()
        cur.execute(_sql(conn, "UPDATE accounts SET balance = %s WHERE id = %s"), (value, resource))
        cur.close()
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


def _sql(conn: Any, text: str) -> str:
    return text.replace("%s", "?") if isinstance(conn, sqlite3.Connection) else text


@pytest.fixture(params=["sqlite", "postgres", "mysql"])
def conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        c: Any = sqlite3.connect(tmp_path / "data.db")
    else:
        c = raw_conn(request.param, str(request.getfixturevalue(f"{request.param}_url")))
        c.autocommit = False
    table = "accounts"
    cur = c.cursor()
    size = "VARCHAR(64)" if request.param == "mysql" else "TEXT"
    cur.execute(f"CREATE TABLE IF NOT EXISTS {table} (id {size} PRIMARY KEY, balance TEXT)")
    cur.close()
    c.commit()
    fencing.create_table(c)
    try:
        yield c
    finally:
        c.rollback()
        c.close()


def _balance(conn: Any, resource: str) -> Any:
    cur = conn.cursor()
    cur.execute(_sql(conn, "SELECT balance FROM accounts WHERE id = %s"), (resource,))
    row = cur.fetchone()
    cur.close()
    conn.commit()
    return None if row is None else row[0]


def test_sql_refuses_the_stale_writer_and_keeps_the_new_one_s_data(conn: Any, fences: tuple[int, int]) -> None:
    old, new = fences
    resource = f"acct-{uuid.uuid4().hex[:8]}"
    cur = conn.cursor()
    cur.execute(_sql(conn, "INSERT INTO accounts (id, balance) VALUES (%s, %s)"), (resource, "0"))
    cur.close()
    conn.commit()
    _write(conn, resource, new, "100")  # the new holder
    _write(conn, resource, new, "150")  # its second write: equal fences pass
    with pytest.raises(distlock.StaleFence, match="stale"):
        _write(conn, resource, old, "-999")  # the old holder, woken from its pause
    assert _balance(conn, resource) == "150"
    _write(conn, resource, new + 1, "200")  # a later holder goes on
    assert _balance(conn, resource) == "200"


def test_sql_check_holds_the_resource_until_the_transaction_ends(
    tmp_path: Path, postgres_url: str, fences: tuple[int, int]
) -> None:
    """A stale writer that checks while the new holder's transaction is open waits for it, then is refused:
    it cannot slip in between the new holder's check and its commit."""
    old, new = fences
    resource = f"acct-{uuid.uuid4().hex[:8]}"
    a = raw_conn("postgres", postgres_url)
    b = raw_conn("postgres", postgres_url)
    a.autocommit = b.autocommit = False
    fencing.create_table(a)
    try:
        fencing.check(a, resource, new)  # a's transaction stays open
        outcome: list[BaseException | None] = []

        def stale() -> None:
            try:
                fencing.check(b, resource, old)
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
                outcome.append(exc)
            finally:
                b.rollback()

        t = threading.Thread(target=stale)
        t.start()
        time.sleep(0.5)
        assert not outcome, "the stale check did not wait for the open transaction"
        a.commit()
        t.join(10)
        assert len(outcome) == 1 and isinstance(outcome[0], distlock.StaleFence), outcome
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("db", ["postgres", "mysql"])
def test_sql_check_async(db: str, request: pytest.FixtureRequest, fences: tuple[int, int]) -> None:
    old, new = fences
    url = str(request.getfixturevalue(f"{db}_url"))
    cfg = distlock._url.parse_url(url)
    host, port = cfg.hosts[0]
    resource = f"acct-{uuid.uuid4().hex[:8]}"
    setup = raw_conn(db, url)
    fencing.create_table(setup)
    setup.close()

    async def main() -> None:
        if db == "postgres":
            import psycopg

            conn: Any = await psycopg.AsyncConnection.connect(
                host=host, port=port, user=cfg.username, password=cfg.password, dbname=cfg.path.lstrip("/")
            )
        else:
            import aiomysql

            conn = await aiomysql.connect(
                host=host, port=port, user=cfg.username, password=cfg.password, db=cfg.path.lstrip("/")
            )
        try:
            await fencing.check_async(conn, resource, new)
            await conn.commit()
            with pytest.raises(distlock.StaleFence):
                await fencing.check_async(conn, resource, old)
            await conn.rollback()
        finally:
            if db == "postgres":
                await conn.close()
            else:
                conn.close()

    asyncio.run(main())


def test_sql_refuses_a_connection_it_does_not_know() -> None:
    with pytest.raises(distlock.ConfigError, match="driver_connection"):
        fencing.check(object(), "r", 1)
    with pytest.raises(distlock.ConfigError, match="identifier"):
        fencing.check(sqlite3.connect(":memory:"), "r", 1, table="x; DROP TABLE y")


# -- Redis --------------------------------------------------------------------------------------------------
def test_redis_refuses_the_stale_writer(redis_url: str, fences: tuple[int, int]) -> None:
    old, new = fences
    client = redis.Redis.from_url(redis_url)
    key = f"data-{uuid.uuid4().hex[:8]}"
    hkey = f"hash-{uuid.uuid4().hex[:8]}"
    try:
        fencing.redis_set(client, key, "new", new)
        fencing.redis_set(client, key, "new-again", new)  # equal fences pass
        with pytest.raises(distlock.StaleFence):
            fencing.redis_set(client, key, "stale", old)
        assert client.get(key) == b"new-again"
        fencing.redis_set(client, hkey, "v1", new, field="balance")
        with pytest.raises(distlock.StaleFence):
            fencing.redis_set(client, hkey, "stale", old, field="balance")
        assert client.hget(hkey, "balance") == b"v1"
    finally:
        client.close()


def test_redis_set_async(redis_url: str, fences: tuple[int, int]) -> None:
    import redis.asyncio as aredis

    old, new = fences
    key = f"data-{uuid.uuid4().hex[:8]}"

    async def main() -> None:
        client = aredis.Redis.from_url(redis_url)
        try:
            await fencing.redis_set_async(client, key, "new", new)
            with pytest.raises(distlock.StaleFence):
                await fencing.redis_set_async(client, key, "stale", old)
            assert await client.get(key) == b"new"
        finally:
            await client.aclose()

    asyncio.run(main())


@given(st.text(min_size=1, max_size=40))
def test_a_key_and_its_fence_share_a_cluster_slot(key: str) -> None:
    same = key_slot(key.encode()) == key_slot(fencing.fence_key(key).encode())
    # the one documented exception: a "}" and no hash tag (no other name shares that slot; fence_key= then)
    assert same or ("}" in key and not fencing.has_hash_tag(key)), key


# -- files and the lock's store -------------------------------------------------------------------------------
def test_replace_file_refuses_the_stale_writer(tmp_path: Path, fences: tuple[int, int]) -> None:
    old, new = fences
    (tmp_path / "files").mkdir()
    target = tmp_path / "files" / "report.json"
    fencing.replace_file(target, '{"v": 1}', new)
    with pytest.raises(distlock.StaleFence):
        fencing.replace_file(target, '{"v": "stale"}', old)
    assert target.read_text() == '{"v": 1}'
    assert (tmp_path / "files" / "report.json.fence").read_text() == str(new)
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.json", "report.json.fence"]  # no temp left


def test_check_fence_asks_the_lock_s_store(tmp_path: Path) -> None:
    with distlock.connect(f"sqlite:///{tmp_path}/locks.db") as store:
        lock = store.lock("fencing/checked", ttl=10)
        with lock as held:
            fence = held.fence
            assert store.check_fence("fencing/checked", fence)
            assert not store.check_fence("fencing/checked", fence - 1)
        assert not store.check_fence("fencing/checked", fence)  # released


def test_check_fence_on_a_networked_store(redis_url: str) -> None:
    with distlock.connect(redis_url) as store:
        name = f"fencing-{uuid.uuid4().hex[:8]}"
        with store.lock(name, ttl=10) as held:
            assert store.check_fence(name, held.fence)
        assert not store.check_fence(name, held.fence)


# -- an HTTP service ------------------------------------------------------------------------------------------
def _service(fences: fencing.Fences) -> tuple[Any, list[str]]:
    """A WSGI service that records what reached it, behind the middleware, on a real loopback server."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    reached: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        reached.append(environ.get("HTTP_DISTLOCK_FENCE", ""))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, fencing.fenced_wsgi(app, fences), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, reached


def _post(port: int, headers: dict[str, str]) -> int:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/pay", body=b"{}", headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["sql", "redis"])
def test_http_service_refuses_a_stale_caller_across_instances(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, fences: tuple[int, int]
) -> None:
    old, new = fences
    if kind == "sql":
        db = tmp_path / "fences.db"
        with contextlib.closing(sqlite3.connect(db)) as setup:
            fencing.create_table(setup)
        shared: fencing.Fences = fencing.SqlFences(lambda: sqlite3.connect(db))
    else:
        shared = fencing.RedisFences(redis.Redis.from_url(str(request.getfixturevalue("redis_url"))))
    one, reached_one = _service(shared)
    two, reached_two = _service(shared)  # a second instance of the service
    name = f"pay/{uuid.uuid4().hex[:8]} order"
    try:
        assert _post(one.server_port, dict([fencing.header(name, new)])) == 200
        assert _post(two.server_port, dict([fencing.header(name, old)])) == 409  # the stale holder, elsewhere
        assert _post(two.server_port, dict([fencing.header(name, new)])) == 200
        assert _post(one.server_port, {fencing.HEADER: "garbage"}) == 409
        assert _post(one.server_port, {}) == 200  # not a fenced caller: the service's own rules apply
        assert len(reached_one) == 2 and len(reached_two) == 1  # refused requests never reached the app
    finally:
        for server in (one, two):
            server.shutdown()
            server.server_close()
        if isinstance(shared, fencing.RedisFences):
            shared._client.close()


def test_asgi_middleware_refuses_a_stale_caller(tmp_path: Path, fences: tuple[int, int]) -> None:
    old, new = fences
    db = tmp_path / "fences.db"
    with contextlib.closing(sqlite3.connect(db)) as setup:
        fencing.create_table(setup)
    reached: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        reached.append(1)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guarded = fencing.FencedASGI(app, fencing.SqlFences(lambda: sqlite3.connect(db)))

    async def call(fence: int) -> int:
        name, value = fencing.header("pay/asgi", fence)
        scope = {"type": "http", "headers": [(name.lower().encode(), value.encode())]}
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await guarded(scope, receive, send)
        return int(sent[0]["status"])

    async def main() -> list[int]:
        return [await call(new), await call(old), await call(new)]

    assert asyncio.run(main()) == [200, 409, 200]
    assert len(reached) == 2


def test_a_fence_read_wrong_is_refused_in_one_line_and_writes_nothing(tmp_path: Path, redis_url: str) -> None:
    conn = sqlite3.connect(":memory:")
    fencing.create_table(conn)
    client = redis.Redis.from_url(redis_url)
    key = f"k-{uuid.uuid4().hex}"
    target = tmp_path / "data"
    for bad in (True, 2.5, None, -1, "12a", ""):
        with pytest.raises(distlock.ConfigError, match="fence must be"):
            fencing.check(conn, "r", bad)  # type: ignore[arg-type]
        with pytest.raises(distlock.ConfigError, match="fence must be"):
            fencing.redis_set(client, key, b"v", bad)  # type: ignore[arg-type]
        with pytest.raises(distlock.ConfigError, match="fence must be"):
            fencing.replace_file(target, b"v", bad)  # type: ignore[arg-type]
        with pytest.raises(distlock.ConfigError, match="fence must be"):
            fencing.header("r", bad)  # type: ignore[arg-type]
    assert conn.execute(f"SELECT COUNT(*) FROM {fencing.TABLE}").fetchone() == (0,)
    assert client.exists(key, fencing.fence_key(key)) == 0 and not target.exists()
    # the fence as $DISTLOCK_FENCE carries it, a decimal string, is the fence
    fencing.check(conn, "r", "7")  # type: ignore[arg-type]
    with pytest.raises(distlock.StaleFence):
        fencing.check(conn, "r", 6)
    # RedisFences records with redis_set's script, without a data key
    shared = fencing.RedisFences(client, prefix=f"{key}:")
    shared.record("res", 5)
    with pytest.raises(distlock.StaleFence):
        shared.record("res", 4)
    assert client.get(f"{key}:res") == b"5"
    client.delete(f"{key}:res")

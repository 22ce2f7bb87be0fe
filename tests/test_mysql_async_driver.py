"""The asyncio MySQL driver (aiomysql, through ``distlock._backends.mysql._driver_async``) on a real server: every call is
bounded, a cancelled or timed-out call leaves no connection that could answer a later call, and none of
aiomysql's habits that the sync side (PyMySQL) does not share (``SHOW WARNINGS`` round trips,
``asyncio.wait_for`` in its connect) is used.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aiomysql
import pymysql.err
import pytest

import distlock
from distlock._backends.mysql import _driver_async as my
from distlock._url import parse_url
from tests.waiting import cancel_takes


def _kwargs(url: str) -> dict[str, Any]:
    cfg = parse_url(url)
    host, port = cfg.hosts[0]
    return {"host": host, "port": port, "user": cfg.username, "password": cfg.password,
            "database": cfg.path.lstrip("/"), "autocommit": True, "read_timeout": 5.0}  # fmt: skip


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never says a word (a MySQL server's greeting never comes)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    yield srv.getsockname()[1]
    srv.close()


async def test_connect_uses_no_wait_for(mysql_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.11's ``asyncio.wait_for`` can swallow a cancellation that comes as the awaited connect
    completes (a cancelled acquire then went on waiting: seen once in the suite), and aiomysql uses it for
    its own ``connect_timeout``. The driver bounds the connect with ``asyncio.timeout`` instead."""

    plain = asyncio.wait_for

    def wait_for(aw: Any, timeout: float | None) -> Any:
        # with no timeout, 3.11's wait_for is a plain await (nothing to swallow)
        assert timeout is None, "asyncio.wait_for with a timeout"
        return plain(aw, timeout)

    monkeypatch.setattr(asyncio, "wait_for", wait_for)
    conn = await my.connect(5.0, **_kwargs(mysql_url))
    try:
        assert my.is_open(conn)
    finally:
        await my.close(conn)
    assert not my.is_open(conn)


async def test_a_greeting_that_never_comes_ends_at_the_connect_limit(silent_port: int) -> None:
    """aiomysql's own connect timeout covers the TCP connect only; the handshake is bounded too."""
    started = time.monotonic()
    with pytest.raises(pymysql.err.OperationalError):
        await my.connect(0.3, host="127.0.0.1", port=silent_port, user="x", password="", read_timeout=5.0)
    assert time.monotonic() - started < 1.5


async def test_a_call_past_its_deadline_fails_as_a_lost_connection_and_closes_it(mysql_url: str) -> None:
    conn = await my.connect(5.0, **_kwargs(mysql_url))
    cur = await my.cursor(conn)
    started = time.monotonic()
    with pytest.raises(pymysql.err.OperationalError) as err:
        await my.call(conn, time.monotonic() + 0.2, cur.execute, "SELECT SLEEP(3)")
    assert err.value.args[0] == 2013
    assert time.monotonic() - started < 1.0
    assert not my.is_open(conn)  # its late answer can never be read as the next call's


async def test_a_call_bound_needs_no_timer_per_call(mysql_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A call's deadline is kept by one timer per connection (``distlock._aconn``), not ``asyncio.timeout``
    around each call: a hundred bounded calls leave one timer of the connection in the loop."""

    def timeout(delay: float | None) -> Any:
        raise AssertionError("asyncio.timeout around a call")

    conn = await my.connect(5.0, **_kwargs(mysql_url))
    monkeypatch.setattr(asyncio, "timeout", timeout)
    loop: Any = asyncio.get_running_loop()
    before = len(loop._scheduled)
    try:
        cur = await my.cursor(conn)
        for _ in range(100):
            await my.call(conn, time.monotonic() + 5, cur.execute, "SELECT 1")
            await cur.fetchall()
        assert len([h for h in loop._scheduled if not h.cancelled()]) <= before + 1
    finally:
        await my.close(conn)


async def test_a_shorter_deadline_than_the_armed_one_still_bounds_its_call(mysql_url: str) -> None:
    """The connection's timer is armed for the first call's far deadline; a later call with a nearer one
    re-arms it, and is ended at its own deadline."""
    conn = await my.connect(5.0, **_kwargs(mysql_url))
    cur = await my.cursor(conn)
    await my.call(conn, time.monotonic() + 30, cur.execute, "SELECT 1")
    started = time.monotonic()
    with pytest.raises(pymysql.err.OperationalError, match="timed out"):
        await my.call(conn, time.monotonic() + 0.2, cur.execute, "SELECT SLEEP(3)")
    assert time.monotonic() - started < 1.0
    assert not my.is_open(conn)


async def test_a_timer_armed_for_an_earlier_call_does_not_end_a_later_one(mysql_url: str) -> None:
    """The timer fires at the first call's deadline while a second call, with a later deadline, is in
    flight: it re-arms for that one and leaves it (and its connection) alone."""
    conn = await my.connect(5.0, **_kwargs(mysql_url))
    try:
        cur = await my.cursor(conn)
        await my.call(conn, time.monotonic() + 0.2, cur.execute, "SELECT 1")
        await cur.fetchall()
        await my.call(conn, time.monotonic() + 5, cur.execute, "SELECT SLEEP(0.5)")
        assert await cur.fetchall() == ((0,),)
        assert my.is_open(conn)
        await my.call(conn, time.monotonic() + 5, cur.execute, "SELECT 2")
        assert await cur.fetchall() == ((2,),)
    finally:
        await my.close(conn)


async def test_a_call_that_ends_after_its_deadline_fails_even_if_it_had_its_answer(mysql_url: str) -> None:
    """The deadline can come in the loop turn the answer does (a server-side wait sized to the caller's
    time left ends right at the deadline): the call fails as timed out and its aborted connection is closed,
    never handed back as usable (seen in CI: a pooled connection with no transport, "Not connected")."""
    conn = await my.connect(5.0, **_kwargs(mysql_url))

    async def answered_late() -> str:
        await asyncio.sleep(0.3)  # past the deadline, no read in flight: what the answer's turn looks like
        return "answer"

    with pytest.raises(pymysql.err.OperationalError, match="timed out"):
        await my.call(conn, time.monotonic() + 0.1, answered_late)
    assert not my.is_open(conn)


async def test_connections_read_their_sockets_in_small_chunks(mysql_url: str) -> None:
    """asyncio's 256 KiB read buffer, allocated per read, is an mmap + mremap + munmap per read in a
    process whose allocator has not raised its mmap threshold yet (``distlock._aconn``)."""
    conn = await my.connect(5.0, **_kwargs(mysql_url))
    try:
        assert conn._writer.transport.max_size == 64 * 1024
    finally:
        await my.close(conn)


async def test_a_cancelled_call_closes_its_connection(mysql_url: str) -> None:
    conn = await my.connect(5.0, **_kwargs(mysql_url))
    cur = await my.cursor(conn)
    assert await cancel_takes(my.call(conn, time.monotonic() + 10, cur.execute, "SELECT SLEEP(3)")) < 0.5
    assert not my.is_open(conn)


async def test_a_statement_with_a_warning_costs_no_show_warnings(
    mysql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiomysql's own cursor follows a statement with a warning by ``SHOW WARNINGS`` (a round trip) and raises
    the notes as Python warnings (which this suite turns into errors); the driver's cursor does neither."""
    sent: list[str] = []
    plain = aiomysql.Connection.query

    async def query(self: Any, sql: Any, unbuffered: bool = False) -> Any:
        sent.append(sql if isinstance(sql, str) else sql.decode())
        return await plain(self, sql, unbuffered)

    monkeypatch.setattr(aiomysql.Connection, "query", query)
    table = f"warn_{uuid.uuid4().hex[:8]}"
    conn = await my.connect(5.0, **_kwargs(mysql_url))
    try:
        cur = await my.cursor(conn)
        await cur.execute(f"CREATE TABLE {table} (a INT)")
        sent.clear()
        await cur.execute(f"CREATE TABLE IF NOT EXISTS {table} (a INT)")  # exists: a note
        assert sent == [f"CREATE TABLE IF NOT EXISTS {table} (a INT)"], sent
        await cur.execute(f"DROP TABLE {table}")
    finally:
        await my.close(conn)


async def test_an_async_store_holds_no_thread_per_waiter(mysql_url: str) -> None:
    """Waiters blocked in the bell's ``GET_LOCK`` hold a socket each, not a worker thread (PyMySQL on worker
    threads needed one each: the reason for a 256-thread pool)."""
    import threading

    name = f"nothread-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(mysql_url) as store:
        holder = store.lock(name, ttl=10)
        assert await holder.acquire(timeout=5)
        before = threading.active_count()

        async def turn() -> bool:
            lock = store.lock(name, ttl=10, fair=True)
            if not await lock.acquire(timeout=10):
                return False
            await lock.release()
            return True

        waiters = [asyncio.create_task(turn()) for _ in range(20)]
        await asyncio.sleep(0.5)  # all of them queued and waiting on the bell
        assert threading.active_count() <= before + 2, (before, threading.active_count())
        await holder.release()
        assert all(await asyncio.gather(*waiters))  # and each had its turn

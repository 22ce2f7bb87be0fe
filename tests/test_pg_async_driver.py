"""The PostgreSQL driver seam (``guarded`` of ``distlock._backends.postgres._driver_async`` and its threaded
twin) on a real server: a call past its deadline ends at once as a lost connection, also when its answer came
as the deadline did; a cancelled call ends at once too; and on asyncio the deadline costs no watchdog entry per
call (one timer of the connection on the event loop: ``distlock._aconn``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import psycopg
import pytest

from distlock._backends.postgres import _driver_async as pg
from distlock._backends.postgres import _driver_sync as pg_sync
from distlock._backends.postgres._async.query import numbered, run_batch
from distlock._backends.postgres._sync.query import run_batch as sync_run_batch
from distlock._backends.sql import stmt as st
from distlock._backends.sql import watchdog
from tests.waiting import cancel_takes


async def _connect(postgres_url: str) -> Any:
    return await psycopg.AsyncConnection.connect(postgres_url, autocommit=True)


async def test_a_call_past_its_deadline_ends_as_a_lost_connection(postgres_url: str) -> None:
    conn = await _connect(postgres_url)
    try:
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            await pg.guarded(conn, time.monotonic() + 0.2, conn.execute, "SELECT pg_sleep(3)")
        assert time.monotonic() - started < 1.0
        with pytest.raises(psycopg.Error):  # its socket is shut: a late answer is never read
            await pg.guarded(conn, time.monotonic() + 2, conn.execute, "SELECT 1")
    finally:
        await conn.close()


async def test_a_cancelled_call_ends_at_once(postgres_url: str) -> None:
    conn = await _connect(postgres_url)
    try:
        call = pg.guarded(conn, time.monotonic() + 10, conn.execute, "SELECT pg_sleep(3)")
        assert await cancel_takes(call) < 0.5
    finally:
        await conn.close()


async def test_a_call_bound_needs_no_watchdog_entry_per_call(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watchdog thread (a lock, a heap entry and maybe a thread wake-up per call) serves the threaded
    side only; on the event loop a hundred bounded calls leave one timer of the connection."""

    def add(fd: int, deadline: float) -> int:
        raise AssertionError("a watchdog entry for an asyncio call")

    conn = await _connect(postgres_url)
    monkeypatch.setattr(watchdog.WATCHDOG, "add", add)
    loop: Any = asyncio.get_running_loop()
    before = len([h for h in loop._scheduled if not h.cancelled()])
    try:
        for i in range(100):
            cur = await pg.guarded(conn, time.monotonic() + 5, conn.execute, "SELECT %s::int", (i,))
            assert await cur.fetchone() == (i,)
        assert len([h for h in loop._scheduled if not h.cancelled()]) <= before + 1
    finally:
        await conn.close()


async def test_a_call_that_ends_after_its_deadline_fails_even_if_it_had_its_answer(postgres_url: str) -> None:
    """Its socket was shut down at the deadline while its answer was already in: the call fails (the caller
    closes the connection), rather than returning and leaving a dead connection to the next call."""
    conn = await _connect(postgres_url)

    async def answered_late() -> str:
        await asyncio.sleep(0.3)
        return "answer"

    try:
        with pytest.raises(psycopg.OperationalError, match="timed out"):
            await pg.guarded(conn, time.monotonic() + 0.1, answered_late)
    finally:
        await conn.close()


def test_a_threaded_call_that_ends_after_its_deadline_fails_even_if_it_had_its_answer(postgres_url: str) -> None:
    """The same on the threaded side: the watchdog thread shut the socket down; the call fails."""
    conn = psycopg.Connection.connect(postgres_url, autocommit=True)

    def answered_late() -> str:
        time.sleep(0.3)
        return "answer"

    try:
        with pytest.raises(psycopg.OperationalError, match="timed out"):
            pg_sync.guarded(conn, time.monotonic() + 0.1, answered_late)
        assert pg_sync.guarded(conn, None, lambda: "no bound") == "no bound"
    finally:
        conn.close()


# -- a batch statement (one Query) on a connection that is gone --------------------------------------------------------
def _terminated(postgres_url: str, conn: Any) -> None:
    """End ``conn``'s server session from another connection, and wait until the server has."""
    with psycopg.Connection.connect(postgres_url, autocommit=True) as admin:
        pid = conn.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 5
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, "the server did not end the session"
            time.sleep(0.01)


_PARTS = st.batch([("SELECT %s::int", (1,)), ("SELECT %s::int", (2,))], 1)


async def test_a_batch_statement_on_a_lost_connection_raises_its_error_and_logs_nothing(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The connection died before the batch (an acquire's try): the caller gets the lost connection's error,
    and psycopg logs nothing of its own (a pipeline logged "error ignored terminating ... Pipeline [BAD]",
    which users of a store saw on every connection a server restart killed; a try is one Query now)."""
    conn = await _connect(postgres_url)
    try:
        assert await run_batch(conn, _PARTS) == st.Result([(2,)], 1)
        _terminated(postgres_url, conn)
        with caplog.at_level(logging.DEBUG, logger="psycopg"), pytest.raises(psycopg.OperationalError):
            await run_batch(conn, _PARTS)
        assert not [r for r in caplog.records if r.name.startswith("psycopg")], caplog.text
    finally:
        await conn.close()


def test_a_threaded_batch_statement_on_a_lost_connection_raises_its_error_and_logs_nothing(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    conn = psycopg.Connection.connect(postgres_url, autocommit=True)
    try:
        assert sync_run_batch(conn, _PARTS) == st.Result([(2,)], 1)
        _terminated(postgres_url, conn)
        with caplog.at_level(logging.DEBUG, logger="psycopg"), pytest.raises(psycopg.OperationalError):
            sync_run_batch(conn, _PARTS)
        assert not [r for r in caplog.records if r.name.startswith("psycopg")], caplog.text
    finally:
        conn.close()


# -- the try's statements as PREPAREd ones ------------------------------------------------------------------
def test_numbered_placeholders_count_from_one_in_order() -> None:
    assert numbered("SELECT %s, f(%s) WHERE a = %s") == "SELECT $1, f($2) WHERE a = $3"
    assert numbered("SELECT 1") == "SELECT 1"
    with pytest.raises(AssertionError):
        numbered("SELECT '100%' || %s")

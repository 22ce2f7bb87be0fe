"""The MySQL driver on the async side (aiomysql: PyMySQL's protocol on asyncio streams); ``_driver_sync.py``
(PyMySQL) is its twin.

The backend (``_async/`` next to it) imports this module as ``my``; ``scripts/gen_sync.py`` swaps it for
``_driver_sync`` in the generated sync backend, so both sides share one source. aiomysql rather than PyMySQL
in worker threads: each call then costs no thread hops (two per call before, which made an asyncio
session-mode acquire + release 1.9 times as slow as the sync one), and a waiter blocked in a server-side
``GET_LOCK`` holds a socket, not a thread. It raises PyMySQL's own exception classes, so one error
classification serves both sides.

The twins differ in how a call is bounded: here by the connection's timer, which aborts its transport at the
deadline (``_aconn.py``; a late answer is never read as the next call's), there by the watchdog thread,
which shuts the socket down (``sql/watchdog.py``). Either way a call cut short fails with the error of a lost connection, which the backend throws away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aiomysql
import pymysql.err

from ... import _aconn
from ..._core.text import seconds

Connection = Any  # aiomysql.Connection (aiomysql ships no type information)
Cursor = Any
T = TypeVar("T")

#: the client error of a connection lost mid-call (what PyMySQL raises when a read finds the link gone)
_LOST = 2013


class _Connection(aiomysql.Connection):  # type: ignore[misc]
    """aiomysql's connection, whose every close ends it at once: the transport is aborted. aiomysql closes it,
    which over TLS sends a close_notify and keeps the socket until the server answers, up to 30 s: a server
    busy with a cancelled statement does not, and if the event loop ends first the socket is left to the
    garbage collector (seen in the suite: a store closed, or an acquire timed out, right before its test's
    loop ended). aiomysql closes on a cancelled read, on ``cut``, and after the goodbye (``COM_QUIT``, by
    then written to the socket: the server still reads it before the connection ends)."""

    def close(self) -> None:
        if self._writer is not None:
            self._writer.transport.abort()
        super().close()


async def connect(limit: float, **kwargs: Any) -> Connection:
    """A connection with PyMySQL's keyword arguments; the handshake too ends within ``limit`` seconds.

    aiomysql's own ``connect_timeout`` is left unset: it covers the TCP connect only, and it is
    ``asyncio.wait_for``, which on Python 3.11 can swallow a cancellation that comes as the connect
    completes (the caller's ``CancelledError`` is lost and the cancelled acquire goes on waiting: seen in
    the suite). ``asyncio.timeout`` around the whole does not. The connection object is made here, not by
    ``aiomysql.connect``, so a connect cut short (timeout, cancellation) is ended here too: aiomysql cleans
    up only after an ``Exception``, and a cancellation is not one."""
    kwargs["db"] = kwargs.pop("database", None)
    kwargs.pop("read_timeout")  # every call here has its own bound (``call``)
    kwargs["connect_timeout"] = None
    conn = _Connection(**kwargs)
    try:
        try:
            async with asyncio.timeout(limit):
                await conn._connect()  # what aiomysql.connect awaits (a private name; aiomysql is pinned < 0.4)
            _aconn.small_reads(conn._writer.transport)
            return conn
        except BaseException:
            cut(conn)
            raise
    except pymysql.err.OperationalError as exc:
        # aiomysql says only "Can't connect to MySQL server on <host>" for any failed connect; the reason
        # (refused, a certificate not trusted, ...) is its cause, which PyMySQL puts in the message
        if exc.__cause__ is not None and len(exc.args) == 2 and exc.args[0] == 2003:
            raise pymysql.err.OperationalError(2003, f"{exc.args[1]} ({exc.__cause__})") from exc.__cause__
        raise
    except TimeoutError:
        # a handshake cut short (the connection was aborted above)
        raise pymysql.err.OperationalError(
            2003, f"Can't connect to MySQL server (no answer within {seconds(limit)})"
        ) from None


async def call(conn: Connection, deadline: float | None, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)`` on ``conn``, ended at ``deadline`` (monotonic; None: no bound) as a lost connection.
    The connection's transport is aborted at the deadline (``_aconn.py``: one timer per connection, not one
    per call), so the read fails as aiomysql's lost connection, and the connection is closed."""
    try:
        if deadline is None:
            return await fn(*args)
        return await _aconn.bound_of(conn, _abort).run(deadline, fn(*args))
    except _aconn.Expired:
        cut(conn)
        raise pymysql.err.OperationalError(_LOST, "Lost connection to MySQL server during query (timed out)") from None
    except RuntimeError:
        # uvloop: a write on a transport that was closed (the server ended the session, a bound aborted it)
        # raises RuntimeError; asyncio's own transport drops the write and the read then fails as a lost
        # connection. Either way it is one.
        writer = getattr(conn, "_writer", None)
        if writer is None or not writer.transport.is_closing():
            raise
        raise pymysql.err.OperationalError(
            _LOST, "Lost connection to MySQL server (its connection was closed)"
        ) from None


def _abort(conn: Connection) -> None:
    writer = conn._writer
    if writer is not None:
        writer.transport.abort()


class _Cursor(aiomysql.Cursor):  # type: ignore[misc]
    """aiomysql's cursor without its ``SHOW WARNINGS``: after any statement with a warning (a ``CREATE ... IF
    NOT EXISTS`` of a table that exists) aiomysql's own sends that query, a round trip more, to raise the
    notes as Python warnings; PyMySQL (since 1.0) does neither, and neither side wants them."""

    async def _show_warnings(self, conn: Any) -> None:
        return None


async def cursor(conn: Connection) -> Cursor:
    return await conn.cursor(_Cursor)


def is_open(conn: Connection) -> bool:
    return not conn.closed


def cut(conn: Connection) -> None:
    """End the connection now, without a word to the server (a call running on it fails at once; the
    transport is aborted: see ``_Connection``)."""
    conn.close()


async def close(conn: Connection) -> None:
    """Say goodbye (COM_QUIT, so the server logs no aborted connection), then close."""
    try:
        await conn.ensure_closed()
    except (pymysql.err.Error, OSError):
        pass
    finally:
        conn.close()

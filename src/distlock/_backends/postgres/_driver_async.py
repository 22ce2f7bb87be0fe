"""The PostgreSQL driver on the async side (psycopg 3 ``AsyncConnection``); ``_driver_sync.py`` is its twin.

The backend (``_async/`` next to it) imports this module as ``pg``; ``scripts/gen_sync.py``
swaps it for ``_driver_sync`` in the generated sync backend, so both sides share one source.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import psycopg

from ... import _aconn
from ... import _rt_async as rt
from ..sql.watchdog import WATCHDOG
from .errors import timed_out

Connection = psycopg.AsyncConnection[Any]
Cursor = psycopg.AsyncCursor[Any]
ClientCursor = psycopg.AsyncClientCursor[Any]
T = TypeVar("T")


async def connect(limit: float, **kwargs: Any) -> Connection:
    """A connection, within ``limit`` seconds: libpq's ``connect_timeout`` counts whole seconds, at least 2,
    and a caller's deadline (``timing.Budget``) may leave less."""
    try:
        async with asyncio.timeout(limit):
            return await psycopg.AsyncConnection.connect(**kwargs)
    except TimeoutError:
        raise psycopg.errors.ConnectionTimeout("connection timeout expired") from None


def _fd(conn: Connection) -> int:
    try:
        return int(conn.pgconn.socket)
    except psycopg.Error:
        return -1


async def guarded(conn: Connection, deadline: float | None, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any) -> T:
    """``await fn(*args)`` on ``conn``, its socket shut down at ``deadline`` or when the caller is cancelled:
    psycopg would otherwise answer a cancellation by sending a cancel request and waiting up to 10 s for the
    server, which a dead link never gives. The call runs as a task that is never cancelled itself: a
    cancellation of the caller shuts the socket down, and is raised once the call has ended on it, so the
    call never polls a descriptor number that the next connection may have been given. The caller closes
    ``conn`` afterwards (its state is unknown).

    The deadline is kept by one timer of the connection on the event loop (``_aconn.CallBound``; the
    threaded twin uses the watchdog thread of ``sql/watchdog.py``, since a blocked thread cannot run a timer):
    no lock, heap entry or thread wake-up per call. It shuts the socket down only while a call is in flight,
    and looks the descriptor up then, from the open connection.

    A call made inside a shielded step (a release, an abandon: ``rt.shielded``) is awaited directly: that
    step's task already keeps the caller's cancellation away from it, until the whole step has ended, and
    a task of its own would only add two loop turns (a PostgreSQL session-mode release: 6 -> 4)."""
    if rt.in_shielded_step():
        call = fn(*args)
    else:
        fd = _fd(conn)
        call = rt.shielded(fn(*args), (lambda: WATCHDOG.kill(fd)) if fd >= 0 else None)
    if deadline is None:
        return await call
    try:
        return await _aconn.bound_of(conn, _cut).run(deadline, call)
    except _aconn.Expired:
        raise timed_out() from None


def _cut(conn: Connection) -> None:
    fd = _fd(conn)
    if fd >= 0:
        WATCHDOG.kill(fd)


def client_cursor(conn: Connection) -> ClientCursor:
    """A cursor that binds parameters client-side and sends the simple protocol: several statements per Query."""
    return psycopg.AsyncClientCursor(conn)

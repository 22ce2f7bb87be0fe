"""The PostgreSQL driver on the async side (psycopg 3 ``AsyncConnection``); ``_pg_sync.py`` is its twin.

The backend (``_async/backends/postgres/``) imports this module as ``pg``; ``scripts/gen_sync.py``
swaps it for ``_pg_sync`` in the generated sync backend, so both sides share one source.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg

from ._sqlwatch import WATCHDOG, watch

Connection = psycopg.AsyncConnection[Any]
Cursor = psycopg.AsyncCursor[Any]
ClientCursor = psycopg.AsyncClientCursor[Any]
T = TypeVar("T")

#: after a cancellation shut the socket down, how long the interrupted call gets to notice it and end
CANCEL_GRACE = 1.0


async def connect(**kwargs: Any) -> Connection:
    return await psycopg.AsyncConnection.connect(**kwargs)


def _fd(conn: Connection) -> int:
    try:
        return int(conn.pgconn.socket)
    except psycopg.Error:
        return -1


async def guarded(conn: Connection, deadline: float | None, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)`` on ``conn``, its socket shut down at ``deadline`` or when the caller is cancelled:
    psycopg would otherwise answer a cancellation by sending a cancel request and waiting up to 10 s for the
    server, which a dead link never gives. The caller closes ``conn`` afterwards (its state is unknown)."""
    fd = _fd(conn)
    with watch(fd, deadline):
        task = asyncio.ensure_future(fn(*args))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.done():
                if fd >= 0:
                    WATCHDOG.kill(fd)
                # let the call end on its dead socket before the caller closes the connection: a call still
                # running would poll a descriptor number the next connection may already have been given
                await asyncio.wait({task}, timeout=CANCEL_GRACE)
                task.add_done_callback(_consume)
            raise


def _consume(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


def client_cursor(conn: Connection) -> ClientCursor:
    """A cursor that binds parameters client-side and sends the simple protocol: several statements per Query."""
    return psycopg.AsyncClientCursor(conn)

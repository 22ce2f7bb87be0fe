"""The PostgreSQL driver on the sync side (psycopg 3 ``Connection``); twin of ``_pg_async.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from ._sqlwatch import WATCHDOG, timed_out

Connection = psycopg.Connection[Any]
Cursor = psycopg.Cursor[Any]
ClientCursor = psycopg.ClientCursor[Any]
T = TypeVar("T")


def connect(**kwargs: Any) -> Connection:
    return psycopg.Connection.connect(**kwargs)


def _fd(conn: Connection) -> int:
    try:
        return int(conn.pgconn.socket)
    except psycopg.Error:
        return -1


def guarded(conn: Connection, deadline: float | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on ``conn``, its socket shut down at ``deadline`` (the caller then closes ``conn``)."""
    fd = _fd(conn)
    if deadline is None or fd < 0:
        return fn(*args)
    ticket = WATCHDOG.add(fd, deadline)  # (not a context manager: a generator's frames cost per call)
    try:
        result = fn(*args)
    except BaseException as exc:
        if not WATCHDOG.remove(ticket) or not isinstance(exc, Exception):
            raise
    else:
        if not WATCHDOG.remove(ticket):
            return result
    # The watchdog shut the socket down: the call failed on it, or its answer had come just before. Either
    # way a call past its deadline fails, and its connection must not serve again (the next call on it would
    # fail instead, and be reported as a database error).
    raise timed_out()


def client_cursor(conn: Connection) -> ClientCursor:
    """A cursor that binds parameters client-side and sends the simple protocol: several statements per Query."""
    return psycopg.ClientCursor(conn)

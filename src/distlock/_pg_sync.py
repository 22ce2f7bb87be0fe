"""The PostgreSQL driver on the sync side (psycopg 3 ``Connection``); twin of ``_pg_async.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from ._sqlwatch import watch

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
    with watch(_fd(conn), deadline):
        return fn(*args)


def client_cursor(conn: Connection) -> ClientCursor:
    """A cursor that binds parameters client-side and sends the simple protocol: several statements per Query."""
    return psycopg.ClientCursor(conn)

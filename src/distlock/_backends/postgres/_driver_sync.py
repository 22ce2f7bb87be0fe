"""The PostgreSQL driver on the sync side (psycopg 3 ``Connection``); twin of ``_driver_async.py``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from ..sql.watchdog import WATCHDOG, Fired
from .errors import timed_out

Connection = psycopg.Connection[Any]
Cursor = psycopg.Cursor[Any]
ClientCursor = psycopg.ClientCursor[Any]
T = TypeVar("T")


def connect(limit: float, **kwargs: Any) -> Connection:
    """A connection, within ``limit`` seconds. libpq's ``connect_timeout`` counts whole seconds, at least 2:
    a shorter or fractional ``limit`` (what a caller's deadline left, ``timing.Budget``) connects on a thread
    of its own, which closes the connection if it comes after the caller gave up on it."""
    if limit >= kwargs.get("connect_timeout", 0):
        return psycopg.Connection.connect(**kwargs)
    box: list[Any] = []
    mutex = threading.Lock()
    done = threading.Event()

    def run() -> None:
        try:
            conn: Any = psycopg.Connection.connect(**kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            conn = exc
        with mutex:
            if done.is_set():  # the caller gave up: nobody will use it
                if isinstance(conn, psycopg.Connection):
                    conn.close()
                return
            box.append(conn)
            done.set()

    threading.Thread(target=run, name="distlock-pg-connect", daemon=True).start()
    done.wait(limit)
    with mutex:
        if not box:
            done.set()
            raise psycopg.errors.ConnectionTimeout("connection timeout expired")
    if isinstance(box[0], BaseException):
        raise box[0]
    result: Connection = box[0]
    return result


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
    try:
        return WATCHDOG.within(fd, deadline, fn, *args)
    except Fired:
        # the call failed on it, or its answer had come just before: either way a call past its deadline fails,
        # and its connection must not serve again (the next call on it would fail instead, and be reported as
        # a database error)
        raise timed_out() from None


def client_cursor(conn: Connection) -> ClientCursor:
    """A cursor that binds parameters client-side and sends the simple protocol: several statements per Query."""
    return psycopg.ClientCursor(conn)

"""The MySQL driver on the sync side (PyMySQL); twin of ``_driver_async.py``."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

import pymysql
import pymysql.err

from ..sql.watchdog import WATCHDOG, Fired

Connection = Any  # pymysql.connections.Connection (PyMySQL's types are not checked here)
Cursor = Any
T = TypeVar("T")

#: the client error of a connection lost mid-call (what PyMySQL raises when a read finds the socket closed)
_LOST = 2013


def connect(limit: float, **kwargs: Any) -> Connection:
    """A connection; the handshake is read with ``read_timeout`` (set to ``limit``), so it ends within it."""
    read_timeout = kwargs.pop("read_timeout")
    kwargs["connect_timeout"] = limit
    kwargs["read_timeout"] = kwargs["write_timeout"] = min(limit, read_timeout)
    if kwargs.get("unix_socket"):
        conn = pymysql.connect(**kwargs, defer_connect=True)
        _connect_unix(conn, kwargs["unix_socket"], limit)
    else:
        conn = pymysql.connect(**kwargs)
    #: what bounds a read or write of a call without a deadline (``call``), and the goodbye (``close``)
    conn.distlock_timeout = conn._read_timeout = conn._write_timeout = read_timeout
    return conn


def call(conn: Connection, deadline: float | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on ``conn``, ended at ``deadline`` as a lost connection: the watchdog thread shuts its
    socket down then (``sql/watchdog.py``, as PostgreSQL's threaded calls), so the blocked read or write fails
    at once, and a call that ended on a socket shut down at its deadline fails too (its answer may be whole,
    but the connection is not: it must not serve again). The socket stays blocking, with no timeout of its own:
    a timeout costs a ``poll`` before each read and write and a ``settimeout`` per call (four to six system
    calls more per acquire + release than the bare driver's four), and bounds each read rather than the call.
    ``deadline=None``: the connection's own timeout (``connect``'s ``read_timeout``) bounds each read."""
    if deadline is None:
        conn._read_timeout = conn._write_timeout = conn.distlock_timeout
        return fn(*args)
    conn._read_timeout = conn._write_timeout = None
    sock = conn._sock
    if sock is None:  # closed: PyMySQL raises its own error for that
        return fn(*args)
    try:
        return WATCHDOG.within(sock.fileno(), deadline, fn, *args)
    except Fired:
        conn._force_close()
        raise pymysql.err.OperationalError(_LOST, "Lost connection to MySQL server during query (timed out)") from None


def cursor(conn: Connection) -> Cursor:
    return conn.cursor()


def is_open(conn: Connection) -> bool:
    return bool(conn.open)


def cut(conn: Connection) -> None:
    """End the connection's socket now (a call blocked on it in another thread fails at once); the server then
    drops its session. The connection is closed by its owner."""
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def close(conn: Connection) -> None:
    # the goodbye waits for no one for ever (a connection made elsewhere keeps the timeouts it has)
    conn._read_timeout = conn._write_timeout = getattr(conn, "distlock_timeout", conn._write_timeout)
    try:
        conn.close()  # COM_QUIT, then the socket
    except (pymysql.err.Error, OSError):
        conn._force_close()


def _connect_unix(conn: Connection, path: str, timeout: float) -> None:
    """PyMySQL's unix-socket connect, with the socket closed when the connect fails (PyMySQL's own leaves it
    to the garbage collector)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise pymysql.err.OperationalError(
            2002, f"Can't connect to local server through socket {path!r} ({exc})"
        ) from None
    conn.host_info = "Localhost via UNIX socket"
    conn._secure = True  # as PyMySQL marks its own unix-socket connections: no RSA exchange for the password
    conn.connect(sock)  # the handshake; on failure PyMySQL closes the socket it was given

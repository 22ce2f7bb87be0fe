"""The MySQL driver on the sync side (PyMySQL); twin of ``_driver_async.py``."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

import pymysql
import pymysql.err

from ..._core.timing import monotonic

Connection = Any  # pymysql.connections.Connection (PyMySQL's types are not checked here)
Cursor = Any
T = TypeVar("T")


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
    conn._read_timeout = conn._write_timeout = read_timeout
    return conn


def call(conn: Connection, deadline: float | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on ``conn``, its reads and writes ended at ``deadline`` (PyMySQL applies its timeouts to
    the socket before each read / write; a timeout is a lost connection)."""
    if deadline is not None:
        conn._read_timeout = conn._write_timeout = max(0.05, deadline - monotonic())
    return fn(*args)


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

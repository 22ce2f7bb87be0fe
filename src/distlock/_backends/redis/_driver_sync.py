"""The threaded side of the Redis driver seam (``redis``); the twin of ``_driver_async.py``.

Same names and contracts. Here a request is bounded by its socket's timeout. Redlock's fan-out to several
servers is ``_fanout_sync.py``.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
from collections.abc import Iterator, Sequence
from typing import Any

import redis as redis_driver
from redis.backoff import NoBackoff
from redis.retry import Retry as Retry  # the retry policy of this client's connections (see the asyncio twin)
from redis.sentinel import Sentinel as Sentinel

from ._driver_shared import BROKEN as BROKEN
from ._driver_shared import Made as Made

log = logging.getLogger("distlock")

Client = redis_driver.Redis
ClusterClient = redis_driver.RedisCluster
ConnectionPool = redis_driver.ConnectionPool
#: either kind of client: the backend runs the same commands and pipelines on both
AnyClient = Client | ClusterClient


def initialize(client: ClusterClient) -> None:
    """The threaded cluster client read the slot map when it was made (see the asyncio twin)."""


def route(client: ClusterClient, key: str) -> tuple[str, Made]:
    """The master that serves ``key``'s slot in the client's slot map: (its name, ``made`` for it)."""
    lookup: Any = client.get_node_from_key
    node: Any = lookup(key)
    pool: Any = node.redis_connection.connection_pool
    return node.name, made(pool.connection_class, pool.connection_kwargs)


#: redis-py's own retry of a connect, off on distlock's request path: ``Wire`` sends a failed request once
#: more itself, and a connect retried inside that (its handshake's timeout included) doubled every bound
ONCE = Retry(NoBackoff(), 0)


def made(cls: Any, kwargs: dict[str, Any]) -> Made:
    """Connections ``cls(**kwargs)`` for distlock's request path, and the bound of one request on them (the
    socket timeout of ``kwargs``): here the sockets keep their timeout, which is the bound (see the twin)."""
    own = dict(kwargs, retry=ONCE)
    return (lambda: cls(**own)), kwargs.get("socket_timeout")


def recheck_cancel() -> None:
    """A thread cannot be cancelled: nothing was swallowed (see the asyncio twin)."""


def command(client: AnyClient, *args: Any, **kwargs: Any) -> Any:
    run: Any = client.execute_command
    return run(*args, **kwargs)


def pipeline(client: AnyClient, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Many commands in one round trip (no MULTI); a failing command raises."""
    with client.pipeline(transaction=False) as pipe:
        for cmd in commands:
            queue: Any = pipe.execute_command
            queue(*cmd)
        result: list[Any] = pipe.execute()
    return result


def close(client: AnyClient) -> None:
    client.close()
    # a client distlock made through Sentinel: its connections to the sentinels are distlock's too
    manager: Any = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    if manager is not None:
        manager.close()


class io_bound:
    """Bounds a request's send and read on ``conn``: its socket's timeout (None: the connection's own).
    A system call each time it changes, so only then."""

    def __init__(self, conn: Any, timeout: float | None) -> None:
        want = conn.socket_timeout if timeout is None else timeout
        if conn._sock.gettimeout() != want:
            conn._sock.settimeout(want)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


#: a thread can wait on several pub/sub connections at once (``readable``)
READS_MANY = True


def readable(conns: Sequence[Any], timeout: float) -> list[int]:
    """The indexes of ``conns`` (pub/sub connections) that have something to read: a reply already in the
    client's buffer or on its socket now, else whatever comes within ``timeout`` on any of their sockets
    (one ``poll``). A connection whose look fails (closed, broken) counts as readable: the read that follows
    meets the error and deals with it, as any read of it would."""
    ready: list[int] = []
    socks: dict[int, int] = {}
    for i, conn in enumerate(conns):
        sock = getattr(conn, "_sock", None)
        try:
            if sock is None or conn.can_read(timeout=0):
                ready.append(i)
                continue
            socks[sock.fileno()] = i
        except BROKEN:
            ready.append(i)
    if ready or timeout <= 0:
        return ready
    poller = select.poll()
    for fd in socks:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    return sorted({socks[fd] for fd, _ in poller.poll(timeout * 1000.0)})


def tune(conn: Any) -> None:
    """Nothing to set on a blocking socket (see the twin)."""


@contextlib.contextmanager
def connect_bound(conn: Any, bound: float | None) -> Iterator[None]:
    """Bounds connecting ``conn`` and its handshake by ``bound`` (what the caller's deadline left of a
    request's bound: ``timing.Budget``): a blocking socket's own timeouts, cut to it while connecting."""
    if bound is None:
        yield
        return
    connect_timeout, socket_timeout = conn.socket_connect_timeout, conn.socket_timeout
    conn.socket_connect_timeout = bound if connect_timeout is None else min(connect_timeout, bound)
    conn.socket_timeout = bound if socket_timeout is None else min(socket_timeout, bound)
    try:
        yield
    finally:
        conn.socket_connect_timeout, conn.socket_timeout = connect_timeout, socket_timeout


def disconnect(conn: Any) -> None:
    """Close a connection that may be mid-request (its reply is never read by a later request)."""
    with contextlib.suppress(Exception):
        conn.disconnect()


close_now = disconnect


def interrupt(conn: Any) -> None:
    """Make a read another thread is blocked in on ``conn`` fail now (its reader then drops the connection):
    the socket is shut down, not closed, so the reader's own clean-up finds it as it left it."""
    sock = getattr(conn, "_sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def abort_tls(conn: Any) -> None:
    """Nothing to do on this side: a blocking socket's close is immediate (see ``_driver_async.abort_tls``)."""

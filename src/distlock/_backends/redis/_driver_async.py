"""The asyncio side of the Redis driver seam (``redis.asyncio``); ``_driver_sync.py`` is its twin.

Only what differs between redis-py's two clients lives here, and nothing else: connecting, running a command
or a pipeline, bounding and dropping a connection of distlock's own request path (Redlock's fan-out to several
servers with one deadline is the pair ``_fanout_async.py`` / ``_fanout_sync.py``). The logic written against
these names is written once, in the backend's folder (``_async/`` next to this module: the backends, the
request path ``wire.py``, the pub/sub listener ``listener.py`` and its ``subscriptions.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio as redis_driver
from redis.asyncio.retry import Retry as Retry  # redis-py 8.2 warns at each connect given redis.retry's
from redis.asyncio.sentinel import Sentinel as Sentinel
from redis.backoff import NoBackoff

from ... import _aconn
from ..._core import timing
from ..._core.text import seconds
from ._driver_shared import BROKEN as BROKEN
from ._driver_shared import Made as Made

log = logging.getLogger("distlock")

Client = redis_driver.Redis
ClusterClient = redis_driver.RedisCluster
ConnectionPool = redis_driver.ConnectionPool
#: either kind of client: the backend runs the same commands and pipelines on both
AnyClient = Client | ClusterClient


async def initialize(client: ClusterClient) -> None:
    """Read the cluster's slot map now (redis.asyncio's cluster client defers it to the first command)."""
    await client.initialize()


def route(client: ClusterClient, key: str) -> tuple[str, Made]:
    """The master that serves ``key``'s slot in the client's slot map: (its name, ``made`` for it)."""
    lookup: Any = client.get_node_from_key
    node: Any = lookup(key)
    return node.name, made(node.connection_class, node.connection_kwargs)


#: redis-py's own retry of a connect, off on distlock's request path: ``Wire`` sends a failed request once
#: more itself, and a connect retried inside that (its handshake's timeout included) doubled every bound
ONCE = Retry(NoBackoff(), 0)


def made(cls: Any, kwargs: dict[str, Any]) -> Made:
    """Connections like ``cls(**kwargs)`` for distlock's request path (``wire.py``), and the bound of one
    request on them: the socket timeout of ``kwargs``.

    The connections themselves have no socket timeout. With one, redis.asyncio writes every request under
    ``asyncio.wait_for`` (on Python 3.11 a task and three event-loop turns per request: most of what the
    async API cost over the sync one on Redis) and reads every reply under a timer of its own. Without it,
    a request is written and read directly, and ``io_bound`` puts one timer around both; the connect
    and its handshake are bounded by ``connect_bound``. (``socket_timeout`` is a documented parameter
    of the connection; its absence means "no client-side timeout", which the bounds here replace.)"""
    bound = kwargs.get("socket_timeout")
    own = dict(kwargs, socket_timeout=None, retry=ONCE)
    if "socket_connect_timeout" in kwargs and kwargs["socket_connect_timeout"] is None:
        own["socket_connect_timeout"] = bound  # redis-py's fallback for it, which None would now turn off
    return (lambda: cls(**own)), bound


def recheck_cancel() -> None:
    """Re-raise a cancellation the driver swallowed: redis.asyncio can finish a command although the task
    was cancelled while it waited for the reply (seen with redis-py 8.1 on Python 3.11); the caller must
    still see the CancelledError, or a cancelled acquire would go on waiting."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def command(client: AnyClient, *args: Any, **kwargs: Any) -> Any:
    run: Any = client.execute_command
    result = await run(*args, **kwargs)
    recheck_cancel()
    return result


async def pipeline(client: AnyClient, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Many commands in one round trip (no MULTI); a failing command raises."""
    async with client.pipeline(transaction=False) as pipe:
        for cmd in commands:
            queue: Any = pipe.execute_command
            queue(*cmd)
        result: list[Any] = await pipe.execute()
    recheck_cancel()
    return result


async def close(client: AnyClient) -> None:
    await client.aclose()
    # a client distlock made through Sentinel: its connections to the sentinels are distlock's too
    manager: Any = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    if manager is not None:
        await manager.aclose()


class io_bound:
    """Bounds a request's send and read on ``conn``, a connection of ``made`` (None: no bound): at the
    bound its transport is aborted (``_aconn.py``: one timer per connection, not one per request), the
    read fails as a lost connection, and the failure is raised as ``TimeoutError``."""

    __slots__ = ("_bound", "_conn", "_timeout")

    def __init__(self, conn: Any, timeout: float | None) -> None:
        self._conn = conn
        self._timeout = timeout
        self._bound = None if timeout is None else _aconn.bound_of(conn, interrupt)

    async def __aenter__(self) -> None:
        if self._bound is not None:
            self._bound.start(timing.monotonic() + self._timeout)  # type: ignore[operator]

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self._bound is None or not self._bound.stop():
            return
        # aborted: never used again. Unlike ``CallBound.run`` a reply read in the deadline's turn stands: the
        # request ran, and the closed connection is connected anew before any reuse (``Wire.call_many``)
        close_now(self._conn)
        if kind is not None and issubclass(kind, Exception):
            raise TimeoutError(f"no reply within {seconds(self._timeout or 0)}") from None


#: whether one caller can wait on several pub/sub connections at once (``readable``): not here, where every
#: connection's reader is a task of the same event loop already (the threaded twin can)
READS_MANY = False


def readable(conns: Sequence[Any], timeout: float) -> list[int]:
    """Not used on this side (``READS_MANY``); see the threaded twin."""
    raise NotImplementedError("readable() is for the threaded side")


def tune(conn: Any) -> None:
    """After ``conn`` (a connection of distlock's own) connected: small socket reads (``_aconn.py``)."""
    writer = getattr(conn, "_writer", None)
    if writer is not None:
        _aconn.small_reads(writer.transport)


def connect_bound(conn: Any, bound: float | None) -> Any:
    """Bounds connecting ``conn`` (a connection of ``made``) and its handshake (HELLO/AUTH/SELECT, and
    Redlock's run-id read): its connect timeout plus one request's ``bound``, and the caller's deadline
    (``timing.Budget``). redis-py bounds the TCP connect itself; the handshake's replies, read without a
    socket timeout, only by this."""
    if bound is None:
        return contextlib.nullcontext()
    return asyncio.timeout(timing.bound((conn.socket_connect_timeout or 0.0) + bound))


async def disconnect(conn: Any) -> None:
    """Close a connection that may be mid-request (its reply is never read by a later request)."""
    with contextlib.suppress(Exception):
        abort_tls(conn)
        await conn.disconnect(nowait=True)


def close_now(conn: Any) -> None:
    """Close a connection from code that cannot await (redis.asyncio's own sync close of the transport)."""
    with contextlib.suppress(Exception):
        abort_tls(conn)
        conn._close()


def interrupt(conn: Any) -> None:
    """Make a read another task is waiting for on ``conn`` fail now (its reader then drops the connection):
    the transport is aborted, nothing of the connection's own state is touched here."""
    writer = getattr(conn, "_writer", None)
    if writer is not None:
        with contextlib.suppress(Exception):
            writer.transport.abort()


def abort_tls(conn: Any) -> None:
    """A TLS connection closed without waiting still waits on the event loop for the server's close_notify
    (up to 30 s), and its socket stays open if the loop ends first: one dropped without a wait is aborted
    instead (its socket closes now; nothing is lost, its reply is never read)."""
    writer = getattr(conn, "_writer", None)
    if writer is not None and writer.get_extra_info("sslcontext") is not None:
        writer.transport.abort()

"""The asyncio side of the Redis driver seam (``redis.asyncio``); :mod:`distlock._redis_sync` is its twin.

Only what differs between redis-py's two clients lives here, and nothing else: connecting, running a command
or a pipeline, bounding and dropping a connection of distlock's own request path, and fanning calls out to
several servers with one deadline (Redlock: tasks here, a thread pool and one-thread send-all-then-read-all
there). The logic written against these names is written once, in the backend's folder
(``_async/backends/redis/``: the backends, the request path ``wire.py``, the pub/sub listener ``listener.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as redis_driver
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import AskError, ClusterDownError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

log = logging.getLogger("distlock")

Client = redis_driver.Redis
ClusterClient = redis_driver.RedisCluster
ConnectionPool = redis_driver.ConnectionPool
#: either kind of client: the backend runs the same commands and pipelines on both
AnyClient = Client | ClusterClient
#: a cluster call on distlock's own connection that meets one of these goes through redis-py's routing
#: instead (it follows MOVED/ASK, refreshes the slot map, waits out a failover)
REROUTE = (AskError, TryAgainError, ClusterDownError, RedisConnectionError, RedisTimeoutError, RedisClusterException)


def connect(url: str, max_connections: int = 4096, **kwargs: Any) -> Client:
    """A client for one server; one retry on a broken pooled connection, no backoff (bounded waits).

    A plain pool (a blocking pool costs ~15 us more per command); ``max_connections`` is far above
    redis.asyncio's default of 100, so a hundred tasks contending in one process do not get "Too many
    connections" (redis-py's own ``max_connections`` URL option overrides it).
    """
    pool = redis_driver.ConnectionPool.from_url(
        url, max_connections=max_connections, retry=Retry(NoBackoff(), 1), **kwargs
    )
    client: Client = redis_driver.Redis.from_pool(pool)
    return client


async def connect_cluster(url: str, max_connections: int = 4096, **kwargs: Any) -> ClusterClient:
    """A Redis Cluster client seeded by the URL's host (it discovers the other nodes and the slot map).

    redis-py follows ``MOVED``/``ASK`` redirections and re-reads the slot map; its retries on a node that
    went away are bounded (3, at most 0.2 s apart) so a failed acquire is an error within seconds, not a
    hang. A seed that is not a cluster node, or no reachable node, raises ``ConnectionError``.
    """
    try:
        client: ClusterClient = redis_driver.RedisCluster.from_url(
            url,
            max_connections=max_connections,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 3),
            **kwargs,
        )
        await client.initialize()
    except RedisClusterException as exc:  # not a RedisError: say "cannot connect" like the plain client
        raise RedisConnectionError(str(exc)) from exc
    return client


def route(client: ClusterClient, key: str) -> tuple[str, Callable[[], Any]]:
    """The master that serves ``key``'s slot in the client's slot map: (its name, a connection factory)."""
    lookup: Any = client.get_node_from_key
    node: Any = lookup(key)
    return node.name, lambda: node.connection_class(**node.connection_kwargs)


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


def io_bound(conn: Any, timeout: float | None) -> Any:
    """Bounds a request's send and read on ``conn`` (None: the connection's own socket timeout)."""
    return asyncio.timeout(timeout)


async def disconnect(conn: Any) -> None:
    """Close a connection that may be mid-request (its reply is never read by a later request)."""
    with contextlib.suppress(Exception):
        await conn.disconnect(nowait=True)


def close_now(conn: Any) -> None:
    """Close a connection from code that cannot await (redis.asyncio's own sync close of the transport)."""
    with contextlib.suppress(Exception):
        conn._close()


async def scatter(
    wires: Sequence[Any],
    packed: bytes | Sequence[bytes],
    timeout: float,
    fanout: Fanout,
    expects: Sequence[str | None] | None = None,
) -> list[Any]:
    """The same pre-encoded request to several servers, concurrently, with one deadline. Each result is the
    reply, or the exception (``TimeoutError`` if none came in time); a wire whose reply is still due when
    the deadline passes is cancelled, and closes that connection."""
    packs = [packed] * len(wires) if isinstance(packed, bytes) else list(packed)
    exp = list(expects) if expects is not None else [None] * len(wires)
    calls = [functools.partial(w.call, p, None, None, e) for w, p, e in zip(wires, packs, exp, strict=True)]
    out = await fanout.gather(calls, timeout)
    recheck_cancel()
    return out


class Fanout:
    """Run one call per server concurrently with a common deadline (Redlock's parallel requests)."""

    def __init__(self, width: int) -> None:
        self.width = width

    async def gather(self, calls: Sequence[Callable[[], Awaitable[Any]]], timeout: float) -> list[Any]:
        """Each call's result, or the exception it raised, or ``TimeoutError`` if it did not finish in time."""
        tasks = [asyncio.ensure_future(c()) for c in calls]
        try:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)
        out: list[Any] = []
        for t in tasks:
            if t in done and not t.cancelled():
                exc = t.exception()
                out.append(exc if exc is not None else t.result())
            else:
                out.append(TimeoutError(f"no reply within {timeout:.3f}s"))
        return out

    def close(self) -> None:
        pass

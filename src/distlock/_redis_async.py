"""The asyncio side of the Redis driver glue (``redis.asyncio``); :mod:`distlock._redis_sync` is its twin.

Only what differs between redis-py's two clients lives here: connecting, running a command or a pipeline,
fanning calls out to several servers with one deadline (Redlock), and the pub/sub :class:`Listener` that
turns wake-up messages into local wake-ups. The backends (``_async/backends/redis.py``, ``redlock.py``)
are written once against these names.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as redis_driver
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import AskError, ClusterDownError, RedisClusterException, RedisError, ResponseError, TryAgainError
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


def _recheck_cancel() -> None:
    """Re-raise a cancellation the driver swallowed: redis.asyncio can finish a command although the task
    was cancelled while it waited for the reply (seen with redis-py 8.1 on Python 3.11); the caller must
    still see the CancelledError, or a cancelled acquire would go on waiting."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def every_master(client: AnyClient, *args: Any) -> Any:
    """A command for every master of a cluster (one reply per node), or for the one server."""
    if isinstance(client, ClusterClient):
        return await command(client, *args, target_nodes=ClusterClient.PRIMARIES)
    return await command(client, *args)


async def command(client: AnyClient, *args: Any, **kwargs: Any) -> Any:
    run: Any = client.execute_command
    result = await run(*args, **kwargs)
    _recheck_cancel()
    return result


async def pipeline(client: AnyClient, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Many commands in one round trip (no MULTI); a failing command raises."""
    async with client.pipeline(transaction=False) as pipe:
        for cmd in commands:
            queue: Any = pipe.execute_command
            queue(*cmd)
        result: list[Any] = await pipe.execute()
    _recheck_cancel()
    return result


async def close(client: AnyClient) -> None:
    await client.aclose()


class Restarted(ResponseError):
    """The server restarted since this client last read its run id (Redlock): the request prepared with the
    old run id is not sent; the caller counts this server out for the round and prepares the next with the
    new one."""


async def read_run_id(conn: Any) -> str:
    """The server's run id, read on ``conn`` itself (``INFO server``)."""
    await conn.send_command("INFO", "server", check_health=False)
    raw = await conn.read_response()
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    for line in text.splitlines():
        if line.startswith("run_id:"):
            return line[7:].strip()
    raise ResponseError("INFO server has no run_id")


class Wire:
    """distlock's own hot path to one server: a pre-encoded request on a connection of a small free list.

    redis-py's ``execute_command`` spends about as long in its own bookkeeping (pool lock, retry wrapper,
    observability hooks, argument encoding) as a loopback round trip takes; the acquire and release scripts
    are sent here instead, already encoded (:func:`distlock._core.redis_lua.packed_call`), on connections
    made from the client's own settings (URL, TLS, password, db, timeouts). Same failure behaviour as the
    client: a connection error or timeout closes the connection and the request is sent once more on a
    fresh one (the scripts are idempotent for a retry); an error reply leaves the connection in step; any
    other way out (a cancellation between sending and reading) closes the connection, so no later request
    can read this one's reply.
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make  # a new, unconnected redis.asyncio Connection
        self._idle: list[Any] = []
        self._closed = False
        #: called with each new connection and the call's ``expect`` before its first request (Redlock: the
        #: server's run id must be the one the request was prepared with)
        self.on_connect: Callable[[Any, str | None], Any] | None = None

    @classmethod
    def of(cls, client: Client) -> Wire:
        """Connections made like the client's own (URL, TLS, password, db, timeouts)."""
        pool: Any = client.connection_pool
        return cls(lambda: pool.connection_class(**pool.connection_kwargs))

    async def call(
        self, packed: bytes, unsure: list[bool] | None = None, timeout: float | None = None, expect: str | None = None
    ) -> Any:
        """Send ``packed`` and return its reply. If a first try fails after the request went out (so the
        server may have run it) and the request is sent again, ``True`` is appended to ``unsure``.
        ``timeout`` bounds each try below the connection's own socket timeout."""
        reply = (await self.call_many([packed], unsure, timeout, expect))[0]
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    async def call_many(
        self,
        packs: Sequence[bytes],
        unsure: list[bool] | None = None,
        timeout: float | None = None,
        expect: str | None = None,
    ) -> list[Any]:
        """Several requests in one round trip; an error reply is returned in its place (a ``ResponseError``),
        the connection stays in step. A try that times out closes its connection (a silent, half-open one
        is never used again) and is sent once more on a new one."""
        for attempt in (0, 1):
            sent = False
            conn = self._idle.pop() if self._idle else self._make()
            try:
                if not conn.is_connected:
                    await conn.connect()
                    if self.on_connect is not None:
                        await self.on_connect(conn, expect)
                short = timeout is not None and timeout < (conn.socket_timeout or float("inf"))
                async with asyncio.timeout(timeout if short else None):
                    sent = True
                    await conn.send_packed_command(list(packs), check_health=False)
                    replies: list[Any] = []
                    for _ in packs:
                        try:
                            replies.append(await conn.read_response())
                        except ResponseError as exc:
                            replies.append(exc)
            except Restarted:
                await self._drop(conn)
                raise
            except (RedisConnectionError, RedisTimeoutError, TimeoutError):
                await self._drop(conn)
                if attempt:
                    raise
                if sent and unsure is not None:
                    unsure.append(True)
                continue
            except BaseException:
                await self._drop(conn)
                raise
            self._put(conn)
            _recheck_cancel()
            return replies
        raise AssertionError("unreachable")

    def _put(self, conn: Any) -> None:
        if self._closed:  # a request that was in flight while the store closed
            with contextlib.suppress(Exception):
                conn._close()  # closes the transport without awaiting (redis.asyncio's own sync close)
        else:
            self._idle.append(conn)

    @staticmethod
    async def _drop(conn: Any) -> None:
        with contextlib.suppress(Exception):
            await conn.disconnect(nowait=True)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await self._drop(conn)


async def scatter(
    wires: Sequence[Wire],
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
    _recheck_cancel()
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


class Listener:
    """One pub/sub connection per server and store: routes wake-up messages to the local waiters.

    A waiter registers ``(channel, token, notify)``; a message carrying its token (or ``*``) calls
    ``notify``. :meth:`watch` returns only once the server has confirmed the subscription. :meth:`live`
    tells whether a channel's subscription is confirmed, and in which *generation*: the generation changes
    whenever messages may have been missed (the connection dropped), and every waiter is then notified to
    re-check. A caller that registered (:meth:`add`) while the channel was live, and finds the same
    generation after its re-check, cannot have missed a release in between. Channels stay subscribed for
    ``LINGER`` seconds after their last waiter left, so a busy lock is not re-subscribed per acquire.
    """

    LINGER = 10.0

    def __init__(self, client: AnyClient) -> None:
        self._client = client
        self._pubsub: Any = None
        self._waiters: dict[str, dict[str, Callable[[], None]]] = {}
        self._confirmed: dict[str, asyncio.Event] = {}
        self._live: dict[str, int] = {}
        self._idle: dict[str, float] = {}
        self._gen = 0
        self._last_sweep = 0.0
        self._task: asyncio.Task[None] | None = None
        self._guard = asyncio.Lock()
        self._closed = False
        self._stale = False  # cluster: the pub/sub connection must move (see _move)

    def live(self, channel: str) -> int | None:
        """The generation of the channel's confirmed subscription, or None if it is not subscribed now."""
        return self._live.get(channel)

    def add(self, channel: str, token: str, notify: Callable[[], None]) -> None:
        """Register a waiter locally (no I/O): messages for ``token`` on ``channel`` call ``notify``."""
        self._waiters.setdefault(channel, {})[token] = notify
        self._idle.pop(channel, None)

    async def watch(self, channel: str, token: str, notify: Callable[[], None], timeout: float) -> bool:
        """Register a waiter and subscribe; True once the subscription is confirmed (False: rely on hints)."""
        self.add(channel, token, notify)
        if channel in self._live:
            return True
        async with self._guard:
            if self._pubsub is None:
                make: Any = self._client.pubsub
                self._pubsub = make()
            event = self._confirmed.get(channel)
            if event is None:
                event = self._confirmed[channel] = asyncio.Event()
                try:
                    await self._pubsub.subscribe(channel)
                except RedisError as err:
                    log.debug("subscribe to %s failed: %s", channel, err)
                    del self._confirmed[channel]
                    return False
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._run(), name="distlock-redis-listener")
        try:
            async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancellation
                await event.wait()
        except TimeoutError:
            return False
        return True

    async def unwatch(self, channel: str, token: str) -> None:
        group = self._waiters.get(channel)
        if group is not None:
            group.pop(token, None)
            if not group:
                del self._waiters[channel]
                self._idle[channel] = time.monotonic()
        await self._sweep()

    async def _sweep(self) -> None:
        """Unsubscribe channels nobody waited on for ``LINGER`` seconds (checked at most once a second)."""
        now = time.monotonic()
        if now - self._last_sweep < 1.0 or self._pubsub is None:
            return
        self._last_sweep = now
        stale = [c for c, t in self._idle.items() if now - t > self.LINGER and c not in self._waiters]
        if not stale:
            return
        async with self._guard:
            stale = [c for c in stale if c not in self._waiters]
            for c in stale:
                self._idle.pop(c, None)
                self._confirmed.pop(c, None)
                self._live.pop(c, None)
            if stale:
                with contextlib.suppress(RedisError, OSError):
                    await self._pubsub.unsubscribe(*stale)

    def _lost_messages(self) -> None:
        """The connection dropped: subscriptions are not confirmed until re-subscribed; everyone re-checks."""
        self._gen += 1
        self._live.clear()
        for c in list(self._confirmed):
            self._confirmed[c] = asyncio.Event()
        for group in list(self._waiters.values()):
            for notify in list(group.values()):
                notify()

    async def _run(self) -> None:
        while not self._closed:
            if self._stale:
                await asyncio.sleep(0.2)
                await self._move()
                continue
            try:
                msg = await self._pubsub.get_message(ignore_subscribe_messages=False, timeout=1.0)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, RuntimeError) as err:
                log.debug("wake-up listener: %s (reconnecting)", err)
                self._lost_messages()
                await asyncio.sleep(0.2)
                if isinstance(self._client, ClusterClient):
                    await self._move()
                continue
            if msg is not None:
                self._dispatch(msg)

    async def _move(self) -> None:
        """Redis Cluster: the node under the pub/sub connection may be gone for good (its replica took
        over). Start a new pub/sub connection where the slot map now points and subscribe every channel
        again; while that fails, refresh the slot map and try again on the next round."""
        async with self._guard:
            make: Any = self._client.pubsub
            old, self._pubsub = self._pubsub, make()
            with contextlib.suppress(Exception):
                await old.aclose()
            channels = list(self._confirmed)
            self._stale = False
            try:
                if channels:
                    await self._pubsub.subscribe(*channels)
            except (RedisError, OSError, RuntimeError, RedisClusterException) as err:
                self._stale = True
                log.debug("wake-up listener: re-subscribe failed: %s (refreshing the slot map)", err)
                with contextlib.suppress(Exception):
                    cluster: Any = self._client
                    await cluster.nodes_manager.initialize()

    def _dispatch(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        channel = msg.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode()
        if not isinstance(channel, str):
            return
        group = self._waiters.get(channel, {})
        if kind == "subscribe":
            event = self._confirmed.get(channel)
            if event is not None:
                if event.is_set():  # re-subscribed after a reconnect we did not see: messages may be lost
                    self._gen += 1
                    for notify in list(group.values()):
                        notify()
                event.set()
                self._live[channel] = self._gen
        elif kind == "message":
            data = msg.get("data")
            token = data.decode() if isinstance(data, bytes) else str(data)
            if token == "*":
                for notify in list(group.values()):
                    notify()
            else:
                one = group.get(token)
                if one is not None:
                    one()

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()

"""The threaded side of the Redis driver glue (``redis``); the twin of :mod:`distlock._redis_async`.

Same names and behaviour; here the pub/sub listener is a daemon thread and the Redlock fan-out uses a
small thread pool.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ALL_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

import redis as redis_driver
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


def connect_cluster(url: str, max_connections: int = 4096, **kwargs: Any) -> ClusterClient:
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
    except RedisClusterException as exc:  # not a RedisError: say "cannot connect" like the plain client
        raise RedisConnectionError(str(exc)) from exc
    return client


def route(client: ClusterClient, key: str) -> tuple[str, Callable[[], Any]]:
    """The master that serves ``key``'s slot in the client's slot map: (its name, a connection factory)."""
    lookup: Any = client.get_node_from_key
    node: Any = lookup(key)
    pool: Any = node.redis_connection.connection_pool
    return node.name, lambda: pool.connection_class(**pool.connection_kwargs)


def every_master(client: AnyClient, *args: Any) -> Any:
    """A command for every master of a cluster (one reply per node), or for the one server."""
    if isinstance(client, ClusterClient):
        return command(client, *args, target_nodes=ClusterClient.PRIMARIES)
    return command(client, *args)


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


class Restarted(ResponseError):
    """The server restarted since this client last read its run id (Redlock): the request prepared with the
    old run id is not sent; the caller counts this server out for the round and prepares the next with the
    new one."""


def read_run_id(conn: Any) -> str:
    """The server's run id, read on ``conn`` itself (``INFO server``)."""
    conn.send_command("INFO", "server", check_health=False)
    raw = conn.read_response()
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    for line in text.splitlines():
        if line.startswith("run_id:"):
            return line[7:].strip()
    raise ResponseError("INFO server has no run_id")


class Wire:
    """distlock's own hot path to one server; see :class:`distlock._redis_async.Wire` (same contract).

    Threads take a connection each from the free list (``list.pop``/``append`` are atomic); a forked
    child starts a new list instead of sharing the parent's sockets.
    """

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make  # a new, unconnected redis Connection
        self._idle: list[Any] = []
        self._pid = os.getpid()
        self._closed = False
        #: called with each new connection and the call's ``expect`` before its first request (Redlock: the
        #: server's run id must be the one the request was prepared with)
        self.on_connect: Callable[[Any, str | None], Any] | None = None

    @classmethod
    def of(cls, client: Client) -> Wire:
        """Connections made like the client's own (URL, TLS, password, db, timeouts)."""
        pool: Any = client.connection_pool
        return cls(lambda: pool.connection_class(**pool.connection_kwargs))

    def call(
        self, packed: bytes, unsure: list[bool] | None = None, timeout: float | None = None, expect: str | None = None
    ) -> Any:
        """Send ``packed`` and return its reply. If a first try fails after the request went out (so the
        server may have run it) and the request is sent again, ``True`` is appended to ``unsure``.
        ``timeout`` bounds each try below the connection's own socket timeout."""
        reply = self.call_many([packed], unsure, timeout, expect)[0]
        if isinstance(reply, ResponseError):
            raise reply
        return reply

    def call_many(
        self,
        packs: Sequence[bytes],
        unsure: list[bool] | None = None,
        timeout: float | None = None,
        expect: str | None = None,
    ) -> list[Any]:
        """Several requests in one round trip; an error reply is returned in its place (a ``ResponseError``),
        the connection stays in step. A try that times out closes its connection (a silent, half-open one
        is never used again) and is sent once more on a new one."""
        if self._pid != os.getpid():
            self._idle, self._pid = [], os.getpid()
        for attempt in (0, 1):
            sent = False
            try:
                conn = self._idle.pop()
            except IndexError:
                conn = self._make()
            try:
                if not conn.is_connected:
                    conn.connect()
                    if self.on_connect is not None:
                        self.on_connect(conn, expect)
                want = timeout if timeout is not None and timeout < (conn.socket_timeout or float("inf")) else None
                want = conn.socket_timeout if want is None else want
                if conn._sock.gettimeout() != want:  # a system call each time it changes: only then
                    conn._sock.settimeout(want)
                sent = True
                conn.send_packed_command(list(packs), check_health=False)
                replies: list[Any] = []
                for _ in packs:
                    try:
                        replies.append(conn.read_response())
                    except ResponseError as exc:
                        replies.append(exc)
            except Restarted:
                self.drop(conn)
                raise
            except (RedisConnectionError, RedisTimeoutError, TimeoutError):
                self.drop(conn)
                if attempt:
                    raise
                if sent and unsure is not None:
                    unsure.append(True)
                continue
            except BaseException:
                self.drop(conn)
                raise
            self.put(conn)
            return replies
        raise AssertionError("unreachable")

    def take_ready(self) -> Any:
        """An idle connection that is connected and has nothing unread (a server that closed it, e.g. on a
        restart, makes it readable), else None: the caller then uses :meth:`call` (which may connect)."""
        if self._pid != os.getpid():
            self._idle, self._pid = [], os.getpid()
        try:
            conn = self._idle.pop()
        except IndexError:
            return None
        try:
            if conn.is_connected and not conn.can_read(timeout=0):
                return conn
        except (RedisError, OSError):
            pass
        self.drop(conn)
        self._idle.append(conn)  # disconnected: the next call reconnects it
        return None

    def put(self, conn: Any) -> None:
        if self._closed:
            self.drop(conn)
        else:
            self._idle.append(conn)

    @staticmethod
    def drop(conn: Any) -> None:
        with contextlib.suppress(Exception):
            conn.disconnect()

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            self.drop(conn)


def scatter(
    wires: Sequence[Wire],
    packed: bytes | Sequence[bytes],
    timeout: float,
    fanout: Fanout,
    expects: Sequence[str | None] | None = None,
) -> list[Any]:
    """The same pre-encoded request to several servers, in parallel with one deadline. Each result is the
    reply, or the exception (``TimeoutError`` if none came in time). Servers with an idle, connected and
    quiet connection are served from this one thread (send to all, then read all: parallel on the wire, no
    thread hand-offs); any other (it needs a connect, which may block) runs on the fan-out pool."""
    deadline = time.monotonic() + timeout
    packs = [packed] * len(wires) if isinstance(packed, bytes) else list(packed)
    exp = list(expects) if expects is not None else [None] * len(wires)
    out: list[Any] = [None] * len(wires)
    conns: list[Any] = [None] * len(wires)
    slow: list[int] = []
    for i, wire in enumerate(wires):
        conn = wire.take_ready()
        if conn is None:
            slow.append(i)
            continue
        try:
            conn.send_packed_command([packs[i]], check_health=False)
            conns[i] = conn
        except (RedisError, OSError) as exc:
            out[i] = exc
            wire.drop(conn)
    if slow:
        runs = [lambda w=wires[i], p=packs[i], e=exp[i]: w.call(p, None, None, e) for i in slow]
        for i, r in zip(slow, fanout.gather(runs, max(0.0, deadline - time.monotonic())), strict=True):
            out[i] = r
    for i, conn in enumerate(conns):
        if conn is None:
            continue
        try:
            if not conn.can_read(timeout=max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"no reply within {timeout:.3f}s")
            out[i] = conn.read_response()
        except ResponseError as exc:  # an error reply: the connection is still in step
            out[i] = exc
            wires[i].put(conn)
        except (RedisError, OSError) as exc:  # TimeoutError is an OSError; a late reply may still come
            out[i] = exc
            wires[i].drop(conn)
        else:
            wires[i].put(conn)
    return out


class Fanout:
    """Run one call per server concurrently with a common deadline (Redlock's parallel requests)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._pool = ThreadPoolExecutor(max_workers=max(16, width * 8), thread_name_prefix="distlock-redlock")

    def gather(self, calls: Sequence[Callable[[], Any]], timeout: float) -> list[Any]:
        """Each call's result, or the exception it raised, or ``TimeoutError`` if it did not finish in time."""
        futures = [self._pool.submit(c) for c in calls]
        done, _ = wait(futures, timeout=timeout, return_when=ALL_COMPLETED)
        out: list[Any] = []
        for f in futures:
            if f in done:
                exc = f.exception()
                out.append(exc if exc is not None else f.result())
            else:
                f.cancel()
                out.append(TimeoutError(f"no reply within {timeout:.3f}s"))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Listener:
    """One pub/sub connection per server and store: routes wake-up messages to the local waiters.

    See :class:`distlock._redis_async.Listener` (same contract); here a daemon thread reads the messages.
    """

    LINGER = 10.0

    def __init__(self, client: AnyClient) -> None:
        self._client = client
        self._pubsub: Any = None
        self._waiters: dict[str, dict[str, Callable[[], None]]] = {}
        self._confirmed: dict[str, threading.Event] = {}
        self._live: dict[str, int] = {}
        self._idle: dict[str, float] = {}
        self._gen = 0
        self._last_sweep = 0.0
        self._thread: threading.Thread | None = None
        self._guard = threading.RLock()
        self._closed = False
        self._stale = False  # cluster: the pub/sub connection must move (see _move)

    def live(self, channel: str) -> int | None:
        """The generation of the channel's confirmed subscription, or None if it is not subscribed now."""
        with self._guard:
            return self._live.get(channel)

    def add(self, channel: str, token: str, notify: Callable[[], None]) -> None:
        """Register a waiter locally (no I/O): messages for ``token`` on ``channel`` call ``notify``."""
        with self._guard:
            self._waiters.setdefault(channel, {})[token] = notify
            self._idle.pop(channel, None)

    def watch(self, channel: str, token: str, notify: Callable[[], None], timeout: float) -> bool:
        """Register a waiter and subscribe; True once the subscription is confirmed (False: rely on hints)."""
        with self._guard:
            self.add(channel, token, notify)
            if channel in self._live:
                return True
            if self._pubsub is None:
                make: Any = self._client.pubsub
                self._pubsub = make()
            event = self._confirmed.get(channel)
            if event is None:
                event = self._confirmed[channel] = threading.Event()
                try:
                    self._pubsub.subscribe(channel)
                except RedisError as err:
                    log.debug("subscribe to %s failed: %s", channel, err)
                    del self._confirmed[channel]
                    return False
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="distlock-redis-listener", daemon=True)
                self._thread.start()
        return event.wait(timeout)

    def unwatch(self, channel: str, token: str) -> None:
        with self._guard:
            group = self._waiters.get(channel)
            if group is not None:
                group.pop(token, None)
                if not group:
                    del self._waiters[channel]
                    self._idle[channel] = time.monotonic()
            self._sweep()

    def _sweep(self) -> None:
        """Unsubscribe channels nobody waited on for ``LINGER`` seconds (checked at most once a second)."""
        now = time.monotonic()
        if now - self._last_sweep < 1.0 or self._pubsub is None:
            return
        self._last_sweep = now
        stale = [c for c, t in self._idle.items() if now - t > self.LINGER and c not in self._waiters]
        for c in stale:
            self._idle.pop(c, None)
            self._confirmed.pop(c, None)
            self._live.pop(c, None)
        if stale:
            with contextlib.suppress(RedisError, OSError):
                self._pubsub.unsubscribe(*stale)

    def _lost_messages(self) -> None:
        """The connection dropped: subscriptions are not confirmed until re-subscribed; everyone re-checks."""
        with self._guard:
            self._gen += 1
            self._live.clear()
            for c in list(self._confirmed):
                self._confirmed[c] = threading.Event()
            everyone = [n for group in self._waiters.values() for n in group.values()]
        for notify in everyone:
            notify()

    def _run(self) -> None:
        while not self._closed:
            if self._stale:
                time.sleep(0.2)
                self._move()
                continue
            try:
                msg = self._pubsub.get_message(ignore_subscribe_messages=False, timeout=0.5)
            except (RedisError, OSError, RuntimeError, ValueError, AttributeError) as err:
                if self._closed:
                    return
                log.debug("wake-up listener: %s (reconnecting)", err)
                self._lost_messages()
                time.sleep(0.2)
                if isinstance(self._client, ClusterClient):
                    self._move()
                continue
            if msg is not None:
                self._dispatch(msg)

    def _move(self) -> None:
        """Redis Cluster: see :meth:`distlock._redis_async.Listener._move`."""
        with self._guard:
            make: Any = self._client.pubsub
            old, self._pubsub = self._pubsub, make()
            with contextlib.suppress(Exception):
                old.close()
            channels = list(self._confirmed)
            self._stale = False
            try:
                if channels:
                    self._pubsub.subscribe(*channels)
            except (RedisError, OSError, RuntimeError, RedisClusterException) as err:
                self._stale = True
                log.debug("wake-up listener: re-subscribe failed: %s (refreshing the slot map)", err)
                with contextlib.suppress(Exception):
                    cluster: Any = self._client
                    cluster.nodes_manager.initialize()

    def _dispatch(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        channel = msg.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode()
        if not isinstance(channel, str):
            return
        wake: list[Callable[[], None]] = []
        with self._guard:
            group = self._waiters.get(channel, {})
            if kind == "subscribe":
                event = self._confirmed.get(channel)
                if event is not None:
                    if event.is_set():  # re-subscribed after a reconnect we did not see: messages may be lost
                        self._gen += 1
                        wake = list(group.values())
                    event.set()
                    self._live[channel] = self._gen
            elif kind == "message":
                data = msg.get("data")
                token = data.decode() if isinstance(data, bytes) else str(data)
                if token == "*":
                    wake = list(group.values())
                elif token in group:
                    wake = [group[token]]
        for notify in wake:
            notify()

    def close(self) -> None:
        self._closed = True
        if self._pubsub is not None:
            with contextlib.suppress(RedisError, OSError):
                self._pubsub.close()
        if self._thread is not None:
            self._thread.join(2.0)

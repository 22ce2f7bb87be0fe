"""The asyncio side of the Redis driver glue (``redis.asyncio``); :mod:`distlock._redis_sync` is its twin.

Only what differs between redis-py's two clients lives here: connecting, running a command or a pipeline,
fanning calls out to several servers with one deadline (Redlock), and the pub/sub :class:`Listener` that
turns wake-up messages into local wake-ups. The backends (``_async/backends/redis.py``, ``redlock.py``)
are written once against these names.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import redis.asyncio as redis_driver
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

log = logging.getLogger("distlock")

Client = redis_driver.Redis


def connect(url: str, max_connections: int = 64, pool_timeout: float = 10.0, **kwargs: Any) -> Client:
    """A client for one server; one retry on a broken pooled connection, no backoff (bounded waits).

    The pool blocks (up to ``pool_timeout``) instead of failing when all its connections are busy: a
    hundred tasks contending in one process must queue for a connection, not get "Too many connections".
    """
    pool = redis_driver.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=pool_timeout, retry=Retry(NoBackoff(), 1), **kwargs
    )
    client: Client = redis_driver.Redis.from_pool(pool)
    return client


def _recheck_cancel() -> None:
    """Re-raise a cancellation the driver swallowed: redis.asyncio can finish a command although the task
    was cancelled while it waited for the reply (seen with redis-py 8.1 on Python 3.11); the caller must
    still see the CancelledError, or a cancelled acquire would go on waiting."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def command(client: Client, *args: Any) -> Any:
    run: Any = client.execute_command
    result = await run(*args)
    _recheck_cancel()
    return result


async def pipeline(client: Client, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Many commands in one round trip (no MULTI); a failing command raises."""
    async with client.pipeline(transaction=False) as pipe:
        for cmd in commands:
            queue: Any = pipe.execute_command
            queue(*cmd)
        result: list[Any] = await pipe.execute()
    _recheck_cancel()
    return result


async def close(client: Client) -> None:
    await client.aclose()


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
    ``notify``. :meth:`watch` returns only once the server has confirmed the subscription, so the re-check
    the caller does next cannot miss a release that happens in between. After a reconnect the driver
    re-subscribes and every waiter of the channel is notified (a release may have been missed meanwhile).
    """

    def __init__(self, client: Client) -> None:
        self._client = client
        self._pubsub: Any = None
        self._waiters: dict[str, dict[str, Callable[[], None]]] = {}
        self._confirmed: dict[str, asyncio.Event] = {}
        self._task: asyncio.Task[None] | None = None
        self._guard = asyncio.Lock()
        self._closed = False

    async def watch(self, channel: str, token: str, notify: Callable[[], None], timeout: float) -> bool:
        """Register a waiter; True once the subscription is confirmed (False: not in time, rely on hints)."""
        self._waiters.setdefault(channel, {})[token] = notify
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
        if group is None:
            return
        group.pop(token, None)
        if group:
            return
        del self._waiters[channel]
        async with self._guard:
            if channel in self._waiters or self._pubsub is None:
                return
            self._confirmed.pop(channel, None)
            with contextlib.suppress(RedisError):
                await self._pubsub.unsubscribe(channel)

    async def _run(self) -> None:
        while not self._closed:
            try:
                msg = await self._pubsub.get_message(ignore_subscribe_messages=False, timeout=1.0)
            except asyncio.CancelledError:
                raise
            except (RedisError, OSError, RuntimeError) as err:
                log.debug("wake-up listener: %s (reconnecting)", err)
                await asyncio.sleep(0.2)
                continue
            if msg is not None:
                self._dispatch(msg)

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
                if event.is_set():  # re-subscribed after a reconnect: a release may have been missed
                    for notify in list(group.values()):
                        notify()
                event.set()
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

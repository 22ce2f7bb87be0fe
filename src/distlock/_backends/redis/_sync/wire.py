# GENERATED from src/distlock/_backends/redis/_async/wire.py by scripts/gen_sync.py: edit that file, not this one.
"""distlock's own request path to a Redis server (``Wire``), and the run-id read that Redlock puts on each
new connection of it. Written once for both sides (generated for the sync side).

redis-py's ``execute_command`` spends about as long in its own bookkeeping (pool lock, retry wrapper,
observability hooks, argument encoding) as a loopback round trip takes. The acquire and release scripts are sent
here instead, already encoded (``distlock._backends.redis.calls.packed_call``), on connections made from the
client's own settings (URL, TLS, password, db, timeouts). What differs between redis.asyncio and redis (how a
call is bounded, how a connection is dropped, a cancellation the driver swallowed) is in the driver pair
``_driver_async.py`` / ``_driver_sync.py`` (this folder's parent); the rules of the path are here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ...._core import timing
from .. import _driver_sync as drv

#: idle connections a Wire keeps (more are open only while that many calls are in flight at once)
MAX_IDLE = 16


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


def every_master(client: drv.AnyClient, *args: Any) -> Any:
    """A command for every master of a cluster (one reply per node), or for the one server."""
    if isinstance(client, drv.ClusterClient):
        return drv.command(client, *args, target_nodes=drv.ClusterClient.PRIMARIES)
    return drv.command(client, *args)


class Wire:
    """A pre-encoded request on a connection of a small free list, to one server.

    Same failure behaviour as redis-py's client: a connection error or timeout closes the connection and the
    request is sent once more on a fresh one (the scripts are idempotent for a retry); an error reply leaves
    the connection in step; any other way out (a cancellation between sending and reading) closes the
    connection, so no later request can read this one's reply. Threads take a connection each from the free
    list (``list.pop``/``append`` are atomic); a forked child starts a new list instead of sharing the
    parent's sockets.
    """

    def __init__(self, made: drv.Made) -> None:
        # a new, unconnected driver Connection; and how long one request on it may take (the client's socket
        # timeout; the connections themselves may have none: ``drv.made``)
        self._make, self._bound = made
        self._idle: list[Any] = []
        #: connections with a request in flight (a failover interrupts them: ``moved``)
        self._busy: set[Any] = set()
        self._pid = os.getpid()
        self._closed = False
        # bumped when the server behind the connections changed (a Sentinel failover, see ``sentinel.py``): a
        # connection of an older epoch is never used again, and its reply does not count
        self._epoch = 0
        #: called with each new connection and the call's ``expect`` before its first request (Redlock: the
        #: server's run id must be the one the request was prepared with)
        self.on_connect: Callable[[Any, str | None], Any] | None = None

    @classmethod
    def of(cls, client: drv.Client) -> Wire:
        """Connections made like the client's own (URL, TLS, password, db, timeouts)."""
        pool: Any = client.connection_pool
        return cls(drv.made(pool.connection_class, pool.connection_kwargs))

    def call(
        self, packed: bytes, unsure: list[bool] | None = None, timeout: float | None = None, expect: str | None = None
    ) -> Any:
        """Send ``packed`` and return its reply. If a first try fails after the request went out (so the
        server may have run it) and the request is sent again, ``True`` is appended to ``unsure``.
        ``timeout`` bounds each try below the connection's own socket timeout."""
        reply = (self.call_many([packed], unsure, timeout, expect))[0]
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
        is never used again) and is sent once more on a new one; a try the master's change cut short
        (``moved``) is sent again without counting. Every try (its connect included) ends by the caller's
        deadline too (``timing.Budget``): none starts once it has passed."""
        attempt = 0
        own = self._bound if timeout is None or (self._bound is not None and self._bound <= timeout) else timeout
        while True:
            sent = False
            epoch = self._epoch
            each = timing.bound(own)
            if each is not None and each <= 0:
                raise RedisTimeoutError("no answer by the caller's deadline")
            conn = self.pop_idle()
            if conn is None:
                conn = self._make()
            self._busy.add(conn)
            try:
                if not conn.is_connected:
                    with drv.connect_bound(conn, each):
                        conn.connect()
                        drv.tune(conn)
                        if self.on_connect is not None:
                            self.on_connect(conn, expect)
                with drv.io_bound(conn, timing.bound(own)):
                    sent = True
                    conn.send_packed_command(list(packs), check_health=False)
                    replies: list[Any] = []
                    for _ in packs:
                        try:
                            replies.append(conn.read_response())
                        except ResponseError as exc:
                            replies.append(exc)
                if epoch != self._epoch:  # answered by the old master: sent again to the new one
                    raise RedisConnectionError("the master changed while the request was in flight")
            except Restarted:
                drv.disconnect(conn)
                raise
            except (RedisConnectionError, RedisTimeoutError, TimeoutError) as exc:
                drv.disconnect(conn)
                moved = epoch != self._epoch
                if attempt and not moved:
                    if isinstance(exc, TimeoutError):  # the connect's bound (not redis-py's): a Redis error too
                        raise RedisTimeoutError("no answer to the connect and handshake in time") from exc
                    raise
                if sent and unsure is not None:
                    unsure.append(True)
                attempt += 0 if moved else 1
                continue
            except BaseException:
                drv.disconnect(conn)
                raise
            finally:
                self._busy.discard(conn)
            self.put(conn)
            drv.recheck_cancel()
            return replies

    def _own(self) -> None:
        """In a forked child: none of the connections, idle or busy, are its own (never closed here)."""
        if self._pid != os.getpid():
            self._idle, self._busy, self._pid = [], set(), os.getpid()

    def pop_idle(self) -> Any:
        """An idle connection of this process, or None."""
        self._own()
        try:
            return self._idle.pop()
        except IndexError:
            return None

    def put(self, conn: Any) -> None:
        """Back to the free list after a call that left it in step; beyond ``MAX_IDLE`` idle ones, closed. A
        burst of calls (a thousand fair waiters' first tries, each task its own call) opens a connection
        each; kept, they stayed open on the server while the waiters waited, one per waiter."""
        if self._closed or len(self._idle) >= MAX_IDLE:  # (closed: a request in flight while the store closed)
            drv.close_now(conn)
        else:
            self._idle.append(conn)

    def moved(self) -> None:
        """The master is another server now: close the idle connections, and cut the busy ones short (their
        requests go again on new connections, to the new master). A busy one is not left to its reply: an
        old master that is frozen or cut off never sends one, and the request would wait out its timeout."""
        self._epoch += 1
        self._own()  # a forked child cuts none of the parent's
        idle, self._idle = self._idle, []
        for conn in idle:
            drv.disconnect(conn)
        for conn in self._busy.copy():
            drv.interrupt(conn)

    def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            drv.disconnect(conn)

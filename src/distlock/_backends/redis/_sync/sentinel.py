# GENERATED from src/distlock/_backends/redis/_async/sentinel.py by scripts/gen_sync.py: edit that file, not this one.
"""Following a Sentinel failover at once (``SwitchWatch``). Written once for both sides (generated for the
sync side: there the reader is a daemon thread, here an asyncio task).

redis-py's Sentinel client re-reads the master's address only when it makes a new connection, and drops a
connection only when the server answers it ``READONLY``. After ``SENTINEL FAILOVER`` (or a failover that
promoted a replica while the old master was only cut off), the old master stays a writable master until the
sentinels reconfigure it, which they do only after it has reported itself a master for a few seconds (8 s in
Redis 7). A client whose pooled connections still point there goes on granting locks on a server whose data
is about to be replaced by the new master's: two holders of one lock. So each store subscribes to the
sentinels' ``+switch-master`` announcement (on one sentinel at a time, the next one when that connection
breaks) and, when its service moves, makes every connection find the master again (``Node.follow``
in ``node.py``). On every (re)subscription the sentinels' current
answer is compared with the master the store uses, so a switch announced while no sentinel was listened to
is not missed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError
from redis.sentinel import MasterNotFoundError

from .... import _rt_sync as rt
from ...._core import forks
from ...._tls import one_line, verify_failure
from .. import _driver_sync as drv

log = logging.getLogger("distlock")

#: the sentinels' pub/sub channel that announces a new master: ``<service> <old ip> <old port> <ip> <port>``
SWITCH = "+switch-master"


def sentinel_pool(client: drv.AnyClient) -> Any:
    """The client's Sentinel-managed pool (``Sentinel.master_for``), or None for any other client."""
    pool: Any = getattr(client, "connection_pool", None)
    return pool if isinstance(getattr(pool, "sentinel_manager", None), drv.Sentinel) else None


class SwitchWatch:
    """Calls ``on_switch`` when the sentinels announce a new master for the pool's service."""

    def __init__(self, pool: Any, on_switch: Callable[[], Any]) -> None:
        self._pool = pool
        self._manager: Any = pool.sentinel_manager
        self._service = str(pool.service_name)
        self._on_switch = on_switch
        self._closed = False
        self._reader: rt.Background | None = rt.Background(self._run, "distlock-sentinel-watch")
        forks.track(self)

    def after_fork(self) -> None:
        """A forked child has no reader (the parent's thread or task is not there): ``ensure`` starts its own."""
        self._reader = None

    def ensure(self) -> None:
        """Before a request: a forked child's copy starts its own reader (once)."""
        if self._reader is None and not self._closed:
            self._reader = rt.Background(self._run, "distlock-sentinel-watch")

    def _run(self) -> None:
        turn = 0
        while not self._closed:
            sentinels = self._manager.sentinels
            sentinel = sentinels[turn % len(sentinels)]
            turn += 1
            make: Any = sentinel.pubsub
            pubsub = make()
            try:
                pubsub.subscribe(SWITCH)
                self._compare()
                while not self._closed:
                    msg = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
                    if msg is not None and self._ours(msg.get("data")):
                        self._first(sentinel)
                        self._on_switch()
            except drv.BROKEN as err:
                if self._closed:
                    return
                log.debug("sentinel watch: %s (trying the next sentinel)", err)
                rt.sleep(0.2)
            finally:
                with contextlib.suppress(Exception):
                    pubsub.close()

    def _first(self, sentinel: Any) -> None:
        """Ask the announcing sentinel first when looking the master up: the others may still name the old
        master for a moment (they learn the switch from it), and the old one may still accept writes."""
        sentinels = self._manager.sentinels
        with contextlib.suppress(ValueError):
            i = sentinels.index(sentinel)
            sentinels[0], sentinels[i] = sentinels[i], sentinels[0]

    def _ours(self, data: Any) -> bool:
        text = data.decode() if isinstance(data, bytes) else str(data)
        return text.split(" ", 1)[0] == self._service

    def _compare(self) -> None:
        """The sentinels' master now vs the one our connections were made to (None: none made yet)."""
        used = self._pool.master_address
        if used is None:
            return
        with contextlib.suppress(RedisError):
            now = self._manager.discover_master(self._service)
            if tuple(now) != tuple(used):
                self._on_switch()

    def why(self, exc: BaseException) -> str:
        """What to say for an error of the master's connections. redis-py's "No master found" strings every
        sentinel's client (all its settings, file paths included) together with a bare error class, and
        drops the reason: the sentinels are asked again, one by one, and the first one's own failure is
        said instead (a refused certificate with what to check). Only on the way to an error."""
        if not isinstance(exc, MasterNotFoundError):
            return str(exc)
        for sentinel in self._manager.sentinels:
            kwargs = sentinel.connection_pool.connection_kwargs
            where = f"{kwargs.get('host')}:{kwargs.get('port')}"
            try:
                sentinel.ping()
            except (RedisError, OSError) as err:
                return f"No master found for {self._service!r}: sentinel {where}: {verify_failure(err) or one_line(str(err))}"
        return f"No master found for {self._service!r}: the sentinels answer but name no master that is up"

    def close(self) -> None:
        self._closed = True
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()  # asyncio: now; a thread sees ``_closed`` within its 0.5 s read
            reader.join(2.0)

"""Redlock's fan-out on the threaded side: one request to several servers with one deadline; the twin of
``_fanout_async.py``. Servers whose connection is idle, connected and quiet are served from the calling thread
(send to all, then read all: parallel on the wire, no thread hand-offs); the others from a small thread pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ALL_COMPLETED, ThreadPoolExecutor, wait
from typing import Any

from redis.exceptions import RedisError, ResponseError

from ..._core import forks
from ..._core.text import seconds
from ._driver_sync import disconnect


def take_ready(wire: Any) -> Any:
    """An idle connection of ``wire`` that is connected and has nothing unread (a server that closed it,
    e.g. on a restart, makes it readable), else None: the caller then uses ``wire.call`` (which may
    connect)."""
    conn = wire.pop_idle()
    if conn is None:
        return None
    try:
        if conn.is_connected and not conn.can_read(timeout=0):
            return conn
    except (RedisError, OSError):
        pass
    disconnect(conn)
    wire.put(conn)  # disconnected: the next call reconnects it
    return None


def scatter(requests: Sequence[tuple[Any, bytes, str | None]], timeout: float, fanout: Fanout) -> list[Any]:
    """Pre-encoded requests, each ``(wire, packed, expect)``, one per server, in parallel with one deadline.
    Each result is the reply, or the exception (``TimeoutError`` if none came in time). Servers with an idle,
    connected and quiet connection are served from this one thread (send to all, then read all: parallel on
    the wire, no thread hand-offs); any other (it needs a connect, which may block) runs on the fan-out pool."""
    deadline = time.monotonic() + timeout
    wires = [w for w, _, _ in requests]
    out: list[Any] = [None] * len(wires)
    conns: list[Any] = [None] * len(wires)
    slow: list[int] = []
    for i, wire in enumerate(wires):
        conn = take_ready(wire)
        if conn is None:
            slow.append(i)
            continue
        try:
            conn.send_packed_command([requests[i][1]], check_health=False)
            conns[i] = conn
        except (RedisError, OSError) as exc:
            out[i] = exc
            disconnect(conn)
    if slow:
        runs = [lambda w=wires[i], p=requests[i][1], e=requests[i][2]: w.call(p, None, None, e) for i in slow]
        for i, r in zip(slow, fanout.gather(runs, max(0.0, deadline - time.monotonic())), strict=True):
            out[i] = r
    for i, conn in enumerate(conns):
        if conn is None:
            continue
        try:
            if not conn.can_read(timeout=max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"no reply within {seconds(timeout)}")
            out[i] = conn.read_response()
        except ResponseError as exc:  # an error reply: the connection is still in step
            out[i] = exc
            wires[i].put(conn)
        except (RedisError, OSError) as exc:  # TimeoutError is an OSError; a late reply may still come
            out[i] = exc
            disconnect(conn)
        else:
            wires[i].put(conn)
    return out


class Fanout:
    """Run one call per server concurrently with a common deadline (Redlock's parallel requests)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self._pool = self._new_pool()
        forks.track(self)

    def _new_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=max(16, self.width * 8), thread_name_prefix="distlock-redlock")

    def after_fork(self) -> None:
        """A forked child has none of the pool's threads, though the pool counts its idle ones (it would start
        no thread, and every call would time out): a pool of its own. The parent's is left alone."""
        self._pool = self._new_pool()

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
                out.append(TimeoutError(f"no reply within {seconds(timeout)}"))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

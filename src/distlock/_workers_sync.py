"""What runs beside the caller on the threaded side: user callbacks (``Dispatcher``, one thread per store)
and a store's background workers (``Background``), as daemon threads. The asyncio side's are tasks
(``_workers_async``); both are imported through their side's ``_rt`` module.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from ._core import forks, timing

log = logging.getLogger("distlock")


class Dispatcher:
    """Store internals run in the caller's thread; user callbacks on one callback thread per store.

    Never on the renewer, the lease clock or a driver's thread (kazoo's event thread delivers wake-ups to
    every waiter of the store): a slow callback then delays only other callbacks (F18 in docs/safety.md). Whatever a
    callback raises, ``SystemExit`` included, is logged and dropped.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[Callable[..., object], tuple[Any, ...]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._mutex = threading.Lock()

    def call(self, fn: Callable[[], object]) -> None:
        fn()

    def run_callback(self, cb: Callable[..., object], *args: Any) -> None:
        with self._mutex:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="distlock-callbacks", daemon=True)
                self._thread.start()
        self._queue.put((cb, args))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            cb, args = item
            try:
                cb(*args)
            except BaseException:  # user code must not stop the callback thread
                log.exception("on_lost callback %r raised", cb)

    def close(self) -> None:
        """Let queued callbacks run, then end the thread (not waited for: a callback may be slow)."""
        with self._mutex:
            if self._thread is not None:
                self._queue.put(None)


class Background:
    """One background worker (the store's renewer, a pub/sub reader): a daemon thread."""

    def __init__(self, fn: Callable[[], None], name: str) -> None:
        self._ended = False
        self._forks = forks.generation()  # a forked child has none of the parent's threads

        def run() -> None:
            try:
                fn()
            finally:
                self._ended = True

        # in a context of its own (where threads inherit one): never an acquire's deadline (see the twin)
        self._thread = threading.Thread(target=timing.unbudgeted().run, args=(run,), name=name, daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def alive(self) -> bool:
        # Thread.is_alive() takes the thread's lock: this is asked on every acquire (the lease workers), so a
        # flag the thread sets as its function ends, and the fork count (a child has none of the threads)
        return not self._ended and self._forks == forks.generation()

    def cancel(self) -> None:
        """A thread cannot be stopped from outside: the worker watches a flag its owner sets."""

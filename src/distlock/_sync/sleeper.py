# GENERATED from src/distlock/_async/sleeper.py by scripts/gen_sync.py: edit that file, not this one.
"""``Sleeper``: the lease clock's two workers (the clock and the renewer, ``clock.py``) as background loops that
sleep until a moment and can be woken early."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any

from .. import _rt_sync as rt
from .._core import forks
from .._core.timing import monotonic


class Sleeper:
    """A background loop (an asyncio task, or a daemon thread on the sync side) that sleeps until a moment
    and can be woken early. Started on first use; ``ensure(at)`` wakes it only if it sleeps past ``at`` (a
    thread switch per acquire would cost more than the whole acquire on a fast backend). A moment passed to
    ``ensure`` while the loop is between two sleeps is kept for its next sleep, so none is missed."""

    def __init__(self, loop: Callable[[], Any], name: str) -> None:
        self._loop = loop
        self._name = name
        self._waker: rt.Waker | None = None
        self._task: rt.Background | None = None
        self._wake_at: float | None = None  # None: awake (between two sleeps)
        self._earliest = math.inf  # asked for while awake
        self._mutex = threading.Lock()
        forks.track(self)

    def after_fork(self) -> None:
        """In a forked child: no worker (the parent's thread or task is not there) and a mutex of its own (the
        worker may have held it at the fork); the next ``ensure`` starts one."""
        self._mutex = threading.Lock()
        self._task = None
        self._waker = None
        self._wake_at = None

    def ensure(self, at: float) -> None:
        # The common case, without the mutex: the loop sleeps and wakes by ``at`` anyway (a sleep is at most
        # ``LeaseClock.TICK``), and whatever it is asked to watch is in the store's holdings before this call,
        # where its next look finds it. A stale read (of a sleep that has just ended) is as good: the loop
        # looks at the holdings only after it clears ``_wake_at``, and the holding was added before the read.
        wake_at, task = self._wake_at, self._task
        if wake_at is not None and wake_at <= at and task is not None and task.alive():
            return
        with self._mutex:
            if self._task is None or not self._task.alive():
                self._waker = rt.Waker()
                self._wake_at = None
                self._earliest = math.inf
                self._task = rt.Background(self._loop, name=self._name)
                return
            self._earliest = min(self._earliest, at)
            sleeps_past = self._wake_at is not None and at < self._wake_at
        if sleeps_past:
            self.wake()

    def wake(self) -> None:
        with self._mutex:
            waker = self._waker
        if waker is not None:
            waker.notify()

    def sleep_until(self, at: float) -> None:
        with self._mutex:
            at = min(at, self._earliest)
            self._earliest = math.inf
            self._wake_at = at
            waker = self._waker
        assert waker is not None
        try:
            waker.wait(max(0.0, at - monotonic()))
        finally:
            with self._mutex:
                self._wake_at = None

    def stop(self) -> None:
        self.wake()
        if self._task is not None:
            self._task.join(5.0)

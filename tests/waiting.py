"""Helpers of the hand-over and driver tests: polling for a condition, a waiter thread that takes a lock, keeps
it until told, and reports what it saw, and how long a cancellation takes to end a task."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any


def until(cond: Callable[[], Any], seconds: float = 10.0) -> bool:
    """Poll ``cond`` every 10 ms until it is true (True) or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


class Waiter:
    """A thread that acquires ``lock`` (within 30 s), records its fence, holds it until :meth:`finish`, then
    records whether it still owned it and releases it."""

    def __init__(self, lock: Any) -> None:
        self.fence: int | None = None
        self.owned: bool | None = None
        self._lock = lock
        self._got = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        assert self._lock.acquire(timeout=30)
        self.fence = self._lock.fence  # the fence is the owner's (this thread's)
        self._got.set()
        self._done.wait(30)
        self.owned = self._lock.owned()
        self._lock.release()

    def granted(self, seconds: float = 10.0) -> bool:
        return self._got.wait(seconds)

    def finish(self) -> None:
        self._done.set()
        self._thread.join(30)


def take_in_thread(lock: Any, timeout: float) -> tuple[threading.Thread, list[float]]:
    """A started thread that acquires ``lock`` within ``timeout`` and releases it at once, and the list it
    appends the monotonic time it got the lock to (empty if it did not)."""
    got: list[float] = []

    def run() -> None:
        if lock.acquire(timeout=timeout):
            got.append(time.monotonic())
            lock.release()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, got


def wake_ups(raw: Any, name: str) -> Any:
    """A redis-py pub/sub that receives every wake-up of the Redis lock ``name``: its channel ``{N}:wake`` and
    every store's reply channel ``{N}:wake:ID`` (a pattern subscription; its messages are ``pmessage``)."""
    channel = "{" + name + "}:wake"
    sub = raw.pubsub()
    sub.psubscribe("".join("\\" + c if c in "\\*?[]" else c for c in channel) + "*")
    first = sub.get_message(timeout=5)
    assert first is not None and first["type"] == "psubscribe", first
    return sub


async def cancel_takes(aw: Coroutine[Any, Any, Any], after: float = 0.2) -> float:
    """Run ``aw`` as a task, cancel it ``after`` seconds in, and return how long it took to end (it must end
    with the cancellation)."""
    task = asyncio.create_task(aw)
    await asyncio.sleep(after)
    task.cancel()
    started = time.monotonic()
    try:
        await task
    except asyncio.CancelledError:
        return time.monotonic() - started
    raise AssertionError("the task ended without the cancellation")

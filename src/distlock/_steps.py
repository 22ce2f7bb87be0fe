"""The asyncio steps a caller's cancellation must not cut in half: ``offload`` (a blocking driver step on a
worker thread) and ``shielded`` (a clean-up or a driver call run as a task of its own). Both make the caller
wait for the step's end and raise the cancellation after it. The threaded side needs neither (a thread cannot
be cancelled mid-call): its ``offload`` is the call and its ``shielded`` the value (``_rt_sync``). Imported
through ``_rt_async``, whose names the async code is written against.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import sys
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

#: the worker pool of ``offload``, made on first use, sized as asyncio's default executor (which ``offload``
#: does not use: see there). Its steps are short and bounded: no driver that blocks in a server-side wait
#: runs here (MySQL's waits are aiomysql's, on the event loop)
_POOL: list[ThreadPoolExecutor] = []
_POOL_GUARD = threading.Lock()


def _forked() -> None:
    """A forked child has none of the pool's threads, though the pool counts them (idle ones included, so it
    would start none and the child's steps would wait for ever): it makes a pool of its own. Its guard may
    have been held by a thread of the parent at the fork."""
    global _POOL_GUARD
    _POOL_GUARD = threading.Lock()
    _POOL.clear()  # the parent's pool object is left alone: shutting it down would wait for its threads


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _pool() -> ThreadPoolExecutor:
    with _POOL_GUARD:
        if not _POOL:
            workers = min(32, (os.cpu_count() or 1) + 4)
            _POOL.append(ThreadPoolExecutor(max_workers=workers, thread_name_prefix="distlock-step"))
        return _POOL[0]


class _Held(asyncio.Future[T]):
    """A future that the cancellation of the task awaiting it does not cancel.

    ``Task.cancel()`` first cancels the future its task awaits; when that future refuses (``cancel`` returns
    False), the task is marked instead and gets its ``CancelledError`` at its next step, which comes when the
    future completes. So the task waits for the outcome and is cancelled after it, with no helper task, no
    ``asyncio.shield`` and no extra loop turns in between (what ``offload`` and ``shielded`` need,
    and what ``shield`` cost: two loop turns per call). ``on_cancel`` runs at each refused cancellation (an
    interrupt that makes the outcome come soon)."""

    def __init__(self, on_cancel: Callable[[], object] | None = None) -> None:
        super().__init__()
        self._on_cancel = on_cancel

    def cancel(self, msg: Any | None = None) -> bool:
        if self._on_cancel is not None and not self.done():
            self._on_cancel()
        return False


def _settle(fut: asyncio.Future[T], step: Future[T]) -> None:
    exc = step.exception()
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(step.result())


async def offload(fn: Callable[..., T], *args: Any, interrupt: Callable[[], object] | None = None) -> T:
    """Run a blocking driver step (kazoo, sqlite3) on a worker thread: the one way the async side
    calls a blocking driver, and the one place its worker-thread rules are applied.

    The step runs in a copy of the caller's context (a call budget set by the caller applies in it), on
    distlock's pool. A thread cannot be stopped: if the caller is cancelled
    meanwhile, ``interrupt()`` makes the step end soon (an abort flag the step checks, a socket shut down
    under it) and the cancellation is raised only once the step has ended, so no clean-up that follows (an
    abandon, a discarded connection) ever runs beside it. A step without ``interrupt`` ends within its own
    bound (a busy timeout, a request timeout).

    Not ``loop.run_in_executor``: its result reaches the caller through a chain of futures, and the shield
    the cancellation rule needs adds two more loop turns; here the worker hands the outcome to the loop
    once (``call_soon_threadsafe``) and the caller awaits a ``_Held`` future.
    """
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    fut: _Held[T] = _Held(interrupt)
    step = _pool().submit(ctx.run, fn, *args)

    def _done(step: Future[T]) -> None:
        try:
            loop.call_soon_threadsafe(_settle, fut, step)
        except RuntimeError:  # the loop is closed: nobody awaits the outcome any more
            pass

    step.add_done_callback(_done)
    try:
        return await fut
    except asyncio.CancelledError:
        if fut.done() and not fut.cancelled():
            fut.exception()  # retrieved: the step's failure is the interrupt's doing, not news
        raise


#: Python 3.12+ runs a task's first step in its constructor (``eager_start``) instead of a loop turn later: a
#: shielded call's request goes out at once, one loop turn less per call (PostgreSQL's calls, releases);
#: measured on 3.13, async/sync time in PostgreSQL session mode 1.27-1.28x -> 1.24x, lease 1.24-1.25x -> 1.21-1.22x
_EAGER: dict[str, Any] = {"eager_start": True} if sys.version_info >= (3, 12) else {}


class _Unstoppable(asyncio.Task[T]):
    """A task that the cancellation of its caller (the task that made it and awaits it) does not cancel: see
    ``_Held``, whose rule the caller then follows; ``on_cancel`` runs at each refused cancellation. Its
    work is bounded by its own timeouts, which cancel this task itself and must keep working: a caller's
    cancellation is told from them by the caller's count of cancellation requests, which ``Task.cancel``
    raises before it passes the cancellation on to the awaited task (here)."""

    def __init__(self, coro: Coroutine[Any, Any, T], on_cancel: Callable[[], object] | None) -> None:
        # set before the task starts: on Python 3.12+ it starts at once (below), and may cancel itself
        self._on_cancel = on_cancel
        self._caller = asyncio.current_task()
        self._seen = self._caller.cancelling() if self._caller is not None else 0
        super().__init__(coro, loop=asyncio.get_running_loop(), **_EAGER)

    def cancel(self, msg: Any | None = None) -> bool:
        asked = self._caller.cancelling() if self._caller is not None else 0
        if asked <= self._seen:  # not the caller's: one of the work's own timeouts
            return super().cancel(msg)
        self._seen = asked
        if self._on_cancel is not None and not self.done():
            self._on_cancel()
        return False


def in_shielded_step() -> bool:
    """Whether the running code is a ``shielded`` step's (its task is one of those ``shielded`` makes): a
    cancellation of the caller does not reach it, only the step's own timeouts do. A driver call made there
    that no timeout of the step surrounds needs no shield of its own: ``guarded`` of
    ``_backends/postgres/_driver_async.py`` (whose calls are bounded by the connection's timer, and whose one
    ``asyncio.timeout`` is around connecting) awaits it directly, a task and two loop turns less per release."""
    return isinstance(asyncio.current_task(), _Unstoppable)


async def shielded(aw: Coroutine[Any, Any, T], on_cancel: Callable[[], object] | None = None) -> T:
    """Await ``aw`` to completion even if the caller is cancelled meanwhile, then re-raise the cancellation.

    Used for clean-up that must not be cut in half: removing a queued entry after a failed acquire, and
    the release round trip (a half-done release would leave the lock looking free while it is held); and
    for a driver call that a cancellation must end by other means than its own (``on_cancel``: psycopg,
    ``guarded`` of ``_backends/postgres/_driver_async.py``). ``aw`` runs as a task of its own that refuses
    cancellation and that the caller awaits directly: the caller's cancellation waits for the task's end (one
    loop turn after it, where ``asyncio.shield`` took three).
    """
    task: _Unstoppable[T] = _Unstoppable(aw, on_cancel)
    try:
        return await task
    except asyncio.CancelledError:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: a clean-up failure must not be logged as "never retrieved"
        raise

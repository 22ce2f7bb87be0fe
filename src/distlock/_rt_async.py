"""Runtime primitives for the asyncio side.

``_async/*.py`` is written once against these names; ``scripts/gen_sync.py`` generates ``_sync/*.py``,
which imports the same names from ``distlock._rt_sync``. The two runtime modules are the only code
that is written twice on purpose: they are the difference between threads and tasks, nothing else.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from ._core import exits, timing

T = TypeVar("T")

log = logging.getLogger("distlock")

Event = asyncio.Event
Mutex = asyncio.Lock
IS_ASYNC = True


class StateGuard:
    """Guards a few dict operations that never await: one task runs at a time, so nothing to do here (on the
    threaded side it is a lock, because a reader thread shares the maps with the callers' threads)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """True once ``event`` is set, False if ``timeout`` passed first."""
    try:
        async with asyncio.timeout(timeout):  # not wait_for: on 3.11 it can swallow a cancellation
            await event.wait()
    except TimeoutError:
        return False
    return True


async def acquire_within(mutex: asyncio.Lock, timeout: float | None) -> bool:
    """True once ``mutex`` is held by the caller, False if ``timeout`` passed first (then it is not held)."""
    try:
        async with asyncio.timeout(timeout):  # a cancelled Lock.acquire leaves the lock to the next waiter
            await mutex.acquire()
    except TimeoutError:
        return False
    return True


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)


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


def owner_key() -> object:
    """Who owns a reentrant hold: the current asyncio task (never the thread: redis-py's asyncio lock keyed by thread, so two tasks shared a hold)."""
    task = asyncio.current_task()
    return task if task is not None else threading.get_ident()


def owner_label() -> str:
    task = asyncio.current_task()
    if task is None:
        return f"thread-{threading.get_ident()}"
    return f"task-{id(task):x}"


class Waker:
    """A wake-up flag that any thread may raise and one waiter consumes.

    ``notify()`` is the wake-up itself; ``kick()`` only ends a wait early without one (the Redis listener
    uses it to hand its read role to a waiting task, which then reads the pub/sub connection itself)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        self._fired = False

    def _fire(self) -> None:
        self._fired = True
        self._event.set()

    def _call(self, fn: Callable[[], object]) -> None:
        try:
            # On the loop itself (a task that reads the connection and wakes itself or another task), at once:
            # the waiter's next ``take()`` must see it. Asked of the running loop, not of a private attribute
            # (uvloop's loop has no ``_thread_id``: every wake-up there came a loop turn late, after the waiter
            # had gone back to reading, and was seen only when that read timed out).
            if asyncio._get_running_loop() is self._loop:
                fn()
            else:
                self._loop.call_soon_threadsafe(fn)
        except RuntimeError:  # loop closed: nobody is waiting any more
            pass

    def notify(self) -> None:
        self._call(self._fire)

    def kick(self) -> None:
        self._call(self._event.set)

    def take(self) -> bool:
        """Consume a notification without waiting: True if there was one."""
        self._event.clear()
        fired, self._fired = self._fired, False
        return fired

    async def wait(self, timeout: float | None) -> bool:
        """Wait until notified, kicked or ``timeout``; True if notified. Consumes the notification."""
        if not self._event.is_set():
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that races the result
            try:
                async with asyncio.timeout(timeout):
                    await self._event.wait()
            except TimeoutError:
                pass
        return self.take()


class Dispatcher:
    """Runs store internals and user callbacks on the store's event loop, from any thread.

    A user callback never stops the store: whatever it raises (``SystemExit`` included, which would
    otherwise end the event loop) is logged and dropped; a coroutine callback runs as its own task.
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()

    def call(self, fn: Callable[[], object]) -> None:
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:
            pass

    def run_callback(self, cb: Callable[..., object], *args: Any) -> None:
        """Call a user callback off the critical path; coroutine functions become tasks."""

        def _go() -> None:
            try:
                result = cb(*args)
            except BaseException:  # user code must not stop the loop or the renewals
                log.exception("on_lost callback %r raised", cb)
                return
            if asyncio.iscoroutine(result):
                self._loop.create_task(_contained(cb, result))

        self.call(_go)

    def close(self) -> None:
        pass


async def _contained(cb: object, coro: Coroutine[Any, Any, object]) -> None:
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except BaseException:  # see Dispatcher
        log.exception("on_lost callback %r raised", cb)


class Background:
    """One background worker (the store's renewer, a pub/sub reader): an asyncio task."""

    def __init__(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        # in a context of its own: a worker started inside an acquire must not keep that acquire's deadline
        ctx = timing.unbudgeted()
        self._task: asyncio.Task[None] = asyncio.get_running_loop().create_task(fn(), name=name, context=ctx)

    async def join(self, timeout: float | None = None) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except (TimeoutError, asyncio.CancelledError):
            self._task.cancel()
            try:
                await self._task
            except BaseException:  # noqa: BLE001 - the worker is being torn down
                pass

    def alive(self) -> bool:
        return not self._task.done()

    def cancel(self) -> None:
        """Stop the worker at its next await (a thread cannot be stopped: it watches a flag instead)."""
        self._task.cancel()


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


async def bounded(timeout: float | None, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await fn(*args)``, cancelled after ``timeout`` seconds (then ``TimeoutError``). A backend closes a
    connection whose call was cancelled, so a late reply is never read as the answer to a later call."""
    async with asyncio.timeout(timeout):
        return await fn(*args)


async def wait_readable(sock: socket.socket, timeout: float | None) -> bool:
    """Wait until ``sock`` has data (True) or ``timeout`` passes (False), without blocking the loop."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def _ready() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), _ready)
    try:
        async with asyncio.timeout(timeout):
            await ready
        return True
    except TimeoutError:
        return ready.done()
    finally:
        loop.remove_reader(sock.fileno())


# -- a normal exit ------------------------------------------------------------------------------------------
def _warn_at_exit(holders: list[exits.Held]) -> None:
    """The sync side releases what a store still holds at a normal exit. Here nothing can be: by the time the
    interpreter's exit hooks run, the event loop that owns the store's connections has ended (``asyncio.run``
    returned), and another loop cannot use them. So the exit only says, as a logged warning, how many holdings
    stay until their TTL ends: close the store (``async with``) or release them before the loop ends."""
    log.warning(
        "exit: %d lock holding(s) of asyncio stores were not released before their event loop ended: they "
        "stay held until their TTL runs out (release them, or close the store, inside the loop)",
        sum(holder._held_at_exit() for holder in holders),
    )


ExitHolder = exits.Held
_exit = exits.AtExit[ExitHolder](_warn_at_exit)
#: a store's acquirer holds something (its first holding) / nothing any more: see ``_warn_at_exit``
hold_at_exit, drop_at_exit = _exit.hold, _exit.drop

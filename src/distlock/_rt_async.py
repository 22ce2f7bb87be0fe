"""Runtime primitives for the asyncio side.

``_async/*.py`` is written once against these names; ``scripts/gen_sync.py`` generates ``_sync/*.py``,
which imports the same names from ``distlock._rt_sync``. The runtime is the only code written twice on
purpose: it is the difference between threads and tasks, nothing else. What runs beside the caller (callbacks,
background workers) is in ``_workers_async``/``_workers_sync``, the asyncio steps a cancellation must wait for
(``offload``, ``shielded``) in ``_steps``, and what a normal exit does in ``_exits``; this module re-exports
them, so the async code knows one name per primitive.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeAlias, TypeVar

from . import _exits
from ._steps import in_shielded_step as in_shielded_step
from ._steps import offload as offload
from ._steps import shielded as shielded
from ._workers_async import Background as Background
from ._workers_async import Dispatcher as Dispatcher

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
#: a function the caller hands the lock layer to run (``at_most_once``): a coroutine function on this side, a
#: plain function on the threaded one (``_rt_sync.Job``), so one signature types both
Job: TypeAlias = Callable[P, Awaitable[R]]

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


# -- a normal exit: nothing can be released (``_exits``) -----------------------------------------------------
ExitHolder = _exits.Held
hold_at_exit, drop_at_exit = _exits.ASYNC_EXIT.hold, _exits.ASYNC_EXIT.drop
opened_at_exit, closed_at_exit = _exits.ASYNC_EXIT.opened, _exits.ASYNC_EXIT.closed

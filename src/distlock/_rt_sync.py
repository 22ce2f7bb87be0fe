"""Runtime primitives for the threaded (sync) side: the same names as ``distlock._rt_async``."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeAlias, TypeVar

from . import _exits
from ._core.text import seconds
from ._workers_sync import Background as Background
from ._workers_sync import Dispatcher as Dispatcher

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")
#: a function the caller hands the lock layer to run (``at_most_once``): ``_rt_async.Job``'s threaded twin
Job: TypeAlias = Callable[P, R]

log = logging.getLogger("distlock")

Event = threading.Event
Mutex = threading.Lock
IS_ASYNC = False
#: a reader thread shares the guarded maps with the callers' threads (reentrant: a notify may register)
StateGuard = threading.RLock


def wait_event(event: threading.Event, timeout: float | None) -> bool:
    return event.wait(timeout)


def acquire_within(mutex: threading.Lock, timeout: float | None) -> bool:
    return mutex.acquire(timeout=-1 if timeout is None else max(0.0, timeout))


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def offload(fn: Callable[..., T], *args: Any, interrupt: Callable[[], object] | None = None) -> T:
    """Sync twin of the async ``offload``: the calling thread is the worker, nothing can cancel it mid-step."""
    return fn(*args)


def owner_key() -> object:
    """Who owns a reentrant hold: the current thread."""
    return threading.get_ident()


def owner_label() -> str:
    return f"thread-{threading.get_ident()}"


class Waker:
    """The threaded side's wake-up flag, with the contract of ``_rt_async.Waker`` (``notify`` wakes, ``kick``
    only ends a wait); here a waiting thread takes the listener's read role, and a lock makes the flag's read
    and reset one step."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._fired = False
        self._mutex = threading.Lock()  # the flag is read and reset in one step (a notify never goes missing)

    def notify(self) -> None:
        with self._mutex:
            self._fired = True
        self._event.set()

    def kick(self) -> None:
        self._event.set()

    def take(self) -> bool:
        """Consume a notification without waiting: True if there was one."""
        # clear first, then read the flag: a notify in between leaves the event set, so at worst the next
        # wait returns at once (as after a kick)
        self._event.clear()
        with self._mutex:
            fired, self._fired = self._fired, False
        return fired

    def wait(self, timeout: float | None) -> bool:
        """Wait until notified, kicked or ``timeout``; True if notified. Consumes the notification."""
        self._event.wait(timeout)
        return self.take()


def shielded(value: T) -> T:
    """Sync twin of the async ``shielded``: a thread cannot be cancelled mid-call, the value is ready."""
    return value


def bounded(timeout: float | None, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, waited for at most ``timeout`` seconds (then ``TimeoutError``).

    A thread cannot be cancelled: the call runs on a helper thread and goes on after the timeout until the
    driver's own socket timeout ends it (the backend then closes that connection); its result is dropped.
    """
    if timeout is None:
        return fn(*args)
    box: list[Any] = []
    done = threading.Event()

    def run() -> None:
        try:
            box.append((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller below
            box.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="distlock-bounded-call", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"no answer within {seconds(timeout)}")
    ok, value = box[0]
    if not ok:
        raise value
    result: T = value
    return result


def wait_readable(sock: socket.socket, timeout: float | None) -> bool:
    """Wait until ``sock`` has data (True) or ``timeout`` passes (False)."""
    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable)


# -- a normal exit: release what is still held (``_exits``) ------------------------------------------------
ExitHolder = _exits.Closing
hold_at_exit, drop_at_exit = _exits.SYNC_EXIT.hold, _exits.SYNC_EXIT.drop
opened_at_exit, closed_at_exit = _exits.SYNC_EXIT.opened, _exits.SYNC_EXIT.closed

"""Runtime primitives for the threaded (sync) side: the same names as ``distlock._rt_async``."""

from __future__ import annotations

import logging
import queue
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ._core import exits, forks, timing
from ._core.text import seconds

T = TypeVar("T")

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
    """A wake-up flag that any thread may raise and one waiter consumes.

    ``notify()`` is the wake-up itself; ``kick()`` only ends a wait early without one (the Redis listener
    uses it to hand its read role to a waiting thread, which then reads the pub/sub connection itself)."""

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


# -- a normal exit ------------------------------------------------------------------------------------------
class ExitHolder(Protocol):
    """A store's holdings (its acquirer), as the exit sees them."""

    def _held_at_exit(self) -> int: ...

    def close_at_exit(self) -> None: ...


#: how long a normal interpreter exit may spend releasing what the process still holds, in all
EXIT_BUDGET = 3.0


def _release_at_exit(holders: list[ExitHolder]) -> None:
    """At a normal interpreter exit (a script that ends without ``release()`` or ``close()``): release what
    each store still holds of this process (in a forked child: only what the child took, see ``forks``), so its
    locks are free at once, not at the end of their TTL. One store after the other on a helper thread, waited
    for at most EXIT_BUDGET in all: a server that does not answer must not hang the exit. Each release is
    bounded by its backend's call timeout as always; what is not released in time ends with its TTL, as after
    a crash."""

    def run() -> None:
        for holder in holders:
            try:
                holder.close_at_exit()
            except Exception as exc:  # noqa: BLE001 - the next store is still released
                log.warning("exit: could not release a store's locks (%s): they end with their TTL", exc)

    thread = threading.Thread(target=run, name="distlock-exit", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no new thread at this point of the exit on some Python versions: unbounded then
        run()
        return
    # joined, not only waited for: the interpreter must not tear down while the thread is still ending (its
    # frames and the closed connections it drops); a crash at exit was seen when it did (MySQL, 1 in 8)
    thread.join(EXIT_BUDGET)
    if thread.is_alive():
        log.warning("exit: locks not released within %s: they end with their TTL", seconds(EXIT_BUDGET))


_exit = exits.AtExit[ExitHolder](_release_at_exit)
#: a store's acquirer holds something (its first holding) / nothing any more: see ``_release_at_exit``
hold_at_exit, drop_at_exit = _exit.hold, _exit.drop

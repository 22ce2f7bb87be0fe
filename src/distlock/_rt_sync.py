"""Runtime primitives for the threaded (sync) side: the same names as :mod:`distlock._rt_async`."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

Event = threading.Event
Mutex = threading.Lock
IS_ASYNC = False


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)


def owner_key() -> object:
    """Who owns a reentrant hold: the current thread."""
    return threading.get_ident()


def owner_label() -> str:
    return f"thread-{threading.get_ident()}"


class Waker:
    """A wake-up flag that any thread may raise and one waiter consumes."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def notify(self) -> None:
        self._event.set()

    def wait(self, timeout: float | None) -> bool:
        fired = self._event.wait(timeout)
        self._event.clear()
        return fired


class Dispatcher:
    """Runs callbacks in the caller's thread (the renewer thread or a driver thread): off the lock's critical path."""

    def call(self, fn: Callable[[], object]) -> None:
        fn()

    def run_callback(self, cb: Callable[..., object], *args: Any) -> None:
        cb(*args)


class Background:
    """One background worker (the store's renewer): a daemon thread."""

    def __init__(self, fn: Callable[[], None], name: str) -> None:
        self._thread = threading.Thread(target=fn, name=name, daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def alive(self) -> bool:
        return self._thread.is_alive()


def shielded(value: T) -> T:
    """Sync twin of the async ``shielded``: a thread cannot be cancelled mid-call, the value is ready."""
    return value


def wait_readable(sock: socket.socket, timeout: float | None) -> bool:
    """Wait until ``sock`` has data (True) or ``timeout`` passes (False)."""
    readable, _, _ = select.select([sock], [], [], timeout)
    return bool(readable)

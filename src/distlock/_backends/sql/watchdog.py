"""A watchdog thread that ends a database call at its deadline by shutting its socket down (the threaded
side: ``guarded`` of ``postgres/_driver_sync.py``, ``call`` of ``mysql/_driver_sync.py``).

psycopg has no client-side read timeout, and libpq's keepalives and ``tcp_user_timeout`` do not fire on a
link that still acknowledges bytes but answers nothing (a frozen peer, a proxy, a hung server): the call
would wait forever. A call registers the connection's socket with a deadline (``_Watchdog.add``, and
``_Watchdog.remove`` when it ends); one daemon thread shuts the socket down (``SHUT_RDWR``) when the
deadline passes while the call is still running, so the driver's blocked read returns an error at once. The
connection is then closed by its owner, never reused. Registering costs a lock and a heap push (no thread
per call). The asyncio side keeps a call's deadline with a timer of the connection on its event loop
instead (``postgres/_driver_async.py``, ``_aconn.py``), and uses ``_Watchdog.kill`` only to end a call whose
caller was cancelled.
"""

from __future__ import annotations

import heapq
import itertools
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..._core import forks

T = TypeVar("T")


class _Watchdog:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # the condition's: taken directly by the calls (no Python-level __enter__)
        self._cond = threading.Condition(self._lock)
        self._heap: list[tuple[float, int, int]] = []  # (deadline, ticket, fd)
        self._live: dict[int, int] = {}  # ticket -> fd, while the call runs
        self._fired: set[int] = set()
        self._tickets = itertools.count()
        self._thread: threading.Thread | None = None
        #: when the thread wakes next by itself (its wait's end; +inf: not before a notify), under _cond
        self._until = math.inf
        forks.track(self)

    def after_fork(self) -> None:
        """A forked child has no watchdog thread and none of the parent's calls; its condition may have been
        held by the parent's thread at the fork."""
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._heap, self._live, self._fired = [], {}, set()
        self._thread = None
        self._until = math.inf

    def add(self, fd: int, deadline: float) -> int:
        with self._lock:
            heap = self._heap
            # the calls that ended (the previous one on this thread, as a rule) leave the top here rather than
            # when the thread wakes: the heap stays as small as the number of calls running, instead of one
            # entry per call of the last call_timeout (thousands, each push a walk through cold memory)
            while heap and heap[0][1] not in self._live:
                heapq.heappop(heap)
            ticket = next(self._tickets)
            self._live[ticket] = fd
            heapq.heappush(heap, (deadline, ticket, fd))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="distlock-sql-watchdog", daemon=True)
                self._thread.start()
            elif deadline < self._until:  # the thread would wake too late for this one: no wake-up otherwise
                self._cond.notify()
        return ticket

    def remove(self, ticket: int) -> bool:
        """Unregister; True if the deadline had fired (the socket was shut down)."""
        with self._lock:
            self._live.pop(ticket, None)
            if ticket in self._fired:
                self._fired.discard(ticket)
                return True
            return False

    def within(self, fd: int, deadline: float, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, the socket ``fd`` shut down at ``deadline`` if it still runs then; ``Fired`` if it was
        (whether ``fn`` failed on it or its answer had come just before: the connection must not serve again,
        and a call past its deadline fails). (Not a context manager: a generator's frames cost per call.)"""
        ticket = self.add(fd, deadline)
        try:
            result = fn(*args)
        except BaseException as exc:
            if not self.remove(ticket) or not isinstance(exc, Exception):
                raise
        else:
            if not self.remove(ticket):
                return result
        raise Fired

    def kill(self, fd: int) -> None:
        _shutdown(fd)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and (self._heap[0][1] not in self._live or self._heap[0][0] <= now):
                    _, ticket, fd = heapq.heappop(self._heap)
                    if ticket in self._live:  # still running at its deadline: end it
                        del self._live[ticket]
                        self._fired.add(ticket)
                        _shutdown(fd)
                self._until = self._heap[0][0] if self._heap else math.inf
                self._cond.wait(None if not self._heap else max(0.0, self._until - now))


def _shutdown(fd: int) -> None:
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.detach()  # the fd stays the driver's: it closes it


class Fired(Exception):
    """A call's deadline passed while it ran, and its socket was shut down (``_Watchdog.within``)."""


WATCHDOG = _Watchdog()

"""A watchdog thread that ends a database call at its deadline by shutting its socket down (the threaded
side of PostgreSQL: ``guarded`` of ``postgres/_driver_sync.py``).

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
import socket
import threading
import time

import psycopg

from ..._core import forks


class _Watchdog:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, int]] = []  # (deadline, ticket, fd)
        self._live: dict[int, int] = {}  # ticket -> fd, while the call runs
        self._fired: set[int] = set()
        self._tickets = itertools.count()
        self._thread: threading.Thread | None = None
        forks.track(self)

    def after_fork(self) -> None:
        """A forked child has no watchdog thread and none of the parent's calls; its condition may have been
        held by the parent's thread at the fork."""
        self._cond = threading.Condition()
        self._heap, self._live, self._fired = [], {}, set()
        self._thread = None

    def add(self, fd: int, deadline: float) -> int:
        with self._cond:
            ticket = next(self._tickets)
            self._live[ticket] = fd
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (deadline, ticket, fd))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="distlock-sql-watchdog", daemon=True)
                self._thread.start()
            elif earliest is None or deadline < earliest:
                self._cond.notify()
        return ticket

    def remove(self, ticket: int) -> bool:
        """Unregister; True if the deadline had fired (the socket was shut down)."""
        with self._cond:
            self._live.pop(ticket, None)
            if ticket in self._fired:
                self._fired.discard(ticket)
                return True
            return False

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
                self._cond.wait(None if not self._heap else max(0.0, self._heap[0][0] - now))


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


WATCHDOG = _Watchdog()


def timed_out() -> psycopg.OperationalError:
    """The error of a call ended at its deadline: a driver error of a lost connection, which every caller already
    handles (the connection is closed, never reused)."""
    return psycopg.OperationalError("the database call timed out: its socket was shut down at the deadline")

"""What distlock sets on its own asyncio connections: the deadline of a call, kept by one timer per connection
(the MySQL, Redis and PostgreSQL drivers: ``_driver_async.py`` of ``_backends/mysql/``, ``redis/`` and
``postgres/``), and the size of a socket read (MySQL, Redis, and etcd's ``_backends/etcd/_driver_async.py``;
psycopg reads through libpq).

**The deadline.** ``asyncio.timeout`` around every call puts a timer into the event loop's heap and cancels it
after nearly every call (and looks up the running loop and task several times); here a connection keeps one
timer, armed when a call starts with a deadline earlier than the armed one and left alone otherwise (the usual
case: each call's deadline is later than the one before). When it fires, it ends the call in flight if that
call's deadline has passed, re-arms for that call's deadline if not, and stops if no call is in flight. So a
connection that makes a call a millisecond costs one timer every few seconds, not one per call. Measured on
this project's VM (a loop of acquire + release, the tree before and after, three alternations): CPU per pair
-6 to -9% on MySQL session mode, -5% in lease mode, -6% on Redis.

The call is ended by aborting the connection's transport (PostgreSQL: shutting its socket down), not by
cancelling the caller: the driver's read then
fails as on a connection lost mid-call, which every caller handles already (the connection is thrown away and a
late answer is never read as the next call's), and a deadline is never mistaken for the caller's own
cancellation. ``CallBound.run`` says so with ``Expired``, which each driver turns into its own
lost-connection error; ``fired`` tells a caller that brackets the call itself. (Not for
etcd's connections: a watch stream's read uses its deadline as a tick and reads on after it, so a deadline
there must leave the connection whole: ``asyncio.timeout``.)

**The read size.** asyncio's socket transport reads with a 256 KiB buffer, allocated for every read and shrunk
to the bytes received. glibc serves an allocation that large with ``mmap`` until the process has freed one such
block whole (which raises its threshold): until then every read costs an ``mmap``, an ``mremap`` and a
``munmap``. Whether a process is in that state depends on its allocation history, so the same code was 10-25%
slower in one process than in another (Redis acquire + release: 196 against 140 us of CPU; the state forced
with ``MALLOC_MMAP_THRESHOLD_``). distlock's replies are a few hundred bytes: its transports read 64 KiB at
most, below glibc's initial threshold, in every process.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ._core import timing

T = TypeVar("T")

_ATTR = "_distlock_call_bound"


class Expired(Exception):
    """A call outlived its deadline and its connection was ended (see ``CallBound.run``)."""


class CallBound:
    """The deadline of the one call in flight on a connection: ``start(deadline)`` before it, ``stop()`` after
    it (in a ``finally``). ``abort`` ends the connection at once; it is called at most once per call."""

    __slots__ = ("_abort", "_at", "_deadline", "_handle", "fired")

    def __init__(self, abort: Callable[[], object]) -> None:
        self._abort = abort
        self._deadline: float | None = None  # of the call in flight (monotonic), None between calls
        self._handle: asyncio.TimerHandle | None = None
        self._at = math.inf  # when the armed timer fires (monotonic)
        self.fired = False  # the call in flight (or the last one) was ended at its deadline

    def start(self, deadline: float) -> None:
        self._deadline = deadline
        self.fired = False
        if deadline < self._at:
            self._arm(deadline)

    def stop(self) -> bool:
        """The call is over; True if it was ended at its deadline."""
        self._deadline = None
        return self.fired

    async def run(self, deadline: float, call: Awaitable[T]) -> T:
        """``await call`` under ``deadline``: its outcome, or ``Expired`` once the deadline ended the
        connection, whatever the call made of that. Also when the call's answer came in the very loop turn
        the deadline did (a server-side wait sized to the caller's time left ends right then): a call past
        its deadline fails all the same, and its ended connection never serves another call."""
        self.start(deadline)
        try:
            result = await call
        except Exception:
            if not self.fired:
                raise
        finally:
            self.stop()
        if self.fired:
            raise Expired
        return result

    def _arm(self, at: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._at = at
        self._handle = asyncio.get_running_loop().call_later(max(0.0, at - timing.monotonic()), self._fire)

    def _fire(self) -> None:
        self._handle, self._at = None, math.inf
        deadline = self._deadline
        if deadline is None:  # no call in flight: the next one arms again
            return
        if timing.monotonic() < deadline:  # a later call than the one armed for
            self._arm(deadline)
            return
        self.fired = True
        self._abort()


def bound_of(conn: Any, abort: Callable[[Any], object]) -> CallBound:
    """``conn``'s bound, made on first use (kept as an attribute of the driver's connection object); it
    ends the connection with ``abort(conn)``."""
    bound: CallBound | None = getattr(conn, _ATTR, None)
    if bound is None:
        bound = CallBound(lambda: abort(conn))
        setattr(conn, _ATTR, bound)
    return bound


#: the most one socket read of distlock's transports asks for (see the module's text)
READ_SIZE = 64 * 1024


def small_reads(transport: Any) -> None:
    """Make ``transport`` (asyncio's socket transport) read at most ``READ_SIZE`` bytes at a time. Other
    transports (uvloop's, a TLS one's) size their reads otherwise and are left as they are."""
    if getattr(transport, "max_size", None) == 256 * 1024:
        transport.max_size = READ_SIZE

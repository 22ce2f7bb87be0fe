"""Deadlines, backoff and renewal timing. Every function takes ``now`` so tests can inject a clock."""

from __future__ import annotations

import contextvars
import os
import random
import time
from dataclasses import dataclass, field

monotonic = time.monotonic


def wall_ms() -> int:
    """The wall clock in milliseconds (expiries that other hosts read: barrier arrivals)."""
    return int(time.time() * 1000)

_RNG = random.Random()
if hasattr(os, "register_at_fork"):  # forked waiters must not draw the same jitter
    os.register_at_fork(after_in_child=_RNG.seed)


#: a queued waiter that stops re-trying for this long is dropped from its name's queue (F12 in
#: docs/safety.md: a waiter that died cannot hold up the others); every queueing backend refreshes it
WAITER_TTL = 5.0
#: the longest one wait of a lease-table waiter (SQLite, SQL) lasts before it re-checks, whatever the hints:
#: well inside WAITER_TTL, so a live waiter's queue entry never runs out
LEASE_WAIT_SLICE = 1.0


#: the least time the calls of a wait get, however short the wait (``acquire(timeout=0)``, ``run -n``): one
#: look needs a connect and a round trip, which a wait of 0 s would cut before they start
FLOOR = 2.0
#: how long a call that started before its wait's deadline may run past it (the last look at the deadline
#: on a slow but live server still gets its answer, not an error)
LATE = 0.5
#: the clean-up after an acquire that failed, timed out or was cancelled (``abandon``) gets this long, from
#: when it starts; what it could not remove in time goes with its lease
CLEANUP = 0.5


@dataclass
class Deadline:
    """A point on the monotonic clock; ``None`` timeout = never. ``start`` is when the wait began."""

    at: float | None
    start: float = field(default_factory=lambda: monotonic())

    @classmethod
    def after(cls, timeout: float | None, now: float | None = None) -> Deadline:
        now = monotonic() if now is None else now
        if timeout is None:
            return cls(None, now)
        return cls(now + timeout, now)

    def calls_end(self) -> float | None:
        """When every call made for this wait must be over (None: no deadline): the deadline, but at least
        ``FLOOR`` after the start, plus ``LATE`` (docs/operations.md, "One deadline")."""
        if self.at is None:
            return None
        return max(self.at, self.start + FLOOR) + LATE

    def remaining(self, now: float | None = None) -> float | None:
        if self.at is None:
            return None
        return max(0.0, self.at - (monotonic() if now is None else now))

    def expired(self, now: float | None = None) -> bool:
        r = self.remaining(now)
        return r is not None and r <= 0.0


#: the instant (monotonic) every call made in this context must be over by: the caller's deadline, carried
#: down through the lock layer to each connect, request and retry of the backends (a task's or thread's own)
_BUDGET: contextvars.ContextVar[float | None] = contextvars.ContextVar("distlock_budget", default=None)


class Budget:
    """``with Budget(seconds):`` (or ``until=``) every call made inside, in this task or thread, ends by then,
    or by an enclosing Budget's end if that is sooner. ``escape=True`` is for a clean-up owed after a
    deadline: its own bound, whatever the enclosing one has left."""

    __slots__ = ("_token", "end")

    def __init__(self, seconds: float | None = None, *, until: float | None = None, escape: bool = False) -> None:
        end = until if seconds is None else monotonic() + seconds
        outer = None if escape else _BUDGET.get()
        self.end = outer if end is None else end if outer is None else min(outer, end)
        self._token: contextvars.Token[float | None] | None = None

    def __enter__(self) -> Budget:
        self._token = _BUDGET.set(self.end)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _BUDGET.reset(self._token)


def unbudgeted() -> contextvars.Context:
    """A copy of this context with no Budget: for a background worker started inside a call (a pub/sub
    reader, a renewer), which must not inherit that call's end for the rest of its life."""
    ctx = contextvars.copy_context()
    ctx.run(_BUDGET.set, None)
    return ctx


def budget_end() -> float | None:
    """The end of the calls of this context (None: no Budget)."""
    return _BUDGET.get()


def bound(own: float | None, now: float | None = None) -> float | None:
    """A call's bound in seconds: its own (None: none), cut to what the context's Budget has left (0 when
    it is spent: the call must not start)."""
    end = _BUDGET.get()
    if end is None:
        return own
    left = max(0.0, end - (monotonic() if now is None else now))
    return left if own is None else min(own, left)


@dataclass
class Backoff:
    """Capped exponential backoff with full jitter, for backends without a push wake-up across processes.

    Starts small so a quick hand-off is seen quickly; the cap keeps an idle waiter cheap. Jitter keeps a
    crowd of waiters from re-trying in step (the herd).
    """

    first: float = 0.002
    cap: float = 0.05
    factor: float = 1.6
    _next: float = field(default=0.0, init=False)
    #: one generator for all (the jitter needs no independence between waiters, and seeding a new one from
    #: os.urandom for every attempt cost more than a SQLite acquire's own work); tests inject their own
    rng: random.Random = field(default_factory=lambda: _RNG, repr=False)

    def next_delay(self) -> float:
        self._next = self.first if self._next == 0.0 else min(self.cap, self._next * self.factor)
        return self.rng.uniform(self._next / 2, self._next)

    def reset(self) -> None:
        self._next = 0.0


def wait_slice(hint: float | None, backoff: float | None, deadline_left: float | None, cap: float) -> float:
    """How long one wait may last: the smallest of the backend's hint, the backoff, the deadline and ``cap``."""
    candidates = [cap]
    for c in (hint, backoff, deadline_left):
        if c is not None:
            candidates.append(c)
    return max(0.0, min(candidates))


def renew_interval(ttl: float) -> float:
    """Renew every ttl/3 (F1 in docs/safety.md): two renewals can fail before the lease runs out."""
    return ttl / 3.0


def drift_margin(ttl: float) -> float:
    """How much earlier than the server this process ends a lease: 1% of the TTL + 2 ms.

    It covers a server clock that runs up to 1% faster than ours over one lease and the scheduling slack of
    the timer that fires ``lost``; it does not cover a clock that runs faster than that (docs/safety.md).
    """
    return ttl * 0.01 + 0.002


def lease_end(sent: float, ttl: float) -> float:
    """The local end of a lease confirmed by a request *sent* at ``sent``: the server started counting
    ``ttl`` no earlier than that, so ours ends ``drift_margin`` before the earliest moment the server's can."""
    return sent + ttl - drift_margin(ttl)


def validity(ttl: float, elapsed: float) -> float:
    """Redlock validity (F3): TTL - elapsed - drift margin."""
    return ttl - elapsed - drift_margin(ttl)

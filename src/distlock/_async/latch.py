"""Count-down latches: ``store.latch(name, count=N)`` (Redisson's ``RCountDownLatch``, Java's ``CountDownLatch``
across processes).

The count lives on the server, in a record of its own next to no lock's keys (each backend's layout is in its
page of docs/), and has no lease: it outlives the process that created it. ``count=N`` creates the record
with N at the object's first call unless it exists (the first user sets it); ``count=None`` joins whatever
round of the latch exists. ``count_down`` takes one off, never below 0; the step that reaches 0 wakes the
waiters (push where the backend has it) and leaves a done marker for ``linger`` seconds, then nothing. The
rules of the record and of rounds are ``_core/latch.py``'s.

``wait(timeout)`` reads the count under a watch armed before each read (a zero reached between the read and
the wait wakes it) and keeps the one deadline of the acquires: every call it makes ends by
max(timeout, 2 s) + 0.5 s (docs/operations.md, "One deadline").
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from .. import _rt_async as rt
from .._core import ids
from .._core.latch import LINGER, LatchState, check_count, check_linger, mismatch, seen_count
from .._core.timing import Budget, Deadline
from .._core.validate import check_timeout
from .._errors import ConfigError, UnsupportedFeature

if TYPE_CHECKING:
    from .backend import AsyncBackend
    from .store import AsyncStore

#: a waiter reads the count again at least this often, push or not (a watch on a server cut off from its
#: cluster can go quiet instead of failing)
RECHECK = 2.0


class AsyncLatch:
    """A count-down latch of the store's server: ``count_down()``, ``wait(timeout)``, ``count()``.

    The object belongs to one round of the latch: the one it created or found at its first call (see the
    module docstring); once that round is at zero, it stays at zero for the object. Thread-safe (async: any
    task of its loop)."""

    def __init__(self, store: AsyncStore, name: str, count: int | None = None, *, linger: float = LINGER) -> None:
        scheme = store.scheme
        self.name = store._acquirer.check_name(name)
        self.initial = check_count(count, name=self.name, backend=scheme)
        self.linger = check_linger(linger, name=self.name, backend=scheme)
        self._backend: AsyncBackend = store._backend
        self._acquirer = store._acquirer
        why = self._backend.latch_refused()
        if why is not None:
            raise UnsupportedFeature(why, name=self.name, backend=scheme)
        self._mutex = threading.Lock()
        self._joined = False
        self._round: str | None = None  # the round this object belongs to (None: none, at zero)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} on {self._backend.scheme}>"

    async def _join(self) -> LatchState | None:
        """At the first call: create (``count=N``) or find the latch, and keep its round. The state read then,
        or None when this object had joined before (the caller reads afresh)."""
        with self._mutex:
            if self._joined:
                return None
        self._acquirer.blocking()
        if self._acquirer.closed:
            raise ConfigError("the store is closed", name=self.name, backend=self._backend.scheme)
        state = await self._backend.latch_open(self.name, self.initial, ids.new_token())
        why = mismatch(state, self.initial)
        if why is not None:
            raise ConfigError(why, name=self.name, backend=self._backend.scheme)
        with self._mutex:
            if not self._joined:
                self._joined = True
                self._round = None if state is None or state.count == 0 else state.round
        return state

    async def count_down(self) -> int:
        """Take one off the count (never below 0); the count after. The step that reaches 0 wakes every waiter."""
        await self._join()
        round_id = self._round
        if round_id is None:
            return 0
        self._acquirer.blocking()
        left = await self._backend.latch_count_down(self.name, round_id, ids.new_token(), self.linger)
        self._acquirer.events.debug(
            "count-down", "latch %r counted down: %d left", self.name, left, lock=self.name, kind="latch", count=left
        )
        return left

    async def count(self) -> int:
        """The count now: 0 once this object's round reached zero (or is gone)."""
        state = await self._join()
        if state is None:
            if self._round is None:
                return 0
            state = await self._backend.latch_open(self.name, None, "")
        return seen_count(state, self._round)

    async def wait(self, timeout: float | None = None) -> bool:
        """Block until the count is 0 (True) or ``timeout`` seconds passed (False; None: for ever).

        A latch already at zero, or gone, returns True at once. Every call the wait makes ends by
        max(timeout, 2 s) + 0.5 s; a server that does not answer by then raises ``BackendError``."""
        wait = check_timeout(timeout, name=self.name, backend=self._backend.scheme)
        deadline = Deadline.after(wait)
        with Budget(until=deadline.calls_end()):
            if await self.count() == 0:
                return True
            if deadline.expired():
                return False  # ``wait(0)``: one look, no watch to set up
            watch = await self._backend.latch_watch(self.name)
            try:
                while True:
                    if await self.count() == 0:  # read under the armed watch: a zero after it wakes the wait
                        return True
                    left = deadline.remaining()
                    if left is not None and left <= 0:
                        return False
                    await watch.wait(RECHECK if left is None else min(left, RECHECK))
            finally:
                await rt.shielded(watch.aclose())

"""A store's local waiting lines: blocking exclusive claims of one store on one name wait here, one behind the
other, and only the first in line asks the backend.

Of N tasks or threads of one process waiting for a name, at most one can be granted it at a time anyway, and
letting all of them answer every release (a wake-up per waiter, a transaction per wake-up on SQLite and SQL) is
a herd inside the process (F11 in docs/safety.md) that costs the holder's hand-off far more than the grant.
Fair claims skip the line (the backend's queue is their order), and so do backends that always queue (each
waiter already watches only its predecessor).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .. import _rt_async as rt
from .._core.timing import Deadline
from .._core.types import Capabilities, Claim, Mode


class Lines:
    """The lines per (name, mode). An entry is its waiter's waker; the first entry may be a plain marker (the
    first in line is never woken through the line)."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._lines: dict[tuple[str, Mode], list[object]] = {}

    def after_fork(self) -> None:
        """In a forked child: none of the parent's waiters (one left first in a line would keep the child's
        waiters behind it until their deadlines), and a mutex of its own."""
        self._mutex = threading.Lock()
        self._lines = {}

    @staticmethod
    def wanted(claim: Claim, deadline: Deadline, caps: Capabilities) -> bool:
        """Whether a blocking acquire waits in its store's local line."""
        return (
            claim.mode in (Mode.EXCLUSIVE, Mode.WRITE)
            and not claim.fair
            and not caps.always_fair
            and not deadline.expired()
        )

    async def first(self, claim: Claim, deadline: Deadline, run: Callable[[Claim, Deadline], Any]) -> Any:
        """``run(claim, deadline)`` once ``claim`` is first in its line; None if the deadline passes before that.
        Leaving (whichever way) lets the next one go. (``run`` takes them rather than closing over them: no
        closure made per acquire.)"""
        key = (claim.name, claim.mode)
        place: object
        with self._mutex:
            line = self._lines.setdefault(key, [])
            place = rt.Waker() if line else object()
            line.append(place)
        try:
            if isinstance(place, rt.Waker):
                while True:
                    with self._mutex:
                        if self._lines[key][0] is place:
                            break
                    left = deadline.remaining()
                    if left is not None and left <= 0:
                        return None
                    await place.wait(left)
            return await run(claim, deadline)
        finally:
            with self._mutex:
                line = self._lines[key]
                was_first = line[0] is place
                line.remove(place)
                nxt = line[0] if was_first and line else None
                if not line:
                    del self._lines[key]
            if isinstance(nxt, rt.Waker):
                nxt.notify()

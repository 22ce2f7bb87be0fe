"""The grant rule on etcd, with no I/O: who holds a name, and whom a waiter watches, from its queue (the
contenders of ``keys.contenders``).

FIFO by create revision (``ahead`` = contenders of the name with a smaller revision):

* lock / write: nobody ahead; wait for the delete of the last one ahead (the predecessor only).
* read: no lock/write/semaphore contender ahead; wait for the last such one.
* semaphore with ``permits`` N: fewer than N ahead; wait for the delete of any of those ahead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..._core.types import Mode
from .records import Contender
from .semaphore import marked_held, take_of


@dataclass(frozen=True)
class Decision:
    acquired: bool
    watch: tuple[Contender, ...] = ()  # contenders whose delete may let us in (empty when acquired)


def decide(queue: Sequence[Contender], my_rev: int, mode: Mode, permits: int, want: int = 1) -> Decision:
    """The grant rule (the module docstring) for the contender with create revision ``my_rev`` (a semaphore's:
    ``permits`` = its capacity in force, ``want`` = the permits this contender takes)."""
    ahead = [c for c in queue if c.rev < my_rev]
    if mode is Mode.SEMAPHORE:
        # every contender ahead counts with its take, holder or waiter (etcd's queue is always fair); one of
        # another kind fills the semaphore
        if sum(take_of(c) if c.mode is Mode.SEMAPHORE else permits for c in ahead) + want <= permits:
            return Decision(True)
        return Decision(False, tuple(ahead))
    if mode is Mode.READ:
        ahead = [c for c in ahead if c.mode is not Mode.READ]
    if not ahead:
        return Decision(True)
    return Decision(False, (ahead[-1],))


def holders(queue: Sequence[Contender], permits: int | None) -> list[Contender]:
    """Who holds the name now, for ``inspect`` (a semaphore's: the oldest contenders whose takes fit ``permits``,
    its capacity in force if known; the first one always)."""
    if not queue:
        return []
    first = queue[0]
    if first.mode is Mode.SEMAPHORE:
        out: list[Contender] = []
        used = 0
        for c in queue:
            used += take_of(c) if c.mode is Mode.SEMAPHORE else (permits or 1) + 1
            if out and not (c.mode is Mode.SEMAPHORE and (marked_held(c) or used <= (permits or 1))):
                break
            out.append(c)
        return out
    if first.mode is Mode.READ:
        out = []
        for c in queue:
            if c.mode is not Mode.READ:
                break
            out.append(c)
        return out
    return [first]


def queue_kind(queue: Sequence[Contender]) -> str:
    modes = {c.mode for c in queue}
    if modes & {Mode.READ, Mode.WRITE}:
        return "rwlock"
    if Mode.SEMAPHORE in modes:
        return "semaphore"
    return "lock"

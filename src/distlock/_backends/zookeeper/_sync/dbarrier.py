# GENERATED from src/distlock/_backends/zookeeper/_async/dbarrier.py by scripts/gen_sync.py: edit that file, not this one.
"""The double barrier of a ZooKeeper store: Curator's ``DistributedDoubleBarrier`` on the same nodes
(``barrier.py``), so a Curator member and a distlock member enter and leave one barrier together. The steps
are blocking requests run on a worker thread; between them a member looks again every ``POLL`` seconds, an
asyncio sleep that a cancel ends (then its entry is withdrawn)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from .... import _rt_sync as rt
from ...._sync.backend import NativeDoubleBarrier
from ...._core.timing import Budget, Deadline

if TYPE_CHECKING:
    from . import Backend

#: how often a member looks again while entering or leaving
POLL = 0.2


class DoubleBarriers(NativeDoubleBarrier):
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    def enter(self, name: str, parties: int, member: str, timeout: float | None) -> bool:
        b = self._backend
        deadline = Deadline.after(timeout)
        with Budget(until=deadline.calls_end()):
            try:
                if b._call(lambda: b.barriers.enter(name, member, parties), name=name):
                    return True
                while True:
                    left = deadline.remaining()
                    if left is not None and left <= 0:
                        return b._call(lambda: b.barriers.withdraw(name, member), name=name)
                    rt.sleep(POLL if left is None else min(left, POLL))
                    if b._call(lambda: b.barriers.look(name, parties), name=name):
                        return True
            except BaseException:
                rt.shielded(self._withdraw(name, member))
                raise

    def _withdraw(self, name: str, member: str) -> bool:
        """Delete our member node on the way out of a cancelled or failed enter; what it cannot reach in time
        goes with the session (the error that brought us here is the one raised)."""
        b = self._backend
        with contextlib.suppress(Exception):
            return b._call(lambda: b.barriers.withdraw(name, member), name=name)
        return False

    def leave(self, name: str, member: str, timeout: float | None) -> bool:
        b = self._backend
        deadline = Deadline.after(timeout)
        with Budget(until=deadline.calls_end()):
            members = b._call(lambda: b.barriers.leave(name, member), name=name)
            while members > 0:
                left = deadline.remaining()
                if left is not None and left <= 0:
                    return False
                rt.sleep(POLL if left is None else min(left, POLL))
                members = b._call(lambda: b.barriers.members(name), name=name)
            b._call(lambda: b.barriers.finish(name), name=name)
            return True

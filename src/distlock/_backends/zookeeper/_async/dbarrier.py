"""The double barrier of a ZooKeeper store: Curator's ``DistributedDoubleBarrier`` on the same nodes
(``barrier.py``), so a Curator member and a distlock member enter and leave one barrier together. The steps
are blocking requests run on a worker thread; between them a member looks again every ``POLL`` seconds, an
asyncio sleep that a cancel ends (then its entry is withdrawn)."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from .... import _rt_async as rt
from ...._async.backend import AsyncNativeDoubleBarrier
from ...._core.timing import Budget, Deadline

if TYPE_CHECKING:
    from . import Backend

#: how often a member looks again while entering or leaving
POLL = 0.2


class DoubleBarriers(AsyncNativeDoubleBarrier):
    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    async def enter(self, name: str, parties: int, member: str, timeout: float | None) -> bool:
        b = self._backend
        deadline = Deadline.after(timeout)
        with Budget(until=deadline.calls_end()):
            try:
                if await b._call(lambda: b.barriers.enter(name, member, parties), name=name):
                    return True
                while True:
                    left = deadline.remaining()
                    if left is not None and left <= 0:
                        return await b._call(lambda: b.barriers.withdraw(name, member), name=name)
                    await rt.sleep(POLL if left is None else min(left, POLL))
                    if await b._call(lambda: b.barriers.look(name, parties), name=name):
                        return True
            except BaseException:
                await rt.shielded(self._withdraw(name, member))
                raise

    async def _withdraw(self, name: str, member: str) -> bool:
        """Delete our member node on the way out of a cancelled or failed enter; what it cannot reach in time
        goes with the session (the error that brought us here is the one raised)."""
        b = self._backend
        with contextlib.suppress(Exception):
            return await b._call(lambda: b.barriers.withdraw(name, member), name=name)
        return False

    async def leave(self, name: str, member: str, timeout: float | None) -> bool:
        b = self._backend
        deadline = Deadline.after(timeout)
        with Budget(until=deadline.calls_end()):
            members = await b._call(lambda: b.barriers.leave(name, member), name=name)
            while members > 0:
                left = deadline.remaining()
                if left is not None and left <= 0:
                    return False
                await rt.sleep(POLL if left is None else min(left, POLL))
                members = await b._call(lambda: b.barriers.members(name), name=name)
            await b._call(lambda: b.barriers.finish(name), name=name)
            return True

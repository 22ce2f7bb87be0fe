"""An observer's watch on an election (``store.observe``): who leads, and with what value.

Two ZooKeeper watches say it all: a child watch on the election's path (a candidate came, left or lost
its session, so the leader may have changed) and a data watch on the node that leads now (``proclaim``
changed its value). Both are one-shot, so each wake re-arms them -- listing the children again with a
watch and watching the first of them -- before ``Watch.wait`` returns, and so before the observer
reads: a change after that read fires one of the new watches. Nothing is kept in step with the children:
a spurious wake costs only a read. Before the first candidate (and after the server removed the empty
container) the path does not exist: then its creation is watched.

kazoo fires every watch with a ``NONE`` event when the session ends and the connection's state changes
reach the backend (``Backend.changed``), which re-arm the watches once the server answers again; a
``MAX_WAIT_SLICE`` tick is the safety net. After ``Watch.aclose`` a watch that fires does nothing:
ZooKeeper has no way to drop a watch short of its event, so the last ones stay registered until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kazoo.exceptions import NoNodeError
from kazoo.protocol.states import WatchedEvent

from .... import _rt_async as rt
from ...._async.backend import AsyncWatch
from ...._errors import LockError
from .. import layout
from ..handler import on_event_thread

if TYPE_CHECKING:
    from . import Backend

#: a watch re-arms at least this often even without an event (ZooKeeper's watches are the real mechanism)
MAX_WAIT_SLICE = 5.0


class Watch(AsyncWatch):
    """The children of ``path`` and the data of the first of them, watched for one observer."""

    def __init__(self, backend: Backend, path: str) -> None:
        self._backend = backend
        self._path = path
        self._waker = rt.Waker()
        self._stale = True  # the watches must be armed (again) before the next return of wait()
        self._closed = False

    async def arm(self) -> None:
        """Arm both watches (the first time, before ``watch()`` returns: errors reach the caller)."""
        await rt.offload(lambda: self._backend.wire.translated(self._arm))
        self._backend.watch_session(self)

    def _arm(self) -> None:
        w = self._backend.wire
        # Cleared before the requests: an event that fires while they run sets it again.
        self._stale = False
        try:
            listed = w.get(w.send(w.client.get_children_async, self._path, watch=self.wake))
        except NoNodeError:
            # No candidate yet (or the server removed the empty container): a listing of a missing node leaves
            # no watch, so watch for its creation instead -- the one place a watch on a missing node is meant.
            if w.get(w.send(w.client.exists_async, self._path, watch=self.wake)) is not None:
                self.wake()  # created between the two requests: list it
            return
        children = layout.queue(listed)
        if children and not self._backend.nodes.watch_exists(f"{self._path}/{children[0]}", self.wake):
            self.wake()  # the leader left between the two requests: the child watch fired too; look again

    # -- from kazoo's threads and the session's events -------------------------------------------------
    @on_event_thread
    def wake(self, event: WatchedEvent | None = None) -> None:
        if self._closed:
            return
        self._stale = True
        self._waker.notify()

    # -- the observer's side ---------------------------------------------------------------------------
    async def wait(self, timeout: float) -> None:
        # A wake since the last return (or an arm that failed) returns at once; the notification it left is
        # consumed either way.
        slice_ = 0.0 if self._stale else max(0.0, min(timeout, MAX_WAIT_SLICE))
        await self._waker.wait(slice_)
        if not self._stale or self._closed:
            return
        try:
            await rt.offload(lambda: self._backend.wire.translated(self._arm))
        except LockError:
            # The server does not answer (the connection is down): the observer's read will say so, or succeed
            # once it is back, and the next wait tries to arm again.
            self._stale = True
            await rt.sleep(max(0.0, min(timeout, self.POLL)))

    async def aclose(self) -> None:
        self._closed = True
        self._backend.unwatch_session(self)


class LatchWatch(Watch):
    """A count-down latch's waiters: a data watch on the latch's znode (any count-down, its deletion). A data
    read, so a missing node leaves no watch: then the latch is gone, which wakes the waiter at once."""

    def _arm(self) -> None:
        self._stale = False
        if not self._backend.nodes.watch_exists(self._path, self.wake):
            self.wake()

"""Where a waiting attempt or an election observer hears that its name may have changed: the side's
process-wide state (``PROCESS``) and one ``Ear`` per waiter or observer.

Waiters in the same process are woken at once by the releaser (a process-wide registry of wakers per database
and name, which wakes the earliest waiter only: see ``distlock._wakeup.Wakers``). Across processes a datagram to each
waiting process's socket of the name (``wake.WakeDir``, shared by the process's waiters: ``process.Hub``).
"""

from __future__ import annotations

from .... import _rt_async as rt
from ...._core.timing import monotonic
from ..process import Hub, Key, Process
from ..wake import WakeDir


class Ear:
    """Where a waiting attempt or an observer of a name hears its wake-ups: its waker in this process's
    registry (``PROCESS.wakers``: releases in this process, and wake-ups read from the process's socket of the
    name), and, while it is the socket's reader, the socket itself (releases in other processes)."""

    def __init__(self, key: Key, wake_dir: WakeDir | None, observer: bool = False) -> None:
        self.key = key
        self.waker = rt.Waker()
        self.hub: Hub[Ear] | None = None
        self.watching = False
        self._dir = wake_dir
        self._observer = observer

    def watch(self) -> None:
        """Join the wakers of the name. A waiter does it inside the transaction that queues it (under the
        database's write lock), so this process's waiters register in queue order and the queue's head is the
        earliest of its process: the one ``Wakers.wake`` wakes."""
        if not self.watching:
            self.watching = True
            PROCESS.wakers.watch(self.key, self, every=self._observer)

    def unwatch(self) -> None:
        if self.watching:
            self.watching = False
            PROCESS.wakers.unwatch(self.key, self)  # passes a wake-up on if we were first

    def listen(self) -> None:
        """Share (or bind, if first) this process's wake socket of the name; none if unusable."""
        if self._dir is None or self.hub is not None:
            return
        with PROCESS.guard:
            hub = PROCESS.hubs.get(self.key)
            if hub is None:
                sock = self._dir.listen(self.key[1])
                if sock is None:
                    return
                hub = PROCESS.hubs[self.key] = Hub(sock)
            hub.ears[self] = None
            self.hub = hub

    def notify(self) -> None:
        self.waker.notify()
        hub = self.hub
        if hub is not None and hub.reader() is self:
            hub.socket.poke()  # it waits on the socket, not on its waker

    async def wait(self, delay: float) -> bool:
        """Until a wake-up or ``delay``; True if woken."""
        end = monotonic() + delay
        while True:
            left = max(0.0, end - monotonic())
            hub = self.hub
            if hub is None or hub.reader() is not self:
                if await self.waker.wait(left):
                    return True
                if monotonic() >= end:
                    return False
                continue  # kicked: the reading role may have come to us
            if self.waker.take():
                return True
            if await rt.wait_readable(hub.socket.sock, left) and hub.socket.drain():
                PROCESS.wakers.wake(self.key)  # to this process's earliest waiter (maybe us)
            if self.waker.take():
                return True
            if monotonic() >= end:
                return False

    def close(self) -> None:
        self.unwatch()
        hub, self.hub = self.hub, None
        if hub is None:
            return
        nxt = None
        with PROCESS.guard:
            was_reader = hub.reader() is self
            del hub.ears[self]
            if not hub.ears:
                del PROCESS.hubs[self.key]
                hub.socket.close()
            elif was_reader:
                nxt = hub.reader()
        if nxt is not None:
            nxt.waker.kick()  # it now reads the socket (what arrived meanwhile waits there for it)


#: this side's process-wide state: its stores, their waiters and wake sockets, its in-memory database
PROCESS: Process[Ear] = Process()

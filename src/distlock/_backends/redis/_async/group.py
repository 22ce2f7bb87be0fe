"""The listeners of a Redlock store read together: ``Group``, one listener per master, whose ``wait`` lets one
waiting thread read every master's connection at once (one thread hop per push where the driver can wait on
several sockets). Apart from ``listener.py`` because it is about the store's many connections, not one; it
drives each master's ``Listener`` through its read role, and no listener knows of it. Written once for both
sides (generated for the sync side)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from .... import _rt_async as rt
from ...._core import forks
from .. import _driver_async as drv
from .listener import HOT_SLICE, LATER, MINE, THEIRS, Listener


class Group:
    """The listeners of a Redlock store, one per master, which its waiting threads read together.

    ``wait`` is ``Listener.wait`` over all of them. Where one thread can wait on several
    connections (``drv.READS_MANY``: the threaded side), ONE waiting thread at a time, the group's reader,
    takes the read role of every master's connection it can and reads them itself, with one ``poll`` over
    their sockets: a master's push then wakes it where it is read, not on that master's reader thread and
    then again here (one thread hop per push, not two; five masters push each hand-over). The store's other
    waiting threads wait on their wakers: the reader notifies them of their messages as any reader does, and
    when it leaves it kicks the first of them, which reads next. A role still held by a master's background
    reader (in the middle of a read) comes free within that read (``HOT_SLICE`` once a waiter came); until
    then that reader notifies the group's reader, which a wait on sockets does not see, so its waits are kept
    that short. On asyncio every reader is a task of the same event loop, with no hop to save: each waiter
    waits on its waker alone."""

    def __init__(self, listeners: Sequence[Listener]) -> None:
        self.listeners = list(listeners)
        self._state = rt.StateGuard()
        self._reader: rt.Waker | None = None  # the waiting thread that reads the masters now
        self._waiting: list[rt.Waker] = []  # every waiting thread, in arrival order
        forks.track(self)

    def after_fork(self) -> None:
        """None of the parent's waiting threads is in a forked child: one of them left as the reader would
        keep the child's waiters from reading until their deadlines."""
        self._state = rt.StateGuard()
        self._reader = None
        self._waiting = []

    async def wait(self, waker: rt.Waker, timeout: float) -> bool:
        """Wait until ``waker`` is notified (True) or ``timeout`` passes (False)."""
        if not drv.READS_MANY:
            return await waker.wait(timeout)
        end = time.monotonic() + timeout
        with self._state:
            self._waiting.append(waker)
        reading = False
        try:
            while not waker.take():
                now = time.monotonic()
                if now >= end:
                    return False
                if not reading:
                    with self._state:
                        if self._reader is None:
                            self._reader = waker
                        reading = self._reader is waker
                    if not reading:  # the reader tells us what is ours, and kicks us when it leaves
                        if await waker.wait(end - now):
                            return True
                        continue
                    for one in self.listeners:
                        one._contend(waker)
                if await self._read(waker, end, now):
                    return True
            return True
        finally:
            self._leave(waker, reading)

    async def _read(self, waker: rt.Waker, end: float, now: float) -> bool:
        """One read, as the group's reader: of every connection whose role is ours (taken if free), for as
        long as nothing comes, the wait ends, a background reader may still notify us or a paused connection
        may be read again. True if ``waker`` was notified meanwhile (and that is consumed)."""
        states = [one._take_role(waker, now) for one in self.listeners]
        held = [one for one, st in zip(self.listeners, states, strict=True) if st is MINE]
        soon = end - now
        if THEIRS in states:
            soon = min(soon, HOT_SLICE)
        for one, st in zip(self.listeners, states, strict=True):
            if st is LATER and one._pause_until > now:  # a paused one is read again once its pause ends
                soon = min(soon, one._pause_until - now)
        if not held:
            return await waker.wait(soon)
        for i in drv.readable([getattr(one._pubsub, "connection", None) for one in held], soon):
            await held[i]._read(0.0)
        return False

    def _leave(self, waker: rt.Waker, reading: bool) -> None:
        if reading:
            for one in self.listeners:
                one._leave(waker)
        nxt: rt.Waker | None = None
        with self._state:
            self._waiting.remove(waker)
            if self._reader is waker:
                self._reader = None
                nxt = self._waiting[0] if self._waiting else None
        if nxt is not None:
            nxt.kick()

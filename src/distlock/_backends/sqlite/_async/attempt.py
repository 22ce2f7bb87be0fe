"""Waiting for a SQLite lock: one try (``Attempt``), then a sleep on the name's ``Ear`` until a release wakes
it; and an election observer's wake-up (``Watch``), on the same ears.

Where sockets are unusable a waiter re-checks with capped exponential backoff and jitter (2 ms growing to 50
ms), and never later than the holder's lease end; ``memory://`` is pushed by waker only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...._async.backend import AsyncAttempt, AsyncWatch
from ...._core.timing import LEASE_WAIT_SLICE, Backoff, monotonic, wait_slice
from ...._core.types import Claim, Grant
from .calls import call
from .ears import PROCESS, Ear

if TYPE_CHECKING:
    from . import Backend


class Attempt(AsyncAttempt):
    backend: Backend

    def __init__(self, backend: Backend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self._backoff = Backoff()
        self._ear: Ear | None = Ear((backend.db.key, claim.name), backend.ops.wake_dir)
        self._listening = False

    async def try_acquire(self) -> Grant:
        grant = await call(self.backend.db, self.backend.ops.acquire, self.claim, self._ear)
        if grant.acquired:
            self._unwatch()
        return grant

    async def try_late(self) -> Grant:
        """No try at the deadline: a try takes the file's write lock, and a crowd of waiters timing out
        together would queue up on it past their deadlines (nothing is granted without a try here)."""
        return Grant(False)

    async def wait(self, grant: Grant, timeout: float | None) -> None:
        ear = self._ear
        if ear is None:
            return
        if not self._listening:
            self._listening = True
            ear.listen()
            if not self._quiet():
                # Start listening, then look again at once: a release between our last try and now is not missed.
                return
        if ear.hub is None and not self.backend.db.key.startswith("memory:"):
            # no wake socket: other processes' releases are only seen by polling
            if await ear.wait(wait_slice(grant.retry_after, self._backoff.next_delay(), timeout, LEASE_WAIT_SLICE)):
                self._backoff.reset()
            return
        # pushed (across processes by datagram, in memory by waker): the re-check interval is only a safety net
        end = None if timeout is None else monotonic() + timeout
        while True:
            quiet = self._quiet()
            left = None if end is None else end - monotonic()
            if left is not None and left <= 0:
                return
            if await ear.wait(wait_slice(None if quiet else grant.retry_after, None, left, LEASE_WAIT_SLICE)):
                return
            if not quiet or not self._quiet():
                return
            # Behind an earlier fair waiter of this process, which re-checks for both of us: only keep our place.
            if not await call(self.backend.db, self.backend.ops.keep, self.claim):
                return  # our entry ran out: a full try queues us again

    def _quiet(self) -> bool:
        """Whether this waiter need not look at the queue until woken: a fair claim (held back by every entry
        ahead of it) with an earlier waiter of the name in this process. That one is ahead of it in the queue
        too (waiters register in queue order, ``Ear.watch``), re-checks at every slice, and passes the wake-up
        on when it leaves; the ones behind it only keep their entries alive (``Ops.keep``, no queue read).
        Reading the whole queue at every waiter's slice cost O(waiters) per waiter and second: the herd again."""
        ear = self._ear
        return self.claim.fair and ear is not None and ear.watching and PROCESS.wakers.first(ear.key) is not ear

    async def abandon(self) -> None:
        self._unwatch()
        await call(self.backend.db, self.backend.ops.abandon, self.claim)

    def _unwatch(self) -> None:
        if self._ear is not None:
            self._ear.close()
            self._ear = None


class Watch(AsyncWatch):
    """An observer listens where the waiters of the name do: releases, breaks, election grants and
    proclaims wake both (in this process by waker, in others by datagram); it takes every wake-up, no turn."""

    def __init__(self, backend: Backend, name: str) -> None:
        self._memory = backend.db.key.startswith("memory:")
        self._ear: Ear | None = Ear((backend.db.key, name), backend.ops.wake_dir, observer=True)
        self._ear.watch()
        self._ear.listen()

    async def wait(self, timeout: float) -> None:
        if self._ear is None:
            return
        # in memory every change is made in this process; a file without wake sockets is polled
        pushed = self._ear.hub is not None or self._memory
        await self._ear.wait(min(timeout, LEASE_WAIT_SLICE if pushed else self.POLL))

    async def aclose(self) -> None:
        if self._ear is not None:
            self._ear.close()
            self._ear = None

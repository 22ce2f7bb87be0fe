"""A lease-mode waiter: one claim's tries, its waits between them, and its clean-up (``LeaseAttempt``).

The tries are the store's protocol (``LeaseMode.ops``); the waits are the dialect's push
(``LeaseMode._lease_wait``: PostgreSQL's LISTEN, MySQL's bell) or, behind an earlier waiter of the same
store, only keeping the queue entry alive; a release may hand the name over directly (PostgreSQL), which
the waiter takes without a round trip when its stamp proves the row lives long enough (``_handed_over``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .... import _rt_async as rt
from ...._async.backend import AsyncAttempt
from ...._core.timing import (
    LEASE_WAIT_SLICE,
    WAITER_TTL,
    Backoff,
    Budget,
    budget_end,
    drift_margin,
    lease_end,
    monotonic,
    wait_slice,
)
from ...._core.types import Claim, Grant, Mode
from .. import names as sn
from .. import stmt as st

if TYPE_CHECKING:
    from .lease_mode import LeaseMode

#: a waiter holds on a hand-over's NOTIFY alone only with at least this much of its lease left (else its try
#: confirms the row, for a full TTL); the first queued waiter re-tries every LEASE_WAIT_SLICE, so normally
#: about WAITER_TTL - LEASE_WAIT_SLICE is left
HANDOVER_MIN_LEFT = WAITER_TTL / 2


class LeaseAttempt(AsyncAttempt):
    backend: LeaseMode

    def __init__(self, backend: LeaseMode, claim: Claim) -> None:
        super().__init__(backend, claim)
        self.key = sn.name_key(claim.name)
        self.backoff = Backoff()
        self.waker: rt.Waker | None = None
        self.placed = False  # queued on the server with a known place (see ``Wakers.place``)
        self.settled = True  # no try of ours is in flight (its answer came back, or there was none yet)
        #: the queue deadline our last ANSWERED write of it wrote (a refused try's, or a batched keep's; server
        #: clock) and when that write was sent (ours): a hand-over whose stamp is that deadline may be trusted
        #: (see ``_handed_over``)
        self.stamp: tuple[float, float] | None = None
        #: a try the last wait already made (MySQL: in its bell wait's round trip), and when it was sent: the
        #: next ``try_acquire`` answers with it instead of trying again
        self.pretried: tuple[Grant, float] | None = None
        #: abandoned: the claim ended without the lock (what a try still running on the server commits for it
        #: is deleted, MySQL's ``_end_unended``)
        self.gave_up = False
        #: the server's ids of the connections a try of ours was let go of on (cancelled, or its link lost):
        #: what it sent may still run there, and the abandon waits for them to end (``SqlBase.until_gone``)
        self.cut: list[int] = []

    async def try_acquire(self) -> Grant:
        b = self.backend
        if self.waker is None:  # watch before looking, so a release right after our look is not missed
            self.waker = rt.Waker()
            # in the order of the server's queue, not of this process's registrations (a waiter registers
            # before its first try): until its try tells its place, a waiter takes every wake-up
            b.wakers.watch(self.key, self.waker, queued=True)
            if b.ops.takes_handover(self.claim):
                b.expect_handover(self.claim.token, self.waker)
        else:
            handed = self._handed_over()
            if handed is not None:  # a release granted us the name: no round trip
                await self._granted()
                return handed
        grant: Grant
        if self.pretried is not None:
            grant, sent = self.pretried
            self.pretried = None
            if grant.acquired:
                # its lease counts from that earlier send (``valid_for``: how long from there), not from this
                # call's start, which the caller counts from unless told how much is left
                grant = replace(grant, valid_for=lease_end(sent, grant.valid_for or self.claim.ttl) - monotonic())
        else:
            self.settled = False  # until the try is answered, it may still run on the server (see abandon)
            sent = monotonic()
            grant = await b._tx(lambda: b.ops.acquire(self.claim, self.key), tx=b._in_tx("acquire"), cut=self.cut)
            self.settled = True
        if grant.acquired:
            await self._granted()
        else:
            self.stamp = None if grant.queued_until is None else (grant.queued_until, sent)
            if self.waker is not None:
                b.wakers.place(self.key, self.waker, grant.place)
                self.placed = grant.place is not None
        return grant

    async def try_late(self) -> Grant:
        """At the deadline: a hand-over already received, or a grant the last wait's try got, is taken (it needs
        no round trip), but no try is sent. A try locks the name: a thousand waiters timing out together would
        each wait their turn on that lock past their deadline (seconds), then abandon. A hand-over that comes
        after this is undone by the abandon (it deletes the promoted row by our token)."""
        if self.pretried is not None and self.pretried[0].acquired:
            return await self.try_acquire()  # the last wait's try got it: taking that needs no round trip
        self.pretried = None
        handed = self._handed_over() if self.waker is not None else None
        if handed is None:
            return Grant(False)
        await self._granted()
        return handed

    def _handed_over(self) -> Grant | None:
        """The grant of a hand-over a release made to us (``docs/models/sql_lease_handover.pml``, TRUST with
        STAMP, KEEP), if it may be trusted without a round trip: its stamp (the lease end it gave our row) is
        the queue deadline our last answered write of our entry made (a refused try's, or our store's batched
        keep's), so the row lives at least until that write's send time + WAITER_TTL on the server's clock.
        Our lease ends a drift margin before that, and the first renewal (within a third of it,
        ``Grant.valid_for``) extends the row to the TTL. A stale NOTIFY (for an entry an earlier try of ours
        wrote, whose row a later try found expired and deleted) carries an older stamp and is only a wake-up:
        the try confirms or refuses."""
        handed = self.backend.take_handover(self.claim.token)
        if handed is None:
            return None
        self._learn_kept()  # a batch another waiter of the store ran may have written our entry last
        if self.stamp is None or handed.stamp != self.stamp[0]:
            return None
        left = self.stamp[1] + WAITER_TTL - drift_margin(WAITER_TTL) - monotonic()
        if left < HANDOVER_MIN_LEFT:
            return None
        return Grant(True, fence=handed.fence, valid_for=left)

    def _learn_kept(self) -> None:
        """The deadline the store's last batched keep wrote on our entry, if later than what we know: it is
        then the write our entry's deadline comes from (with that batch's send time)."""
        kept = self.backend.kept_stamp(self.claim.token)
        if kept is not None and (self.stamp is None or kept[1] > self.stamp[1]):
            self.stamp = kept

    async def _granted(self) -> None:
        b = self.backend
        # An exclusive grant keeps the turn where the push reaches the next head wherever it waits: nobody
        # else can be granted until our release, which wakes it. Elsewhere the next head must go and wait
        # where the push comes (MySQL: on the bell), so it is woken now.
        exclusive = self.claim.mode in (Mode.EXCLUSIVE, Mode.WRITE)
        self._unwatch(pass_on=not (exclusive and b.push_wakes_head_anywhere))
        await b._granted(self.claim, self.key)

    async def wait(self, grant: Grant, timeout: float | None) -> None:
        b = self.backend
        if not self._quiet():
            await b._lease_wait(self, grant, timeout)
            return
        # Behind an earlier queued waiter of this store, which re-checks for both of us and passes the turn on
        # when it leaves: wait for the turn, and at each slice only keep our place (a batch for the store).
        end = None if timeout is None else monotonic() + timeout
        while True:
            left = LEASE_WAIT_SLICE if end is None else min(LEASE_WAIT_SLICE, end - monotonic())
            if left <= 0:
                return
            assert self.waker is not None
            if await self.waker.wait(left) or not self._quiet():
                return
            if not await b.keep_queued(self.claim.token):
                return  # our entry ran out: a full try queues us again
            self._learn_kept()

    def _quiet(self) -> bool:
        """Whether this waiter need not look at the name until woken: it is queued on the server behind an
        earlier waiter of this store (``Wakers.head``), and the dialect's push is on (that one is woken
        by every release elsewhere). Every waiter re-checking at every slice cost one transaction per waiter
        and second (1,000 fair waiters: a hand-off rate near zero)."""
        b = self.backend
        return self.placed and self.waker is not None and b._pushed() and b.wakers.head(self.key) is not self.waker

    async def abandon(self) -> None:
        self.gave_up = True
        self._unwatch()
        b = self.backend
        if not self.settled and self.cut and b.driver.gone_sql:
            # a try let go of mid-call may reach the server after the abandon looked, and grant then: the
            # abandon waits for its connection to end there first, for at most half of what the clean-up
            # has left (the abandon needs the rest)
            end = budget_end()
            with Budget(b.cleanup_timeout if end is None else (end - monotonic()) / 2):
                for cid in self.cut:
                    await b.until_gone(st.Stmt(b.driver.gone_sql, (cid,)))
        with Budget(b.cleanup_timeout):  # then the connection is closed: the lease bounds what is left
            if self.settled:
                done = await b.abandon_settled(self.claim, self.key)
            else:
                done = await b._tx(lambda: b.ops.abandon(self.claim, self.key), tx=b._in_tx("abandon"))
        if done:
            await b._released([self.claim.token], self.key)
        else:  # nothing of it was left (an admin broke it): a bell its wait kept still goes (MySQL)
            await b._forget_bells([self.claim.token])

    def _unwatch(self, pass_on: bool = True) -> None:
        if self.waker is not None:
            self.backend.wakers.unwatch(self.key, self.waker, pass_on=pass_on)
            self.backend.unkeep(self.claim.token)
            self.backend.forget_handover(self.claim.token)
            self.waker = None
            self.placed = False


def lease_slice(attempt: LeaseAttempt, grant: Grant, timeout: float | None, backoff: bool) -> float:
    """How long one wait lasts: until the holder's lease end, ``timeout`` or LEASE_WAIT_SLICE, whichever is
    first; with ``backoff``, also the waiter's capped backoff (when no push will come)."""
    return wait_slice(grant.retry_after, attempt.backoff.next_delay() if backoff else None, timeout, LEASE_WAIT_SLICE)

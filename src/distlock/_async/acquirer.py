"""Between the lock objects and the backend: the acquire loop, and every holding of one store.

One direction, as Curator's ``InterProcessMutex`` -> ``LockInternals`` -> driver: the lock objects
(``locks.py``: owners, reentrancy) call this ``Acquirer`` only; it asks the lease clock (``clock.py``)
and the backend (``backend.py``), which never call back up except through ``Acquirer.backend_lost``,
the one way a backend reports a holding gone. The store (``store.py``) builds it and closes it.

Here: the store's local waiting lines (one asker per name at a time, see ``Acquirer.acquire``), the
attempt that is abandoned on every way out without the lock (F10 in docs/safety.md), the grant that came
after its own lease end and so counts as a failure (F3), and the life of a holding once granted: registered
with the lease clock, released, extended, checked with the backend, and lost (once, with the callbacks run
off the critical path).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from .. import _events as events
from .. import _idiom_async as idiom
from .. import _rt_async as rt
from .._core import forks, ids
from .._core.timing import CLEANUP, Budget, Deadline, monotonic, renew_interval
from .._core.types import Claim, Grant, LockInfo, Mode
from .._core.validate import check_name
from .._errors import ConfigError, LockError, NotHeld, UnsupportedFeature
from .backend import AsyncAttempt, AsyncBackend
from .clock import Holding, LeaseClock
from .holder_calls import HolderCalls
from .lines import Lines

log = logging.getLogger("distlock")


class Acquired(NamedTuple):
    """A successful acquire: the claim that won (its token may differ from the one asked with, see
    ``_at_backend``), the backend's grant, when the winning request was sent, and the local lease end.
    (Immutable; a tuple rather than a frozen dataclass because it is made on every acquire, in a third of
    the time.)"""

    claim: Claim
    grant: Grant
    sent: float
    expires_at: float
    #: when the grant was checked against its lease end (the holding's start: ``Holding.since``)
    granted: float

    def holding(
        self,
        lock: Any,
        callbacks: list[Callable[[Any], object]],
        auto_renew: bool,
        risk_callbacks: list[Callable[[Any], object]],
        max_hold: float | None = None,
    ) -> Holding:
        """The holding this grant starts for ``lock`` (a lock or an election: what ``on_lost`` callbacks get);
        ``max_hold`` caps it, counted from when the winning request was sent (never later than the grant)."""
        # a grant with a shorter validity (Redlock's; a Redis hand-over's, capped at the queue deadline) is
        # renewed within a third of it, not of the TTL, and is at risk with half of it left
        span = min(self.claim.ttl, self.grant.valid_for or self.claim.ttl)
        return Holding(
            lock=lock,
            callbacks=callbacks,
            claim=self.claim,
            fence=self.grant.fence,
            expires_at=self.expires_at,
            renew_at=self.sent + renew_interval(span),
            auto_renew=auto_renew,
            risk_callbacks=risk_callbacks,
            span=span,
            cap=math.inf if max_hold is None else self.sent + max_hold,
            since=self.granted,
        )


async def _abandon(attempt: AsyncAttempt) -> None:
    """Remove what an attempt may have left on the server, shielded from the caller's cancellation and bounded
    by its own ``CLEANUP`` (past the deadline that ended the wait): what it cannot remove in time goes with
    its lease."""
    with Budget(CLEANUP, escape=True):
        await rt.shielded(attempt.abandon())


class AsyncAcquirer(HolderCalls):
    def __init__(self, backend: AsyncBackend, client_name: str | None = None) -> None:
        self.backend = backend
        self.scheme = backend.scheme
        self.capabilities = backend.capabilities
        #: the store's client name, carried in the owner string of every claim (``ids.owner_id``)
        self.client_name = client_name
        #: the log events and metrics of this store's locks (``distlock.otel`` adds its sink here)
        self.events = events.Events(backend.scheme, client_name)
        # released at a normal exit (``rt``); at_risk reported by ``risk``
        self.clock = LeaseClock(backend, self.lose, self.events, self, risk=self.risk)
        rt.opened_at_exit(self)  # the threaded side closes a store left open at exit
        self._mutex = threading.Lock()
        self._lines = Lines()  # blocking exclusive claims of this store wait here first (``lines.py``)
        self._dispatcher = rt.Dispatcher()
        self._forks = forks.generation()  # the process the dispatcher belongs to (its thread, its event loop)
        self._born = self._forks  # the process the store (and its connections) was opened in
        self.closed = False
        self.loop_warned = rt.IS_ASYNC  # the asyncio side is meant to run on the loop: nothing to check
        backend.set_loss_handler(self.backend_lost)
        backend.set_revoke_handler(self.backend_revoked)
        forks.track(self)

    def after_fork(self) -> None:
        """In a forked child: a mutex of its own (a thread of the parent may have held this one), and none of
        the parent's waiters in the local lines."""
        self._mutex = threading.Lock()
        self._lines.after_fork()

    def blocking(self) -> None:
        """Before each call that waits on the backend: a sync store called on a running asyncio event loop
        blocks every task of that loop, so that is warned about, once per store. One check on the hot path."""
        if not self.loop_warned:
            self.loop_warned = idiom.blocks_event_loop()

    def check_name(self, name: object) -> str:
        """``name`` if this store can take it: the checks of every backend, then the backend's own layout (a
        name it cannot keep apart from other names or its own keys is refused: ``ConfigError``)."""
        checked = check_name(name, backend=self.scheme)
        why = self.backend.name_refused(checked)
        if why is not None:
            raise ConfigError(why, name=checked, backend=self.scheme)
        return checked

    def check_supported(self, name: str, mode: Mode, fair: bool) -> None:
        caps = self.capabilities
        if mode not in caps.modes:
            raise UnsupportedFeature(f"{mode.value} locks are not supported here", name=name, backend=self.scheme)
        if fair and not (caps.fair or caps.always_fair):
            raise UnsupportedFeature("fair=True (FIFO) is not supported here", name=name, backend=self.scheme)
        if self.closed:
            raise LockError("the store is closed", name=name, backend=self.scheme)

    # -- acquire ---------------------------------------------------------------------------------------
    async def acquire(self, claim: Claim, deadline: Deadline) -> Acquired | None:
        """Try until granted or the deadline passes; None if not granted in time.

        Blocking exclusive claims of one store on one name line up locally first, and only the first in
        line asks the backend (``lines.py``: no herd inside the process).
        """
        if self.closed:
            raise LockError("the store is closed", name=claim.name, backend=self.scheme)
        self.blocking()
        if self._forks != forks.generation():
            # a forked child's callbacks run on a thread of its own, or on its own event loop: made here, where
            # that loop runs (the parent's thread is not in the child, and the parent's loop does not run there)
            self._forks = forks.generation()
            self._dispatcher = rt.Dispatcher()
        if self.events.quiet():
            # nobody listens (no sink, DEBUG off): no outcome to report, so none of its timing and fields (a
            # sink added meanwhile sees the next acquire, as it would see no span of one already running)
            return await self._in_line(claim, deadline)
        with self.events.acquiring(claim) as acquiring:  # the one place an acquire's outcome is reported
            won = await self._in_line(claim, deadline)
            if won is None:
                acquiring.timed_out()
            else:
                acquiring.granted(won.grant.fence)
            return won

    async def _in_line(self, claim: Claim, deadline: Deadline) -> Acquired | None:
        if not Lines.wanted(claim, deadline, self.capabilities):
            return await self._at_backend(claim, deadline)
        won: Acquired | None = await self._lines.first(claim, deadline, self._at_backend)
        return won

    async def _at_backend(self, claim: Claim, deadline: Deadline) -> Acquired | None:
        """The backend's part of acquire: on any way out without the lock (timeout, error, cancellation)
        the attempt is abandoned, which removes whatever the backend may have written for it, even a
        holding whose reply was lost (F10).

        A grant whose reply came after its own local lease end is no success (F3): by then the server may
        have granted the lock to someone else. It is abandoned like a failed try and the claim tries again,
        with a fresh token, while the deadline allows.
        """
        attempt: AsyncAttempt = self.backend.attempt(claim)
        late = False  # the last wait ended at the deadline: one more look, one that waits for nothing
        try:
            # every call made for this wait (connects, retries and the last look included) ends by the
            # caller's deadline (docs/operations.md, "One deadline"), not by each backend's own bound
            with Budget(until=deadline.calls_end()):
                while True:
                    sent = monotonic()
                    grant = await (attempt.try_late() if late else attempt.try_acquire())
                    if grant.acquired:
                        end = self.clock.grant_end(claim, grant, sent)  # +inf where a session backs it
                        now = monotonic()
                        if now < min(end, self.clock.session_deadline(claim)):
                            return Acquired(claim, grant, sent, end, now)
                        log.warning("grant of %r arrived after its lease ended; trying again", claim.name)
                        await _abandon(attempt)
                        claim = replace(claim, token=ids.new_token())
                        attempt = self.backend.attempt(claim)
                        if deadline.expired():
                            return None
                        continue
                    left = deadline.remaining()
                    if left is not None and left <= 0:
                        await _abandon(attempt)
                        return None
                    self.events.debug(
                        "wait", "waiting for %r (next look within %s s)", claim.name, grant.retry_after,
                        lock=claim.name, kind=events.metric_kind(claim),
                    )  # fmt: skip
                    await attempt.wait(grant, left)
                    late = deadline.expired()
        except BaseException:
            try:
                await _abandon(attempt)
            except Exception as err:  # noqa: BLE001 - report the original error, not the clean-up's
                log.warning("could not clean up after a failed acquire of %r: %s", claim.name, err)
            raise

    # -- holdings --------------------------------------------------------------------------------------
    def register(self, holding: Holding) -> None:
        self.clock.add(holding)

    def _forget(self, holding: Holding) -> None:
        self.clock.discard(holding)

    def ours(self, holding: Holding) -> None:
        """``NotHeld`` for a holding a forked child inherited (``forks``): the parent's to release, renew and
        check; the child never sends a word about it."""
        if holding.gen != forks.generation():
            raise NotHeld(
                "held by the process this one was forked from: a forked child never releases, renews or checks "
                "its parent's locks (take your own)",
                name=holding.claim.name,
                backend=self.scheme,
            )

    async def release(self, holding: Holding) -> bool:
        self.ours(holding)
        self.blocking()
        # Stop renewing first: a renewal in flight that meets the release must not report the lock as lost.
        self._forget(holding)
        ok = await self.backend.release(holding.claim)
        # A release the backend refused is followed by a loss (the caller's), which ends the holding instead.
        self._released(holding, ok, ends=ok)
        return ok

    def _released(self, holding: Holding, ok: bool, ends: bool) -> None:
        if self.events.quiet():  # nobody listens: mark the holding ended, and build no event, read no clock
            if ends:
                self._end(holding)
            return
        held_ms = self._ended(holding) if ends else None
        name = holding.claim.name
        self.events.debug(
            "release", "released %r, fence %s%s", name, holding.fence, "" if ok else " (it had been lost)",
            lock=name, kind=events.metric_kind(holding.claim), fence=holding.fence, ok=ok,
            held_ms=held_ms,
        )  # fmt: skip

    def _ended(self, holding: Holding) -> float | None:
        """How long ``holding`` was held (ms), the first time it ends (release or loss); None after that,
        so that a metric of locks held counts each holding down once."""
        if not self._end(holding):
            return None
        return round((monotonic() - holding.since) * 1000.0, 3)

    def _end(self, holding: Holding) -> bool:
        """Mark ``holding`` ended; True the first time only."""
        with self._mutex:
            first, holding.ended = not holding.ended, True
        return first

    def lost_event(self, holding: Holding) -> rt.Event:
        """``holding``'s lost event, whose ``is_set()`` is true to the lease clock (``held.Clocked``)."""
        return holding.lost.event(lambda: self.clock.expire(holding))

    def check_expiry(self, holding: Holding) -> None:
        """Lose a holding whose lease ran out locally (e.g. the process was paused past its TTL); never a
        forked child's copy of its parent's (its callbacks are the parent's to run)."""
        if holding.gen == forks.generation():
            self.clock.check(holding)

    async def inspect(self, name: str) -> LockInfo | None:
        self.blocking()
        return await self.backend.inspect(name)

    async def set_permits(self, name: str, permits: int) -> bool:
        if self.closed:
            raise LockError("the store is closed", name=name, backend=self.scheme)
        self.blocking()
        return await self.backend.set_permits(name, permits)

    def lose(self, holding: Holding, reason: str, cause: str = events.GONE) -> None:
        """Mark a holding lost: set its event, stop renewing it, call the callbacks once, off the critical path.

        ``reason`` says why in words; ``cause`` is one of the few codes in ``_events`` (a metric attribute)."""
        with self._mutex:  # the clock, the renewer, a driver thread and the caller may all find it at once
            if holding.lost_reason:
                return
            holding.lost_reason = reason or "lost"
        holding.lost.set()
        self._forget(holding)
        name = holding.claim.name
        self.events.warning(
            "lost", "lock %r lost: %s", name, reason, lock=name, kind=events.metric_kind(holding.claim),
            fence=holding.fence, reason=reason, cause=cause, held_ms=self._ended(holding),
        )  # fmt: skip
        for cb in list(holding.callbacks):
            self._dispatcher.run_callback(cb, holding.lock)

    def risk(self, holding: Holding, on: bool) -> None:
        """The lease clock found ``holding`` at risk (``on``: less than ``held.AT_RISK_SHARE`` of its lease
        left, no renewal confirmed), or safe again: set or clear its event; at risk, say so and call the
        callbacks, off the critical path."""
        if not on:
            holding.risk.clear()
            self.events.debug("safe", "lock %r renewed: no longer at risk", holding.claim.name,
                              lock=holding.claim.name, kind=events.metric_kind(holding.claim))  # fmt: skip
            return
        holding.risk.set()
        name = holding.claim.name
        left = round(self.lease_left(holding), 3)
        self.events.warning(
            "at-risk", "lock %r at risk: %.1fs of its lease left and no renewal confirmed", name, left,
            lock=name, kind=events.metric_kind(holding.claim), fence=holding.fence, left_s=left,
        )  # fmt: skip
        for cb in list(holding.risk_callbacks):
            self._dispatcher.run_callback(cb, holding.lock)

    def backend_revoked(self, token: str, request: str, reason: str) -> None:
        """The backend's report that a holding got a release request (from any thread)."""
        holding = self.clock.find(token)
        if holding is not None:
            self._dispatcher.call(lambda: self.revoke(holding, request, reason))

    def revoke(self, holding: Holding, request: str, reason: str) -> None:
        """Someone asked ``holding``'s holder to release it: set its event, say so and call the lock's
        ``on_revoke`` callbacks (off the critical path, as ``risk`` does), once per request."""
        with self._mutex:
            if holding.lost_reason or holding.revoke.seen == request:
                return
            holding.revoke.seen = request
            holding.revoke.reason = reason
        holding.revoke.set()
        name = holding.claim.name
        self.events.info(
            "revoke-requested", "lock %r: its release was requested%s", name, f" ({reason})" if reason else "",
            lock=name, kind=events.metric_kind(holding.claim), fence=holding.fence, reason=reason,
        )  # fmt: skip
        for cb in list(getattr(holding.lock, "_revoke_callbacks", ())):
            self._dispatcher.run_callback(cb, reason)

    def lease_left(self, holding: Holding) -> float:
        """Seconds until ``holding``'s local lease end (``LeaseClock.left``): no I/O."""
        return self.clock.left(holding)

    def backend_lost(self, token: str, reason: str) -> None:
        """The backend's report that a holding is gone (from any thread)."""
        holding = self.clock.find(token)
        if holding is not None:
            self._dispatcher.call(lambda: self.lose(holding, reason, events.REPORTED))

    def holdings(self) -> list[Holding]:
        """What this store holds now (test hook: what the renewer renews)."""
        return self.clock.snapshot()

    def _held_at_exit(self) -> int:
        """What the exit would release: this process's holdings (a forked child's own only, ``forks``); none of
        a database that ends with the process."""
        return 0 if self.closed or self.backend.in_process else self.clock.count()

    def _open_at_exit(self) -> bool:
        """Whether the exit has this store to close (``_exits``): open, and not a database that ends with the
        process (``memory://``: closed before the exit's hook runs)."""
        return not (self.closed or self.backend.in_process)

    async def close_at_exit(self) -> None:
        """A normal interpreter exit's release (``rt``): what is held, then the backend's connections too, so
        that no connection, and no driver thread watching one, is left to the interpreter's teardown (a crash
        at exit was seen on MySQL when they were)."""
        await self.close()
        if self._born == forks.generation() or self.backend.fork_owned:  # a forked child's copy: the parent's
            await self.backend.aclose()

    async def close(self) -> None:
        """Release everything still held and stop the lease clock (the store then closes the backend)."""
        self.closed = True
        rt.closed_at_exit(self)
        for holding in self.clock.snapshot():
            ok = False
            try:
                ok = await self.backend.release(holding.claim)
            except LockError as err:
                log.warning("close: could not release %r: %s", holding.claim.name, err)
            self._forget(holding)
            self._released(holding, ok, ends=True)  # no longer held by this process either way
        await self.clock.stop()
        self._dispatcher.close()

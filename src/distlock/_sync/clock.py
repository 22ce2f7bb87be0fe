# GENERATED from src/distlock/_async/clock.py by scripts/gen_sync.py: edit that file, not this one.
"""The lease clock: the one owner of every holding's timing in a store.

A holding's **local lease end** is the moment the request that last confirmed its lease was *sent*, plus the
TTL that request carried, minus a drift margin (``timing.lease_end``). The server cannot have started its
own count before we sent, so it cannot end its lease before ours: when ours ends, ``lost`` fires, and it
fires by a timer, whatever round trip is in flight. That is the promise -- the holder is told before the
backend can grant the lock to anyone else -- and why it never waits for I/O (F15 in docs/safety.md: a silent link or a
half-open connection may never answer).

Two workers per store, so that a stuck round trip can never delay a ``lost``:

* the **clock** sleeps until the earliest local lease end and marks what ran out as lost. It does no I/O.
* the **renewer** extends leases in batches (one round trip per tick for every holding due; each is renewed every
  ttl/3). A batch is bounded by the earliest lease end in it: a call that cannot
  be answered before that is given up (cancelled on asyncio; on threads the renewer stops waiting and the
  driver's own socket timeout ends the call), and only the holdings whose lease ran out meanwhile are lost.

ZooKeeper has no per-holding lease but a session: ``backend.lease_end(claim)`` says when the session may have
expired on the server. etcd renews a lease per holding, as the other backends do, and its ``lease_end(claim)``
is that etcd lease's own local end (tighter than the store's count when a pooled lease was confirmed before
the acquire started). A holding is lost at the earlier of its own lease end and ``lease_end``, which the clock
reads each time it wakes.

Renewals and ``extend()`` of one holding are serialised (one round trip at a time per holding), and each
records the TTL it actually sent. A request whose outcome is unknown (given up, cancelled) may still be
applied by the server later; if it carried a shorter TTL than a later confirmation, it could shorten the
server's lease below ours, so every later confirmation counts with the smallest such TTL.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _events as events
from .. import _rt_sync as rt
from .._core import forks
from .._core.timing import lease_end, monotonic, renew_interval
from .._core.types import Claim, Grant
from .._errors import LockError
from .backend import SyncBackend
from .held import AT_RISK_SHARE, Lost, Revoke, Risk, RiskCallback
from .sleeper import Sleeper

if TYPE_CHECKING:
    from .election import Election
    from .locks import Lock

log = logging.getLogger("distlock")

#: after a failed renewal, try again this soon (capped by a tenth of the TTL)
RETRY_AFTER_FAILURE = 1.0


@dataclass(eq=False, slots=True)
class Holding:
    """One owner's hold of one lock object: what the lease clock times and the lost signal reports. (Slots:
    one is made on every acquire, and its fields are read on every renewal.)"""

    lock: Lock | Election  # what the on_lost callbacks are given
    callbacks: list[Callable[[Any], object]]  # the lock's on_lost callbacks (the lock's own list)
    claim: Claim
    fence: int | None
    expires_at: float  # local lease end (monotonic); +inf where a session, not a lease, backs the holding
    renew_at: float
    auto_renew: bool
    #: after a failed renewal, not before this (``RETRY_AFTER_FAILURE``), whatever the batching window says
    retry_at: float = 0.0
    #: the lock's on_at_risk callbacks (the lock's own list)
    risk_callbacks: list[RiskCallback] = field(default_factory=list)
    #: the length of the lease its local end counts (the TTL; a shorter first grant's validity)
    span: float = 0.0
    #: the lock's ``max_hold`` as a moment (monotonic): lost then, renewals or not; +inf without one
    cap: float = math.inf
    count: int = 1
    lost: Lost = field(default_factory=Lost)
    risk: Risk = field(default_factory=Risk)
    #: release requests (``Store.request_release``) this holding got
    revoke: Revoke = field(default_factory=Revoke)
    lost_reason: str = ""
    busy: bool = False  # a renewal or extend() round trip of this holding is in flight (under LeaseClock._mutex)
    unresolved_ttl: float = math.inf  # smallest TTL of a request of ours whose outcome is unknown
    since: float = field(default_factory=monotonic)  # when it was granted (the hold time's start)
    ended: bool = False  # released or lost, as far as the hold metrics go (under the acquirer's mutex)
    #: the fork generation it was granted in: a forked child never releases, renews or reports it (``forks``)
    gen: int = field(default_factory=forks.generation)


class LeaseClock:
    """Every live holding of one store: when each ends, its renewal, and its loss.

    ``lose(holding, reason)`` is the store's: it sets the event and runs the callbacks. It is called from
    the clock's worker, the renewer's worker, or the caller's task/thread (``check``), never while a mutex
    here is held.
    """

    #: the workers wake at least this often (also when nothing is held), so that a new holding due later than
    #: that needs no wake-up: most acquires cost no thread switch
    TICK = 2.0

    def __init__(
        self,
        backend: SyncBackend,
        lose: Callable[[Holding, str, str], None],
        stream: events.Events,
        holder: rt.ExitHolder | None = None,
        risk: Callable[[Holding, bool], None] | None = None,
    ) -> None:
        self._backend = backend
        #: what a normal exit releases while something is held (``rt.hold_at_exit``)
        self._holder = holder
        self._lose = lose
        self._risk = risk
        self._events = stream
        name = stream.backend
        self._renews = backend.capabilities.needs_renewal
        self._holds: dict[str, Holding] = {}  # by token; read through _current()
        self._gen = forks.generation()
        forks.track(self)
        self._mutex = threading.Lock()
        self._closing = False
        self._releasing: list[rt.Background] = []  # releases of holdings lost at their max_hold cap
        self._clock = Sleeper(self._clock_loop, f"distlock-lease-clock-{name}")
        self._renewer = Sleeper(self._renew_loop, f"distlock-renewer-{name}")

    # -- timing rules (pure) ----------------------------------------------------------------------------
    def grant_end(self, claim: Claim, grant: Grant, sent: float) -> float:
        """The local lease end of a grant whose request was sent at ``sent``."""
        if not self._renews:
            return math.inf
        end = lease_end(sent, claim.ttl)
        if grant.valid_for is not None:  # the backend knows better (Redlock: elapsed time and quorum)
            end = min(end, sent + grant.valid_for)
        return end

    def deadline(self, holding: Holding) -> float:
        """When ``lost`` fires for this holding: its lease end, or the backend's earlier count (ZooKeeper's
        session, etcd's lease of the holding), or its ``max_hold`` cap."""
        return min(self._lease_deadline(holding), holding.cap)

    def _lease_deadline(self, holding: Holding) -> float:
        """The lease's own end (the cap aside): what renewals move, and what ``at_risk`` counts down to."""
        session = self._backend.lease_end(holding.claim)
        return holding.expires_at if session is None else min(holding.expires_at, session)

    def span(self, holding: Holding) -> float:
        """The length of the lease ``deadline`` counts: the session's timeout, or the holding's lease."""
        session = self._backend.lease_span(holding.claim)
        return holding.span or holding.claim.ttl if session is None else session

    def session_deadline(self, claim: Claim) -> float:
        """The backend's own count of when ``claim``'s holding ends (``lease_end``: ZooKeeper's session, etcd's
        lease of the holding), +inf where it keeps none."""
        session = self._backend.lease_end(claim)
        return math.inf if session is None else session

    # -- the set of holdings ----------------------------------------------------------------------------
    def after_fork(self) -> None:
        """In a forked child: a mutex of its own (a worker of the parent may have held it at the fork)."""
        self._mutex = threading.Lock()

    def _current(self) -> dict[str, Holding]:
        """The holdings by token (under the mutex). In a forked child none of the parent's: they are dropped
        here, with no word to the backend, so the child's workers (started anew when it takes a lock of its own)
        neither renew them -- a dead parent's lock would live on -- nor report them lost."""
        if self._gen != forks.generation():
            self._gen = forks.generation()
            self._holds = {}
        return self._holds

    def add(self, holding: Holding) -> None:
        with self._mutex:
            held = self._current()
            held[holding.claim.token] = holding
            if len(held) == 1 and self._holder is not None:
                rt.hold_at_exit(self._holder)
        end = self.deadline(holding)
        self._clock.ensure(end)
        if self._renews:
            self._renewer.ensure(min(end, holding.renew_at) if holding.auto_renew else end)

    def discard(self, holding: Holding) -> None:
        with self._mutex:
            held = self._current()
            if held.get(holding.claim.token) is holding:
                del held[holding.claim.token]
                if not held and self._holder is not None:
                    rt.drop_at_exit(self._holder)

    def tracks(self, holding: Holding) -> bool:
        with self._mutex:
            return self._current().get(holding.claim.token) is holding

    def count(self) -> int:
        with self._mutex:
            return len(self._current())

    def snapshot(self) -> list[Holding]:
        with self._mutex:
            return list(self._current().values())

    def find(self, token: str) -> Holding | None:
        with self._mutex:
            return self._current().get(token)

    def expire(self, holding: Holding) -> None:
        """Lose ``holding`` now if it is still held and its lease ran out: a reader of its ``lost`` event asks
        (``Clocked``). A released holding is not held, and its lease end says nothing any more."""
        if holding.lost.is_set() or monotonic() < self.deadline(holding):
            return  # the common answer, without the mutex: a reader may ask in a loop
        if self.tracks(holding):
            self.check(holding)

    def left(self, holding: Holding) -> float:
        """Seconds until ``holding``'s local lease end, 0.0 once lost (a reader that finds the end passed loses it
        there and then, as the clock would; never a forked child's copy of its parent's). No I/O."""
        if holding.lost.is_set():
            return 0.0
        left = self.deadline(holding) - monotonic()
        if left > 0:
            return left
        if holding.gen == forks.generation():
            self.check(holding)
        return 0.0

    def check(self, holding: Holding) -> bool:
        """Lose ``holding`` now if its lease ran out (the clock may not have woken yet). True if lost."""
        if not holding.lost.is_set() and monotonic() >= self.deadline(holding):
            self._ran_out(holding)
        return holding.lost.is_set()

    def _ran_out(self, holding: Holding) -> None:
        """Lose a holding whose deadline passed. At its ``max_hold`` cap its lease is still good on the server:
        once ``lost`` is set, the holding is released there too (off the clock's worker, which does no I/O), so
        the next owner need not wait out its TTL; a release that fails leaves it to the TTL."""
        capped = monotonic() < self._lease_deadline(holding)
        if not capped:
            self._lose(holding, self._why(holding), events.EXPIRED)
            return
        self._lose(holding, "held for the lock's max_hold: given up, renewals or not", events.CAPPED)
        if holding.gen != forks.generation():
            return
        try:
            worker = rt.Background(lambda: self._release_capped(holding), "distlock-max-hold-release")
        except RuntimeError:  # asyncio, asked from a thread with no running loop (a lost event read there)
            log.warning("%r reached its max_hold off the event loop: it ends with its TTL", holding.claim.name)
            return
        # kept until done (the event loop holds only a weak reference to a task)
        self._releasing = [w for w in self._releasing if w.alive()] + [worker]

    def _release_capped(self, holding: Holding) -> None:
        try:
            self._backend.release(holding.claim)
        except Exception as err:  # noqa: BLE001 - the lease's TTL frees it then
            log.warning("could not release %r at its max_hold (%s): it ends with its TTL", holding.claim.name, err)

    def _why(self, holding: Holding) -> str:
        if self._renews:
            return "lease ran out before it could be renewed (process paused, backend slow or unreachable)"
        return "the session may have expired on the server (no reply from it in time)"

    # -- one round trip at a time per holding ------------------------------------------------------------
    def claim_io(self, holding: Holding) -> bool:
        """Mark a round trip of ``holding`` in flight; False if one already is."""
        with self._mutex:
            if holding.busy:
                return False
            holding.busy = True
            return True

    def end_io(self, holding: Holding, sent: float, ttl: float, confirmed: bool | None) -> None:
        """A round trip sent at ``sent`` with ``ttl`` ended: True confirmed, False refused, None unknown."""
        with self._mutex:
            holding.busy = False
            if confirmed is None:
                holding.unresolved_ttl = min(holding.unresolved_ttl, ttl)
            elif confirmed:
                holding.expires_at = self._confirmed_end(holding, sent, ttl)
                holding.renew_at = sent + renew_interval(ttl)
                holding.span = ttl
        if confirmed and holding.risk.is_set():
            self._clock.wake()  # the end moved: the clock clears the warning now, not at the old end

    def _confirmed_end(self, holding: Holding, sent: float, ttl: float) -> float:
        if not self._renews:
            return math.inf
        return lease_end(sent, min(ttl, holding.unresolved_ttl))

    def wait_io(self, holding: Holding) -> None:
        """Wait until no round trip of ``holding`` is in flight, then claim it (for ``extend()``).

        Renewals are short and bounded, so a short poll is enough; it ends at the holding's deadline at the
        latest (the caller then finds it lost).
        """
        while not self.claim_io(holding):
            if monotonic() >= self.deadline(holding):
                with self._mutex:
                    holding.busy = True
                return
            rt.sleep(0.002)

    # -- the workers -------------------------------------------------------------------------------------
    def _clock_loop(self) -> None:
        while not self._closing:
            now = monotonic()
            wake = now + self.TICK
            for h in self.snapshot():
                if h.lost.is_set():
                    continue
                end = self.deadline(h)
                if now >= end:
                    self._ran_out(h)
                    continue
                wake = min(wake, end)
                # at risk from here (the lease's end moves on renewals; a max_hold cap is no risk, but the plan)
                risky = self._lease_deadline(h) - AT_RISK_SHARE * self.span(h)
                if now < risky:
                    wake = min(wake, risky)
                if (now >= risky) != h.risk.is_set() and self._risk is not None:
                    self._risk(h, now >= risky)
            self._clock.sleep_until(wake)

    def _renew_loop(self) -> None:
        while not self._closing:
            now = monotonic()
            due: list[Holding] = []
            wake = now + self.TICK
            for h in self.snapshot():
                if h.lost.is_set() or not h.auto_renew:
                    continue
                if now < h.retry_at:
                    # a renewal failed: the next try waits its delay. The window below is wider than that
                    # delay, so it alone made a failing renewal (a server that refuses at once, no master
                    # known during a failover) go again at once, hundreds of times a second
                    wake = min(wake, h.retry_at)
                    continue
                # Renew everything due within a sixth of its TTL: locks taken at different times share trips
                # (a quarter of what is left of a lease shorter than its TTL, e.g. a Redis hand-over's, which
                # is renewed at a third of that lease, not at once).
                if h.renew_at <= now + min(h.claim.ttl / 6.0, (h.expires_at - now) / 4.0):
                    due.append(h)
                else:
                    wake = min(wake, h.renew_at)
            if due:
                self._renew(due)
                continue  # a renewal takes time: look again before sleeping
            self._renewer.sleep_until(wake)

    def _renew(self, due: list[Holding]) -> None:
        batch = [h for h in due if self.claim_io(h)]
        if not batch:
            self._renewer.sleep_until(monotonic() + 0.002)  # all busy in extend(): look again shortly
            return
        claims = [h.claim for h in batch]  # what is sent, TTLs included: recorded on the way back
        sent = monotonic()
        # Bounded by the earliest deadline in the batch: past it, the answer cannot save that holding, and a
        # call that never returns (a silent link) must not keep the others from being renewed.
        bound = max(0.0, min(self.deadline(h) for h in batch) - sent)
        try:
            results: Sequence[bool] = rt.bounded(bound, self._backend.renew, claims)
        except TimeoutError:
            self._failed(
                batch, sent, "TimeoutError", "renewal of %d lease(s) got no answer within %.3fs; retrying", bound
            )
            self._retry_soon(batch, claims, sent, unknown=True)
        except LockError as err:
            self._failed(batch, sent, type(err).__qualname__, "renewal of %d lease(s) failed, retrying: %s", err)
            self._retry_soon(batch, claims, sent, unknown=True)
        except Exception as err:  # noqa: BLE001 - logged with its traceback (exc_info), and retried
            self._failed(
                batch, sent, type(err).__qualname__, "renewal of %d lease(s) crashed, retrying: %s", err, exc_info=True
            )
            self._retry_soon(batch, claims, sent, unknown=True)
        else:
            ms = round((monotonic() - sent) * 1000.0, 3)
            n = len(batch)
            self._events.debug("renew", "renewed %d lease(s) in %.1f ms", n, ms, count=n, ms=ms)
            for h, c, ok in zip(batch, claims, results, strict=True):
                self.end_io(h, sent, c.ttl, ok)
                if not ok and self.tracks(h):  # not released meanwhile: a release racing the renewal is no loss
                    self._lose(h, "renewal refused: the lease had expired or was taken", events.REFUSED)
            now = monotonic()
            for h in batch:  # an answer that came after the lease end confirms nothing
                if not h.lost.is_set() and now >= self.deadline(h):
                    self._ran_out(h)
        self._clock.wake()  # deadlines moved

    def _failed(
        self, batch: list[Holding], sent: float, error: str, message: str, detail: object, exc_info: bool = False
    ) -> None:
        """Report a renewal round trip that failed (no answer, or an error) for the whole batch."""
        ms = round((monotonic() - sent) * 1000.0, 3)
        n = len(batch)
        self._events.warning("renew-failed", message, n, detail, exc_info=exc_info, count=n, ms=ms, error=error)

    def _retry_soon(self, batch: list[Holding], claims: list[Claim], sent: float, unknown: bool) -> None:
        now = monotonic()
        for h, c in zip(batch, claims, strict=True):
            self.end_io(h, sent, c.ttl, None if unknown else False)
            h.renew_at = h.retry_at = now + min(RETRY_AFTER_FAILURE, c.ttl / 10.0)

    def stop(self) -> None:
        self._closing = True
        self._clock.stop()
        self._renewer.stop()

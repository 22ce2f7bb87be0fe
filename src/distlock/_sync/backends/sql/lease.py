# GENERATED from src/distlock/_async/backends/sql/lease.py by scripts/gen_sync.py: edit that file, not this one.
"""The lease-table mode (the default, ``mode=lease``): holdings are rows with an expiry, on the database's clock.

Every statement is in ``_core/sql_lease.py`` (``Ops``); this class runs them. Each operation is one short
transaction on a pooled connection; the acquire locks the name first, so it and the takeover of an expired
holding are atomic. Renewal of every held lease of the store is one transaction per tick, which also sweeps
long-expired rows now and then. Waiters watch the name locally (a release in this process wakes them at
once) and the dialect adds a push from other processes (``_lease_wait``: PostgreSQL LISTEN/NOTIFY, MySQL a
companion ``GET_LOCK``), with a re-check at the holder's expiry at the latest.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from .... import _rt_sync as rt
from ...._core import sql_lease as sq
from ...._core import sql_lease_autocommit as ac
from ...._core import sql_lease_tx as tx
from ...._core import sql_names as sn
from ...._core.timing import (
    LEASE_WAIT_SLICE,
    WAITER_TTL,
    Backoff,
    Budget,
    drift_margin,
    lease_end,
    monotonic,
    wait_slice,
)
from ...._core.types import Capabilities, Claim, Grant, LockInfo, Mode
from ...._errors import BackendError, ConfigError
from ...._url import StoreConfig
from ...._wakeup import Wakers
from ...backend import SyncAttempt, SyncWatch
from ...batch import Batched
from .base import RENEW_SHARE, SqlBase

log = logging.getLogger("distlock")

#: renewals also sweep long-expired rows (and 0.1.0's fence rows), at most this often
SWEEP_EVERY = 30.0
#: a waiter holds on a hand-over's NOTIFY alone only with at least this much of its lease left (else its try
#: confirms the row, for a full TTL); the first queued waiter re-tries every LEASE_WAIT_SLICE, so normally
#: about WAITER_TTL - LEASE_WAIT_SLICE is left
HANDOVER_MIN_LEFT = WAITER_TTL / 2


class LeaseAttempt(SyncAttempt):
    backend: LeaseBackend

    def __init__(self, backend: LeaseBackend, claim: Claim) -> None:
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

    def try_acquire(self) -> Grant:
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
                self._granted()
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
            grant = b._tx(lambda: b.ops.acquire(self.claim, self.key), tx=b._in_tx("acquire"))
            self.settled = True
        if grant.acquired:
            self._granted()
        else:
            self.stamp = None if grant.queued_until is None else (grant.queued_until, sent)
            if self.waker is not None:
                b.wakers.place(self.key, self.waker, grant.place)
                self.placed = grant.place is not None
        return grant

    def try_late(self) -> Grant:
        """At the deadline: a hand-over already received, or a grant the last wait's try got, is taken (it needs
        no round trip), but no try is sent. A try locks the name: a thousand waiters timing out together would
        each wait their turn on that lock past their deadline (seconds), then abandon. A hand-over that comes
        after this is undone by the abandon (it deletes the promoted row by our token)."""
        if self.pretried is not None and self.pretried[0].acquired:
            return self.try_acquire()  # the last wait's try got it: taking that needs no round trip
        self.pretried = None
        handed = self._handed_over() if self.waker is not None else None
        if handed is None:
            return Grant(False)
        self._granted()
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

    def _granted(self) -> None:
        b = self.backend
        # An exclusive grant keeps the turn where the push reaches the next head wherever it waits: nobody
        # else can be granted until our release, which wakes it. Elsewhere the next head must go and wait
        # where the push comes (MySQL: on the bell), so it is woken now.
        exclusive = self.claim.mode in (Mode.EXCLUSIVE, Mode.WRITE)
        self._unwatch(pass_on=not (exclusive and b.push_wakes_head_anywhere))
        b._granted(self.claim, self.key)

    def wait(self, grant: Grant, timeout: float | None) -> None:
        b = self.backend
        if not self._quiet():
            b._lease_wait(self, grant, timeout)
            return
        # Behind an earlier queued waiter of this store, which re-checks for both of us and passes the turn on
        # when it leaves: wait for the turn, and at each slice only keep our place (a batch for the store).
        end = None if timeout is None else monotonic() + timeout
        while True:
            left = LEASE_WAIT_SLICE if end is None else min(LEASE_WAIT_SLICE, end - monotonic())
            if left <= 0:
                return
            assert self.waker is not None
            if self.waker.wait(left) or not self._quiet():
                return
            if not b.keep_queued(self.claim.token):
                return  # our entry ran out: a full try queues us again
            self._learn_kept()

    def _quiet(self) -> bool:
        """Whether this waiter need not look at the name until woken: it is queued on the server behind an
        earlier waiter of this store (``Wakers.head``), and the dialect's push is on (that one is woken
        by every release elsewhere). Every waiter re-checking at every slice cost one transaction per waiter
        and second (1,000 fair waiters: a hand-off rate near zero)."""
        b = self.backend
        return self.placed and self.waker is not None and b._pushed() and b.wakers.head(self.key) is not self.waker

    def abandon(self) -> None:
        self._unwatch()
        b = self.backend
        with Budget(b.cleanup_timeout):  # then the connection is closed: the lease bounds what is left
            if self.settled:
                done = b.abandon_settled(self.claim, self.key)
            else:
                done = b._tx(lambda: b.ops.abandon(self.claim, self.key), tx=b._in_tx("abandon"))
        if done:
            b._released([self.claim.token], self.key)
        else:  # nothing of it was left (an admin broke it): a bell its wait kept still goes (MySQL)
            b._forget_bells([self.claim.token])

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


class _Watch(SyncWatch):
    """An observer is woken where the name's waiters are: by this store's own changes at once, and by the
    dialect's push from other processes (PostgreSQL NOTIFY on grants of election claims, proclaims and
    releases). MySQL's bell only rings when a holder lets go, so an observer there reads again every
    ``POLL`` seconds (``_observe_slice``)."""

    def __init__(self, backend: LeaseBackend, key: str) -> None:
        self._backend = backend
        self._key = key
        self._waker: rt.Waker | None = rt.Waker()
        backend.wakers.watch(key, self._waker, every=True)  # an observer takes every wake-up, not a turn

    def wait(self, timeout: float) -> None:
        if self._waker is not None:
            self._waker.wait(min(timeout, self._backend._observe_slice()))

    def close(self) -> None:
        if self._waker is not None:
            self._backend.wakers.unwatch(self._key, self._waker)
            self._waker = None


class _Abandons(Batched[str, tuple[Claim, str], bool]):
    """The clean-ups of a store's settled claims (token -> the claim and its name key) that give up together:
    one transaction for all that came while the last one ran. A thousand waiters timing out at once each
    waited for one of the store's few pool connections, past their deadlines."""

    def __init__(self, backend: LeaseBackend) -> None:
        super().__init__()
        self._backend = backend

    def run(self, items: list[tuple[str, tuple[Claim, str]]]) -> dict[str, bool]:
        b = self._backend
        claims = [item for _, item in items]
        found: dict[str, bool] = b._tx(lambda: b.ops.abandon_settled(claims), tx=b._in_tx("abandon"))
        return found


class LeaseBackend(SqlBase):
    """Lease rows; the dialect gives the push that wakes waiters (``_lease_wait`` and the hooks below)."""

    capabilities = Capabilities(modes=frozenset(Mode), fair=True, needs_renewal=True, elections=True)
    #: the lease protocol the dialect runs (set by its class)
    ops: tx.TxOps | ac.AutocommitOps

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        self._swept = monotonic()
        #: the attempts of this store waiting for a name (key: its name key), woken by its own releases at once
        self.wakers: Wakers[str] = Wakers()
        #: waiters that only keep their place (``keep_queued``): token -> when a batch last kept it alive
        #: (monotonic; negative: it found the entry gone; None: not kept yet)
        self._keeping: dict[str, float | None] = {}
        #: the deadline a batch wrote on a kept entry, and the batch's send time (``kept_stamp``)
        self._kept: dict[str, tuple[float, float]] = {}
        self._keep_io = rt.Mutex()
        #: settled claims giving up (``abandon_settled``), together
        self._abandons = _Abandons(self)
        #: waiters a release may hand the name to: the digest a hand-over names them by -> (token, waker)
        self._handing: dict[str, tuple[str, rt.Waker]] = {}
        #: hand-overs received and not yet taken: token -> the hand-over
        self._handed: dict[str, sn.HandOver] = {}

    def after_fork(self) -> None:
        """The parent's waiters, kept entries and hand-overs are not the child's (the wakers forget theirs)."""
        super().after_fork()
        self._keeping, self._kept = {}, {}
        self._keep_io = rt.Mutex()
        self._handing, self._handed = {}, {}

    def _in_tx(self, operation: str) -> bool:
        """Does ``operation``'s script need the driver's BEGIN/COMMIT (see ``Ops.own_tx``)?"""
        return operation not in self.ops.own_tx

    # -- wake-up hooks (the dialect) --------------------------------------------------------------------------
    def _lease_wait(self, attempt: LeaseAttempt, grant: Grant, timeout: float | None) -> None:
        raise NotImplementedError

    def _pushed(self) -> bool:
        """Whether releases in other processes wake this store's waiters now (PostgreSQL: LISTEN is on)."""
        return False

    #: a release elsewhere wakes this store's first queued waiter wherever it waits (PostgreSQL: the listener
    #: wakes it through ``wakers``), not only while it waits on the dialect's own push (MySQL's bell)
    push_wakes_head_anywhere = False

    def keep_queued(self, token: str) -> bool:
        """Keep the queue entry of a waiting ``token`` alive; False if it ran out. The store's waiters that
        only keep their place share one UPDATE: a call within a slice of the last batch that kept this token
        returns at once, any other runs a batch for every such waiter not kept in the last half slice."""
        with self._guard:
            self._keeping.setdefault(token, None)
        with self._keep_io:
            with self._guard:
                last = self._keeping.get(token, None)
                if last is not None and monotonic() - last < LEASE_WAIT_SLICE:
                    return last > 0
                due = [t for t, at in self._keeping.items() if at is None or monotonic() - at >= LEASE_WAIT_SLICE / 2]
            sent = monotonic()
            alive: dict[str, float] = self._tx(lambda: self.ops.keep(due), tx=self._in_tx("keep"))
            with self._guard:
                for t in due:
                    if t in self._keeping:
                        self._keeping[t] = sent if t in alive else -sent  # negative: found gone
                        if t in alive:
                            self._kept[t] = (alive[t], sent)
        return token in alive

    def abandon_settled(self, claim: Claim, key: str) -> bool:
        """Clean up after a claim whose last try was answered (``Ops.abandon_settled``); True if something of
        it was deleted. The store's claims that give up together share one transaction (``_Abandons``)."""
        try:
            found: bool = self._abandons(claim.token, (claim, key), self._deadline())
        except TimeoutError:
            raise BackendError(f"database call timed out ({self.describe()})", backend=self.scheme) from None
        return found

    def kept_stamp(self, token: str) -> tuple[float, float] | None:
        """The deadline the last batch wrote on ``token``'s entry and when that batch was sent, once: like a
        refused try's, what a hand-over's stamp is compared with (``LeaseAttempt._handed_over``)."""
        with self._guard:
            return self._kept.pop(token, None)

    def unkeep(self, token: str) -> None:
        with self._guard:
            self._keeping.pop(token, None)
            self._kept.pop(token, None)

    # -- direct hand-over (``AutocommitOps.release``) -------------------------------------------------------
    def expect_handover(self, token: str, waker: rt.Waker) -> None:
        with self._guard:
            self._handing[sn.token_digest(token)] = (token, waker)

    def forget_handover(self, token: str) -> None:
        with self._guard:
            if self._handing.pop(sn.token_digest(token), None) is not None:
                self._handed.pop(token, None)

    def _handed_on(self, key: str, handed: sn.HandOver) -> None:
        """A release (ours, or another process's NOTIFY) granted ``key`` to a waiter: if it is one of ours, keep
        the hand-over for its next try and wake it; wake the name's observers; not the other waiters, none of
        which can get the name before the new holder lets go (its release wakes them; if it died, its row ends
        at its queue deadline, and they look again at their wait slice)."""
        with self._guard:
            waiting = self._handing.get(handed.digest)
            if waiting is not None:
                self._handed[waiting[0]] = handed
        if waiting is not None:
            waiting[1].notify()
        self.wakers.wake_observers(key)

    def take_handover(self, token: str) -> sn.HandOver | None:
        with self._guard:
            return self._handed.pop(token, None)

    def _granted(self, claim: Claim, key: str) -> None:
        """After a grant (MySQL takes the companion lock here; an election's grant wakes local observers)."""
        if claim.value is not None:
            self.wakers.wake(key)

    def _released(self, tokens: Sequence[str], key: str) -> None:
        """After a release/abandon/break: wake the local waiters (and ring the bell)."""
        self.wakers.wake(key)

    def _forget_bells(self, tokens: Sequence[str]) -> None:
        """Holdings that ran out keep no companion lock (MySQL)."""

    # -- the backend interface -------------------------------------------------------------------------
    def attempt(self, claim: Claim) -> SyncAttempt:
        self._check_record(claim.name, claim.record if claim.value is not None else None)
        return LeaseAttempt(self, claim)

    def _check_record(self, name: str, record: str | None) -> None:
        if record is not None and self.dialect.name != "postgres" and len(record) > sq.OWNER_CHARS:
            raise ConfigError(
                f"the owner id and election value take {len(record)} characters; the MySQL lease table keeps "
                f"{sq.OWNER_CHARS} (use a shorter value)",
                name=name,
                backend=self.scheme,
            )

    def proclaim(self, claim: Claim, value: str) -> bool:
        record = replace(claim, value=value).record
        self._check_record(claim.name, record)
        key = sn.name_key(claim.name)
        ok: bool = self._tx(lambda: self.ops.proclaim(claim, key, record))
        if ok:
            self.wakers.wake(key)
        return ok

    def watch(self, name: str) -> SyncWatch:
        watch = _Watch(self, sn.name_key(name))
        self._arm_push()
        return watch

    def _arm_push(self) -> None:
        """Before an observer's first read: make sure the dialect's push is on (PostgreSQL: LISTEN)."""

    def _observe_slice(self) -> float:
        """How long an observer may wait before it reads again: the dialect's push says (see ``_Watch``)."""
        return SyncWatch.POLL

    def _release(self, claim: Claim) -> bool:
        key = sn.name_key(claim.name)
        ok, handed = self._tx(lambda: self.ops.release(claim, key), tx=False)
        if handed is None:
            self._released([claim.token], key)
        else:
            self._handed_on(key, handed)
        return bool(ok)

    def renew(self, claims: Sequence[Claim]) -> list[bool]:
        if not claims:
            return []
        share = RENEW_SHARE * min(c.ttl for c in claims)
        result: list[bool] = []
        for attempt in range(2):
            try:
                with Budget(share):  # a silent connection costs one try; the second runs on a fresh one
                    result = self._tx(lambda: self.ops.renew(claims), tx=self._in_tx("renew"))
                break
            except BackendError:
                if attempt:
                    raise
        self._maybe_sweep()
        with self._guard:
            result = [ok or c.token in self._releasing for c, ok in zip(claims, result, strict=True)]
        gone = [c.token for c, ok in zip(claims, result, strict=True) if not ok]
        if gone:
            self._forget_bells(gone)
        return result

    def _maybe_sweep(self) -> None:
        """Every SWEEP_EVERY seconds, from the renewer: remove expired rows and free names' rows."""
        if monotonic() - self._swept < SWEEP_EVERY:
            return
        self._swept = monotonic()
        try:
            self._tx(lambda: self.ops.sweep())
        except BackendError as exc:
            log.debug("sweep failed: %s", exc)

    def holds(self, claim: Claim) -> bool:
        ok: bool = self._tx(lambda: self.ops.holds(claim), tx=False)
        return ok

    def shorten(self, claim: Claim, ttl: float) -> bool:
        # the renewal statement is the guarded step: our token, a live lease only, expires_at on the server's clock
        short = [replace(claim, ttl=ttl)]
        (ok,) = self._tx(lambda: self.ops.renew(short), tx=self._in_tx("renew"))
        self._forget_bells([claim.token])  # MySQL: waiters then look again and wait for the row's end
        return bool(ok)

    def inspect(self, name: str) -> LockInfo | None:
        infos = self._tx(lambda: self.ops.inspect([name]), tx=False)
        return infos[0] if infos else None

    def list(self, prefix: str) -> list[LockInfo]:
        infos: list[LockInfo] = self._tx(lambda: self.ops.inspect(None, prefix), tx=False)
        return infos

    def break_lock(self, name: str) -> bool:
        tokens: list[str] = self._tx(lambda: self.ops.break_lock(name), tx=self._in_tx("break_lock"))
        self._released(tokens, sn.name_key(name))
        for token in tokens:
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

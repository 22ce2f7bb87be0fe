"""The lease-table mode (the default, ``mode=lease``): holdings are rows with an expiry, on the database's clock.

``LeaseMode`` runs the statements of its dialect's protocol (``ops``: ``sql/lease_tx.py``'s ``TxOps`` on
MySQL/MariaDB, ``sql/lease_autocommit.py``'s ``AutocommitOps`` on PostgreSQL; the dialects' subclasses,
``mysql/lease_mode.py`` and ``postgres/lease_mode.py``, pick it and add their push). Each operation is one short
transaction on a pooled connection (or autocommit statements); the acquire locks the name first, so it and
the takeover of an expired holding are atomic. Renewal of every held lease of the store is one transaction
per tick, which also sweeps long-expired rows now and then. Waiters (``lease_attempt.py``) watch the name
locally (a release in this process wakes them at once) and the dialect adds a push from other processes
(``_lease_wait``: PostgreSQL LISTEN/NOTIFY, MySQL a companion ``GET_LOCK``), with a re-check at the holder's
expiry at the latest.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from .... import _rt_async as rt
from ...._async.backend import AsyncAttempt, AsyncWatch, told
from ...._async.batch import Batched
from ...._core import ids
from ...._core.timing import (
    LEASE_WAIT_SLICE,
    Budget,
    monotonic,
)
from ...._core.types import Capabilities, Claim, Grant, LockInfo, Mode
from ...._errors import BackendError, ConfigError, UnsupportedFeature
from ...._url import StoreConfig
from ...._wakeup import Wakers
from .. import latch as sl
from .. import lease as sq
from .. import lease_autocommit as ac
from .. import lease_tx as tx
from .. import names as sn
from .base import RENEW_SHARE, SqlBase
from .driver import SqlDriver
from .lease_attempt import LeaseAttempt

log = logging.getLogger("distlock")

#: renewals also sweep long-expired rows (and 0.1.0's fence rows), at most this often
SWEEP_EVERY = 30.0


class _Watch(AsyncWatch):
    """An observer is woken where the name's waiters are: by this store's own changes at once, and by the
    dialect's push from other processes (PostgreSQL NOTIFY on grants of election claims, proclaims and
    releases). MySQL's bell only rings when a holder lets go, so an observer there reads again every
    ``POLL`` seconds (``_observe_slice``)."""

    def __init__(self, backend: LeaseMode, key: str) -> None:
        self._backend = backend
        self._key = key
        self._waker: rt.Waker | None = rt.Waker()
        backend.wakers.watch(key, self._waker, every=True)  # an observer takes every wake-up, not a turn

    async def wait(self, timeout: float) -> None:
        if self._waker is not None:
            await self._waker.wait(min(timeout, self._backend._observe_slice()))

    async def aclose(self) -> None:
        if self._waker is not None:
            self._backend.wakers.unwatch(self._key, self._waker)
            self._waker = None


class _Abandons(Batched[str, tuple[Claim, str], bool]):
    """The clean-ups of a store's settled claims (token -> the claim and its name key) that give up together:
    one transaction for all that came while the last one ran. A thousand waiters timing out at once each
    waited for one of the store's few pool connections, past their deadlines."""

    def __init__(self, backend: LeaseMode) -> None:
        super().__init__()
        self._backend = backend

    async def run(self, items: list[tuple[str, tuple[Claim, str]]]) -> dict[str, bool]:
        b = self._backend
        claims = [item for _, item in items]
        found: dict[str, bool] = await b._tx(lambda: b.ops.abandon_settled(claims), tx=b._in_tx("abandon"))
        return found


class LeaseMode(SqlBase):
    """Lease rows; the dialect gives the push that wakes waiters (``_lease_wait`` and the hooks below)."""

    capabilities = Capabilities(modes=frozenset(Mode), fair=True, needs_renewal=True, elections=True, downgrade=True)
    #: the lease protocol the dialect runs (its subclass sets ``protocol``)
    ops: tx.TxOps | ac.AutocommitOps

    def __init__(self, config: StoreConfig, driver: type[SqlDriver]) -> None:
        super().__init__(config, driver)
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
        """Does ``operation``'s script need the driver's BEGIN/COMMIT (see ``LeaseOps.own_tx``)?"""
        return operation not in self.ops.own_tx

    # -- wake-up hooks (the dialect) --------------------------------------------------------------------------
    async def _lease_wait(self, attempt: LeaseAttempt, grant: Grant, timeout: float | None) -> None:
        raise NotImplementedError

    def _pushed(self) -> bool:
        """Whether releases in other processes wake this store's waiters now (PostgreSQL: LISTEN is on)."""
        return False

    #: a release elsewhere wakes this store's first queued waiter wherever it waits (PostgreSQL: the listener
    #: wakes it through ``wakers``), not only while it waits on the dialect's own push (MySQL's bell)
    push_wakes_head_anywhere = False

    async def keep_queued(self, token: str) -> bool:
        """Keep the queue entry of a waiting ``token`` alive; False if it ran out. The store's waiters that
        only keep their place share one UPDATE: a call within a slice of the last batch that kept this token
        returns at once, any other runs a batch for every such waiter not kept in the last half slice."""
        with self._mutex:
            self._keeping.setdefault(token, None)
        async with self._keep_io:
            with self._mutex:
                last = self._keeping.get(token, None)
                if last is not None and monotonic() - last < LEASE_WAIT_SLICE:
                    return last > 0
                due = [t for t, at in self._keeping.items() if at is None or monotonic() - at >= LEASE_WAIT_SLICE / 2]
            sent = monotonic()
            alive: dict[str, float] = await self._tx(lambda: self.ops.keep(due), tx=self._in_tx("keep"))
            with self._mutex:
                for t in due:
                    if t in self._keeping:
                        self._keeping[t] = sent if t in alive else -sent  # negative: found gone
                        if t in alive:
                            self._kept[t] = (alive[t], sent)
        return token in alive

    async def abandon_settled(self, claim: Claim, key: str) -> bool:
        """Clean up after a claim whose last try was answered (the protocol's ``abandon_settled``); True if
        something of it was deleted. The store's claims that give up together share one transaction (``_Abandons``)."""
        try:
            found: bool = await self._abandons(claim.token, (claim, key), self._deadline())
        except TimeoutError:
            raise BackendError(f"database call timed out ({self.describe()})", backend=self.scheme) from None
        return found

    def kept_stamp(self, token: str) -> tuple[float, float] | None:
        """The deadline the last batch wrote on ``token``'s entry and when that batch was sent, once: like a
        refused try's, what a hand-over's stamp is compared with (``LeaseAttempt._handed_over``)."""
        with self._mutex:
            return self._kept.pop(token, None)

    def unkeep(self, token: str) -> None:
        with self._mutex:
            self._keeping.pop(token, None)
            self._kept.pop(token, None)

    # -- direct hand-over (``AutocommitOps.release``) -------------------------------------------------------
    def expect_handover(self, token: str, waker: rt.Waker) -> None:
        with self._mutex:
            self._handing[sn.token_digest(token)] = (token, waker)

    def forget_handover(self, token: str) -> None:
        with self._mutex:
            if self._handing.pop(sn.token_digest(token), None) is not None:
                self._handed.pop(token, None)

    def _handed_on(self, key: str, handed: sn.HandOver) -> None:
        """A release (ours, or another process's NOTIFY) granted ``key`` to a waiter: if it is one of ours, keep
        the hand-over for its next try and wake it; wake the name's observers; not the other waiters, none of
        which can get the name before the new holder lets go (its release wakes them; if it died, its row ends
        at its queue deadline, and they look again at their wait slice)."""
        with self._mutex:
            waiting = self._handing.get(handed.digest)
            if waiting is not None:
                self._handed[waiting[0]] = handed
        if waiting is not None:
            waiting[1].notify()
        self.wakers.wake_observers(key)

    def take_handover(self, token: str) -> sn.HandOver | None:
        with self._mutex:
            return self._handed.pop(token, None)

    async def _granted(self, claim: Claim, key: str) -> None:
        """After a grant (MySQL takes the companion lock here; an election's grant wakes local observers)."""
        if claim.value is not None:
            self.wakers.wake(key)

    async def _released(self, tokens: Sequence[str], key: str) -> None:
        """After a release/abandon/break: wake the local waiters (and ring the bell)."""
        self.wakers.wake(key)

    async def _forget_bells(self, tokens: Sequence[str]) -> None:
        """Holdings that ran out keep no companion lock (MySQL)."""

    # -- the backend interface -------------------------------------------------------------------------
    def attempt(self, claim: Claim) -> AsyncAttempt:
        self._check_record(claim.name, claim.record if claim.value is not None else None)
        if claim.mode is Mode.SEMAPHORE:
            self._check_weights(claim.name)
        return LeaseAttempt(self, claim)

    def _needs(self, present: bool, missing: str, name: str) -> None:
        """``UnsupportedFeature`` for a call that needs columns an older table lacks (``missing`` says which)
        where this store's role could not add them at open (``schema.py``)."""
        if not present:
            raise UnsupportedFeature(
                f"{missing} and this role could not add it: run `distlock init` as the tables' owner",
                name=name,
                backend=self.scheme,
            )

    def _check_weights(self, name: str) -> None:
        missing = f"the tables {self.prefix}_holders and {self.prefix}_queue have no semaphore columns"
        self._needs(self.ops.weights, missing, name)

    async def set_permits(self, name: str, permits: int) -> bool:
        self._check_weights(name)
        key = sn.name_key(name)
        for _ in range(3):  # the name's lock busy (MySQL: another acquire's transaction held it past name_wait)
            ok: bool | None = await self._tx(
                lambda: self.ops.set_permits(name, permits), tx=self._in_tx("set_permits")
            )
            if ok is not None:
                if ok:
                    self.wakers.wake(key)  # this store's waiters; other processes': PostgreSQL's NOTIFY, MySQL's poll
                return ok
        raise BackendError(f"the name's lock stayed busy ({self.describe()})", name=name, backend=self.scheme)

    def _check_record(self, name: str, record: str | None) -> None:
        if record is not None and self.dialect.name != "postgres" and len(record) > sq.OWNER_CHARS:
            raise ConfigError(
                f"the owner id and election value take {len(record)} characters; the MySQL lease table keeps "
                f"{sq.OWNER_CHARS} (use a shorter value)",
                name=name,
                backend=self.scheme,
            )

    async def proclaim(self, claim: Claim, value: str) -> bool:
        record = replace(claim, value=value).record
        self._check_record(claim.name, record)
        key = sn.name_key(claim.name)
        ok: bool = await self._tx(lambda: self.ops.proclaim(claim, key, record))
        if ok:
            self.wakers.wake(key)
        return ok

    async def watch(self, name: str) -> AsyncWatch:
        watch = _Watch(self, sn.name_key(name))
        await self._arm_push()
        return watch

    async def latch_watch(self, name: str) -> AsyncWatch:
        """A latch's waiters are woken where a name's observers are: this store's own count-down to zero at
        once, another process's by the dialect's push (PostgreSQL's NOTIFY), else a poll."""
        watch = _Watch(self, sl.wake_key(sn.name_key(name)))
        await self._arm_push()
        return watch

    def _latch_woken(self, key: str) -> None:
        self.wakers.wake(key)

    async def _arm_push(self) -> None:
        """Before an observer's first read: make sure the dialect's push is on (PostgreSQL: LISTEN)."""

    def _observe_slice(self) -> float:
        """How long an observer may wait before it reads again: the dialect's push says (see ``_Watch``)."""
        return AsyncWatch.POLL

    async def _release(self, claim: Claim) -> bool:
        key = sn.name_key(claim.name)
        ok, handed = await self._tx(lambda: self.ops.release(claim, key), tx=False)
        if handed is None:
            await self._released([claim.token], key)
        else:
            self._handed_on(key, handed)
        return bool(ok)

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        if not claims:
            return []
        share = RENEW_SHARE * min(c.ttl for c in claims)
        result: list[bool] = []
        for attempt in range(2):
            try:
                with Budget(share):  # a silent connection costs one try; the second runs on a fresh one
                    renewed = await self._tx(lambda: self.ops.renew(claims), tx=self._in_tx("renew"))
                result = told(self, claims, renewed)
                break
            except BackendError:
                if attempt:
                    raise
        await self._maybe_sweep()
        with self._mutex:
            result = [ok or c.token in self._releasing for c, ok in zip(claims, result, strict=True)]
        gone = [c.token for c, ok in zip(claims, result, strict=True) if not ok]
        if gone:
            await self._forget_bells(gone)
        return result

    async def _maybe_sweep(self) -> None:
        """Every SWEEP_EVERY seconds, from the renewer: remove expired rows and free names' rows."""
        if monotonic() - self._swept < SWEEP_EVERY:
            return
        self._swept = monotonic()
        try:
            await self._tx(lambda: self.ops.sweep())
        except BackendError as exc:
            log.debug("sweep failed: %s", exc)

    async def holds(self, claim: Claim) -> bool:
        ok: bool = await self._tx(lambda: self.ops.holds(claim), tx=False)
        return ok

    async def shorten(self, claim: Claim, ttl: float) -> bool:
        # the renewal statement is the guarded step: our token, a live lease only, expires_at on the server's clock
        short = [replace(claim, ttl=ttl)]
        ((ok, _),) = await self._tx(lambda: self.ops.renew(short), tx=self._in_tx("renew"))
        await self._forget_bells([claim.token])  # MySQL: waiters then look again and wait for the row's end
        return bool(ok)

    async def inspect(self, name: str) -> LockInfo | None:
        infos = await self._tx(lambda: self.ops.inspect([name]), tx=False)
        return infos[0] if infos else None

    async def list(self, prefix: str) -> list[LockInfo]:
        infos: list[LockInfo] = await self._tx(lambda: self.ops.inspect(None, prefix), tx=False)
        return infos

    async def request_release(self, name: str, reason: str) -> bool:
        self._needs(self.ops.asks, f"the table {self.prefix}_holders has no asked column", name)
        request = f"{ids.new_token()[:12]}|{reason}"
        asked: bool = await self._tx(lambda: self.ops.ask(name, request), tx=False)
        return asked

    async def break_lock(self, name: str) -> bool:
        tokens: list[str] = await self._tx(lambda: self.ops.break_lock(name), tx=self._in_tx("break_lock"))
        await self._released(tokens, sn.name_key(name))
        for token in tokens:
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

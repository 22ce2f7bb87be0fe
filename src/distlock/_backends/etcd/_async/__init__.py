"""etcd v3 backend (``etcd://h1:2379,h2:2379``, ``etcds://`` for TLS): the layout of etcd's Go Mutex.

Here: ``Backend``, the store's view: the holdings of this store (token -> key), release, renewal and the key
check that goes with it, ``extend`` past a lease's TTL and ``shorten`` (the key's move to another lease is
``moves.py``), an election leader's ``proclaim``, and ``guard``. The rest of the folder is mapped in ``distlock/_backends/etcd/__init__.py`` (docs/etcd.md has the whole design).

The store's renewer keeps all held leases alive with one keepalive stream request per tick (a batch of
lease ids), plus one read-only txn that checks the keys are still there (an admin ``etcdctl del`` is seen).
That check also reads each key's mod revision: one past the holder's own last write is a release request
(``request_release`` puts it into the key's value, on the holder's lease), whose reason one more read fetches
only then.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...._async.backend import AsyncBackend, AsyncPrefixWatch, AsyncWatch
from ...._async.batch import Batched
from ...._core.latch import LatchState
from ...._core.timing import monotonic
from ...._core.types import Capabilities, Claim, LockInfo, Mode, PrimitiveInfo, primitive_infos
from ...._errors import BackendError, NotHeld, UnsupportedFeature
from ...._url import StoreConfig
from .. import keys, ops, records
from ..guard import EtcdGuard
from . import admin, barrier, latch
from .gateway import FAST_TRY, Denied, Gateway, denied
from .leases import LeasePool
from .moves import Moves
from .mutex import Attempt, Entry
from .waits import Waits
from .watch import PrefixWatch, Watch

if TYPE_CHECKING:
    from ...._async.locks import AsyncLock

log = logging.getLogger("distlock")


def guard(lock: AsyncLock) -> EtcdGuard:
    """The ``EtcdGuard`` of the calling owner's current holding of ``lock`` (an etcd store's lock)."""
    backend = lock._acquirer.backend
    if not isinstance(backend, Backend):
        raise UnsupportedFeature("guard() needs a lock of an etcd store", name=lock.name, backend=backend.scheme)
    fence = lock.fence
    if fence is None:
        raise NotHeld("guard() of a lock this owner does not hold", name=lock.name, backend=backend.scheme)
    return backend._guard_for(lock.name, fence)


class _Drops(Batched[bytes, tuple[int, float], bool]):
    """The clean-ups of a store's waiters that give up together (key -> its create revision and the clean-up's
    budget): one txn for all the keys that came while the last one ran, instead of one delete each."""

    def __init__(self, gw: Gateway) -> None:
        super().__init__()
        self._gw = gw

    async def run(self, items: list[tuple[bytes, tuple[int, float]]]) -> dict[bytes, bool]:
        budget = min(op_timeout for _, (_, op_timeout) in items)
        return await self._gw.delete_all_if_created([(key, rev) for key, (rev, _) in items], op_timeout=budget)


class Backend(AsyncBackend):
    capabilities = Capabilities(
        modes=frozenset(Mode), fair=True, always_fair=True, needs_renewal=True, elections=True, downgrade=True
    )
    fork_owned = True

    def __init__(self, config: StoreConfig, gw: Gateway) -> None:
        super().__init__(config)
        self.gw = gw
        self.leases = LeasePool(gw)
        self.waits = Waits(gw)
        self.moves = Moves(gw, self.leases)
        self._mutex = threading.Lock()
        self._entries: dict[str, Entry] = {}
        self._released: dict[str, None] = {}  # tokens released lately, oldest first
        #: per semaphore name, the newest record with its terms this store read (``mutex.py``: a create copies the
        #: terms from it, guarded by it being unchanged, without reading the queue first)
        self._sem_seen: dict[str, records.Contender] = {}
        #: waiters' keys to delete when they give up, together (``drop_key``)
        self._drops = _Drops(gw)

    @classmethod
    async def open(cls, config: StoreConfig) -> Backend:
        return cls(config, await Gateway.open(config))

    def name_refused(self, name: str) -> str | None:
        return keys.name_refused(name)

    def after_fork(self) -> None:
        """The child's requests go on connections of its own and its keys on leases of its own; the parent's
        keys, leases and streams are never touched from the child (its holdings were the parent's)."""
        super().after_fork()
        self.gw.client.after_fork()
        self.leases.after_fork()
        self.waits.after_fork()
        self._mutex = threading.Lock()
        self._entries, self._released, self._sem_seen = {}, {}, {}

    def attempt(self, claim: Claim) -> Attempt:
        return Attempt(self, claim)

    async def drop_key(self, key: bytes, rev: int, op_timeout: float) -> bool:
        """Delete a waiter's key that still has create revision ``rev`` (an abandon); whether it did. The
        store's waiters that give up together share one txn (``_Drops``)."""
        try:
            dropped: bool = await self._drops(key, (rev, op_timeout), monotonic() + op_timeout)
        except TimeoutError:
            raise BackendError("etcd: the clean-up ran out of time", backend=self.scheme) from None
        return dropped

    # -- the holdings of this store ----------------------------------------------------------------------
    def adopt(self, entry: Entry) -> None:
        """A granted key (``mutex.py``) becomes a holding of this store until it is released."""
        with self._mutex:
            self._entries[entry.token] = entry

    def sem_seen(self, name: str, record: records.Contender | None = None) -> records.Contender | None:
        """The record of the semaphore ``name`` a create may copy its terms from (``record``: remember this one,
        the newest that carries them in a read; None: only look)."""
        with self._mutex:
            if record is not None:
                self._sem_seen.pop(name, None)
                self._sem_seen[name] = record
                if len(self._sem_seen) > 1024:
                    del self._sem_seen[next(iter(self._sem_seen))]
            return self._sem_seen.get(name)

    def _entry(self, claim: Claim) -> Entry | None:
        with self._mutex:
            return self._entries.get(claim.token)

    def entry_of(self, token: str | None) -> Entry | None:
        """The key of a live holding of this store (a downgrade's read looks for its write's)."""
        with self._mutex:
            return None if token is None else self._entries.get(token)

    def _under(self, entry: Entry) -> Entry | None:
        """The write holding a downgrade's read was taken under, until that write's release moved its key onto the
        read's lease. The read stands on that key: a writer queued between the two would hold without it (a later
        key never holds under the queue's order), so the read ends with it (docs/models/rwlock_downgrade.pml)."""
        with self._mutex:
            return None if entry.companion is None else self._entries.get(entry.companion)

    def _guard_for(self, name: str, fence: int) -> EtcdGuard:
        with self._mutex:
            for e in self._entries.values():
                if e.name == name and e.rev == fence:
                    return EtcdGuard(e.key, e.rev)
        raise NotHeld("no current holding with this fence", name=name, backend=self.scheme)

    # -- the backend interface ---------------------------------------------------------------------------
    def lease_end(self, claim: Claim) -> float | None:
        """The local end of the holding's own etcd lease: the send time of its last confirmed keepalive (or
        grant) + the TTL the server granted - the drift margin. Tighter than the store's own count when a
        pooled lease was confirmed before the acquire started."""
        entry = self._entry(claim)
        if entry is None:
            return None
        under = self._under(entry)
        # a downgrade's read ends no later than the write key it stands on, until that key is on its own lease
        return entry.lease.end() if under is None else min(entry.lease.end(), under.lease.end())

    async def release(self, claim: Claim, op_timeout: float | None = None) -> bool:
        """Delete the key if it is still this holding's, and keep its lease for the next claim; a key that
        is gone already (lost, broken) takes its lease with it. ``op_timeout``: a clean-up's own budget."""
        with self._mutex:
            entry = self._entries.get(claim.token)
            if entry is None:
                return False
            entry.releasing = True  # a renewal racing with this release must not report the holding lost
            under = next((e for e in self._entries.values() if e.companion == claim.token), None)
        if under is not None:
            return await self._release_under(entry, under)
        try:
            deleted = await self.gw.delete_if_created(entry.key, entry.rev, op_timeout=op_timeout)
        finally:
            self._forget(claim.token)
            with self._mutex:  # a record about to go is no record to copy terms from
                seen = self._sem_seen.get(entry.name)
                if seen is not None and seen.key == entry.key:
                    del self._sem_seen[entry.name]
        if deleted and not entry.keeps:
            self.leases.give_back(entry.lease)
            return True
        # (a downgrade's read: the write key it kept is on this lease and goes with it)
        await self.leases.revoke(entry.lease.id, op_timeout=op_timeout)
        return deleted

    def _forget(self, token: str) -> None:
        with self._mutex:
            self._entries.pop(token, None)
            # a renewal tick that picked this holding before the release finished must not call it lost
            self._released[token] = None
            if len(self._released) > 256:
                del self._released[next(iter(self._released))]

    async def _release_under(self, entry: Entry, under: Entry) -> bool:
        """Release a write holding that a read of the same owner was taken under (a downgrade): its key stays in
        its place in the queue, moved onto the read's lease, until that read's release. A writer queued behind
        it (ahead of the read) would hold once it went, the read notwithstanding: under the queue's order a
        later key never holds, and this read does."""
        try:
            moved = await self.moves.move(entry, under.lease)
        finally:
            self._forget(entry.token)
        if moved:
            under.keeps.append((entry.key, entry.rev))
            self.leases.give_back(entry.lease)
        else:
            await self.leases.revoke(entry.lease.id)
        return moved

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        with self._mutex:
            released = [c.token in self._released for c in claims]
        entries = [self._entry(c) for c in claims]
        for c, e in zip(claims, entries, strict=True):
            if e is not None and ops.lease_ttl_seconds(c.ttl) > e.lease.ttl:
                await self.moves.relet(e, c.ttl)
        live = [e for e in entries if e is not None]
        if not live:
            return released
        sent, ttls = await self.leases.renew(e.lease for e in live)
        # a downgrade's read is held only while the write key it stands on is there (``_under``)
        unders = [u for e in live if (u := self._under(e)) is not None]
        checks = [{"request_range": ops.range_op(e.key)} for e in [*live, *unders]]
        present: set[tuple[bytes, int]] = set()
        written: dict[bytes, int] = {}
        for r in await self.gw.txn_each(checks, try_timeout=FAST_TRY):
            for kv in ops.kvs_of(r):
                key = ops.unb64(kv.get("key"))
                present.add((key, int(kv.get("create_revision") or 0)))
                written[key] = int(kv.get("mod_revision") or 0)
        asked = [e for e in live if written.get(e.key, 0) > max(e.rev, e.mod) and (e.key, e.rev) in present]
        if asked:
            try:
                await self._asked(asked)
            except (BackendError, Denied) as exc:  # a request never costs a holding: the next renewal reads again
                log.debug("etcd: could not read a release request: %s", exc)
        out = []
        for e, gone in zip(entries, released, strict=True):
            ok = e is not None and (e.releasing or (ttls.get(e.lease.id, 0) > 0 and (e.key, e.rev) in present))
            under = None if e is None else self._under(e)
            if ok and under is not None and not under.releasing and (under.key, under.rev) not in present:
                ok = False  # the write key under this read went (revoked, deleted) before its release moved it
            if ok and e is not None and ttls.get(e.lease.id, 0) > 0:
                e.lease.confirm(sent, ttls[e.lease.id])
            out.append(ok or gone)
        await self.leases.revoke_stale()
        return out

    async def _asked(self, entries: Sequence[Entry]) -> None:
        """Holders whose key someone else wrote: read the values, and tell each release request found there."""
        reads = [{"request_range": ops.range_op(e.key, keys_only=False)} for e in entries]
        for e, r in zip(entries, await self.gw.txn_each(reads, try_timeout=FAST_TRY), strict=True):
            for kv in ops.kvs_of(r):
                if int(kv.get("create_revision") or 0) != e.rev:
                    continue
                mod = int(kv.get("mod_revision") or 0)
                e.mod = max(e.mod, mod)
                reason = records.revoke_reason(ops.unb64(kv.get("value")))
                if reason is not None:
                    self.revoked(e.token, f"m{mod}", reason)

    async def request_release(self, name: str, reason: str) -> bool:
        return await admin.request_release(self.gw, name, reason)

    async def shorten(self, claim: Claim, ttl: float) -> bool:
        """The holding's key onto a fresh lease of ``ttl`` that nobody keeps alive (``Moves.shorten``)."""
        with self._mutex:
            entry = self._entries.pop(claim.token, None)
        return False if entry is None else await self.moves.shorten(entry, ttl)

    async def holds(self, claim: Claim) -> bool:
        entry = self._entry(claim)
        if entry is None:
            return False
        data = await self.gw.call("/v3/kv/range", ops.range_op(entry.key))
        return any(int(kv.get("create_revision") or 0) == entry.rev for kv in data.get("kvs") or [])

    async def inspect(self, name: str) -> LockInfo | None:
        return await admin.inspect(self.gw, self.leases, name)

    async def set_permits(self, name: str, permits: int) -> bool:
        return await admin.set_permits(self.gw, self.leases, name, permits)

    async def proclaim(self, claim: Claim, value: str) -> bool:
        """Go's ``Election.Proclaim``: put the new value on the leader's key and lease, if the key still has
        the leadership's create revision (the term); the put keeps that revision."""
        entry = self._entry(claim)
        if entry is None:
            return False
        raw = value.encode("utf-8")
        # what a later move to a longer lease (``Moves.relet``) writes; set first, so it never writes the old value
        entry.value = raw
        try:
            data = await self.gw.call(
                "/v3/kv/txn",
                {
                    "compare": [ops.create_is(entry.key, entry.rev)],
                    "success": [ops.put_op(entry.key, raw, entry.lease.id)],
                },
            )
        except Denied as exc:
            raise denied(exc, claim.name, self.gw.username, f"write {entry.key.decode('utf-8', 'replace')!r}") from None
        if data.get("succeeded"):  # the leader's own write: its mod revision is no release request
            entry.mod = max(entry.mod, int((data.get("header") or {}).get("revision") or 0))
        return bool(data.get("succeeded"))

    async def watch(self, name: str) -> AsyncWatch:
        try:
            return await Watch.open(self.gw, name)
        except Denied as exc:
            raise denied(exc, name, self.gw.username, f"watch {name + '/'!r}") from None

    async def watch_prefix(self, prefix: str) -> AsyncPrefixWatch:
        try:
            return await PrefixWatch.open(self.gw, prefix)
        except Denied as exc:
            raise denied(exc, None, self.gw.username, f"watch the keys under {prefix!r}") from None

    async def break_lock(self, name: str) -> bool:
        _, holders, _, _ = await admin.snapshot(self.gw, name)
        if not holders:
            return False
        try:
            await self.gw.txn_each([ops.delete_op(h.key) for h in holders])
        except Denied as exc:
            raise denied(exc, name, self.gw.username, f"delete keys under {name + '/'!r}") from None
        broken = {(h.key, h.rev) for h in holders}
        with self._mutex:
            mine = [t for t, e in self._entries.items() if (e.key, e.rev) in broken]
        for h in holders:
            if h.lease:
                await self.leases.revoke(h.lease)  # the holder's keepalive now fails: it learns it lost the lock
        for token in mine:
            self.lost(token, "broken by an admin (break_lock)")
        return True

    async def list_primitives(self, prefix: str) -> Sequence[PrimitiveInfo] | None:
        try:
            latches = await latch.listing(self.gw, prefix)
            return primitive_infos(latches, await barrier.listing(self.gw, prefix), prefix)
        except Denied:
            return None  # a role that may not read the latches' and barriers' prefixes: nothing to show

    def latch_refused(self) -> str | None:
        return None

    async def latch_open(self, name: str, count: int | None, round_id: str) -> LatchState | None:
        return await latch.open_latch(self.gw, name, count, round_id)

    async def latch_count_down(self, name: str, round_id: str, step: str, linger: float) -> int:
        return await latch.count_down(self.gw, name, round_id, step, linger)

    async def latch_watch(self, name: str) -> AsyncWatch:
        return await latch.watch(self.gw, name)

    def barrier_refused(self, kind: str) -> str | None:
        return None

    async def barrier_read(self, kind: str, name: str) -> tuple[bytes | str | None, object]:
        return await barrier.read(self.gw, kind, name)

    async def barrier_cas(self, kind: str, name: str, version: object, data: str | None, keep_ms: int) -> bool:
        return await barrier.cas(self.gw, kind, name, version, data)

    async def list(self, prefix: str) -> list[LockInfo]:
        return await admin.list_held(self.gw, self.leases, prefix)

    async def aclose(self) -> None:
        await self.waits.aclose()
        await self.leases.aclose()
        await self.gw.client.aclose()


__all__ = ["Backend", "EtcdGuard", "guard"]

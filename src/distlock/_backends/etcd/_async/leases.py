"""etcd leases: the one place where a lease is granted, kept alive, revoked and its local end counted.

etcd's Go ``concurrency.Session`` is one lease and its keepalive, apart from the ``Mutex`` that puts keys on
it. Here too the leases are apart from the queue (``mutex.py``), with one difference (F14 in
docs/safety.md): every claim gets a lease of its own, so two lock objects of one process never share one.

Leases are pooled: a released claim's lease goes back to a small pool and the next claim with the same TTL
reuses it if enough of it is left, which saves the grant and revoke writes of the uncontended path.
Who keeps which lease alive:

* the store's renewer, every tick, all held leases and the free ones of the pool in one keepalive stream
  request (``LeasePool.renew``; the backend then checks the keys are still there);
* a waiter, its own queue entry's lease, while it waits (``LeasePool.refresh_waiting`` from ``mutex.py``),
  together with the leases of the store's other waiters that are due soon: one request for a process's
  whole line of waiters, not one per waiter;
* an aged free lease is refreshed when it is taken from the pool, which beats a grant (no raft write).

A lease's local end (``Lease.end``) counts from the moment the request that confirmed it was *sent*, so
it never outlives the server's. Leases dropped from the pool, and every free one at close, are revoked off
the acquire/release path.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .... import _rt_async as rt
from ...._core.timing import lease_end, monotonic, renew_interval
from ...._errors import BackendError
from .. import ops
from .gateway import FAST_TRY, NOT_FOUND, Gateway

#: free leases kept per TTL for reuse
_POOL_SIZE = 8


@dataclass
class Lease:
    id: int
    ttl: int  # what the server granted (it raises tiny TTLs to its minimum)
    confirmed: float  # monotonic time the last grant/keepalive was *sent*: the lease runs at least until + ttl

    def left(self, now: float) -> float:
        return self.confirmed + self.ttl - now

    def end(self) -> float:
        """The local end of this lease: no later than the server's, by the drift margin."""
        return lease_end(self.confirmed, self.ttl)

    def due(self) -> float:
        """When whoever keeps this lease alive should send the next keepalive (a third of the TTL on)."""
        return self.confirmed + renew_interval(self.ttl)

    def confirm(self, sent: float, ttl: int) -> None:
        """A keepalive sent at ``sent`` was answered with ``ttl`` (> 0)."""
        self.confirmed = max(self.confirmed, sent)
        self.ttl = min(self.ttl, ttl)  # the server's word, in case it ever answers less than it granted


class LeasePool:
    """The lease calls of one store (grant, keepalive, revoke, time to live) and its pool of free leases."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self._mutex = threading.Lock()
        self._pool: dict[int, list[Lease]] = {}
        self._stale: list[int] = []  # lease ids dropped from the pool, to revoke
        self._waiting: dict[int, Lease] = {}  # the leases of this store's waiters, while they wait
        self._refreshing = rt.Mutex()

    def after_fork(self) -> None:
        """The free leases of the pool are the parent's: a child that put its keys on one would share it with
        the parent, which may revoke it or let it run out; and the parent's stale ones are its to revoke. The
        child grants its own (and never revokes one of the parent's)."""
        self._mutex = threading.Lock()
        self._pool, self._stale, self._waiting = {}, [], {}
        self._refreshing = rt.Mutex()

    # -- the lease API -----------------------------------------------------------------------------------
    async def keepalive(self, ids: Sequence[int], op_timeout: float | None = None) -> dict[int, int]:
        """One request for many leases (the gateway streams one answer per id): id -> TTL (0: gone).

        The answer confirms the leases from the moment the *first* try was sent, which is no later than the
        try the server answered: a caller that counts from its own send time never outlives the server."""
        if not ids:
            return {}
        gw = self.gw
        body = "\n".join(json.dumps({"ID": str(i)}) for i in ids)
        op_timeout = gw.op_timeout if op_timeout is None else op_timeout
        deadline = monotonic() + op_timeout
        while True:
            # a healthy leader answers keepalives in milliseconds: give up on a member sooner than usual
            left = max(0.05, deadline - monotonic())
            data = await gw.call("/v3/lease/keepalive", body, try_timeout=FAST_TRY, op_timeout=left)
            out: dict[int, int] = {}
            failed = ""
            for msg in data.get("_messages", [data]):
                result = msg.get("result")
                if isinstance(result, dict) and "ID" in result:
                    out[int(result["ID"])] = int(result.get("TTL") or 0)
                else:  # an error inside the stream (no leader right now): not an answer about the lease
                    failed = str(msg.get("error", msg))[:200]
            if not failed and len(out) == len(ids):
                return out
            if monotonic() >= deadline:
                raise gw.error(f"lease keepalive failed: {failed or 'incomplete answer'}")
            gw.rotate(gw.base)
            await rt.sleep(0.05)

    async def refresh(self, lease: Lease, op_timeout: float | None = None) -> bool:
        """Keep one lease alive now; False if the server no longer has it."""
        sent = monotonic()
        ttl = (await self.keepalive([lease.id], op_timeout=op_timeout)).get(lease.id, 0)
        if ttl <= 0:
            return False
        lease.confirm(sent, ttl)
        return True

    def waiting(self, lease: Lease, on: bool) -> None:
        """A waiter starts (``on``) or stops waiting on ``lease``: while it waits, the other waiters'
        keepalives (``refresh_waiting``) take it along."""
        with self._mutex:
            if on:
                self._waiting[lease.id] = lease
            else:
                self._waiting.pop(lease.id, None)

    async def refresh_waiting(self, lease: Lease, op_timeout: float | None = None) -> bool:
        """Keep a waiter's lease alive now, with every other waiting lease (``waiting``) that is due within
        half a renewal interval, in one request; False if the server no longer has ``lease``. A waiter whose
        lease another's request took along meanwhile sends nothing. Only leases whose waiters are waiting
        are taken along: a waiter that gave up or died stops being kept alive with it."""
        async with self._refreshing:
            now = monotonic()
            if lease.due() > now:
                return True  # a request of another waiter kept it alive meanwhile
            with self._mutex:
                others = [
                    other
                    for other in self._waiting.values()
                    if other is not lease and other.due() - now < renew_interval(other.ttl) / 2
                ]
            sent = monotonic()
            ttls = await self.keepalive([lease.id] + [o.id for o in others], op_timeout=op_timeout)
            for other in others:
                if ttls.get(other.id, 0) > 0:  # a dead one is its waiter's to find (it refreshes it itself)
                    other.confirm(sent, ttls[other.id])
            if ttls.get(lease.id, 0) <= 0:
                return False
            lease.confirm(sent, ttls[lease.id])
            return True

    async def revoke(self, lease: int, op_timeout: float | None = None) -> bool:
        """Revoke a lease (deleting its keys); an unknown lease is fine. Best effort: False if it failed."""
        try:
            await self.gw.call("/v3/lease/revoke", {"ID": str(lease)}, ok_codes=(NOT_FOUND,), op_timeout=op_timeout)
        except BackendError:
            return False  # it expires by its TTL
        return True

    async def time_to_live(self, lease: int) -> int:
        """The seconds the server still gives a lease (someone else's, for ``inspect``)."""
        data = await self.gw.call("/v3/lease/timetolive", {"ID": str(lease)})
        return int(data.get("TTL") or 0)

    # -- the pool ----------------------------------------------------------------------------------------
    async def take(self, ttl: float, fresh: bool = False, op_timeout: float | None = None) -> Lease:
        """A lease for a new claim: a free one with enough left (refreshed if aged), else a new grant."""
        want = ops.lease_ttl_seconds(ttl)
        now = monotonic()
        enough = max(ttl * 2.0 / 3.0, 0.5)
        refresh: Lease | None = None
        with self._mutex:
            pool = self._pool.get(want, [])
            while pool and not fresh:
                lease = pool.pop()
                if lease.left(now) >= enough:
                    return lease
                if lease.left(now) >= 1.0:
                    refresh = lease  # alive but aged (nothing held kept it alive): one keepalive renews it
                    break
                self._stale.append(lease.id)  # about to expire: revoked by the next renewal tick or close()
        # a keepalive is answered by the leader without a raft write, unlike a grant (and the revoke of the
        # old lease it would need)
        if refresh is not None and await self.refresh(refresh, op_timeout=op_timeout):
            return refresh
        sent = monotonic()
        data = await self.gw.call("/v3/lease/grant", {"TTL": str(want)}, op_timeout=op_timeout)
        return Lease(int(data["ID"]), int(data.get("TTL") or want), sent)

    def give_back(self, lease: Lease) -> None:
        """A lease whose key is gone, for the next claim with its TTL."""
        want = lease.ttl
        with self._mutex:
            pool = self._pool.setdefault(want, [])
            if len(pool) < _POOL_SIZE:
                pool.append(lease)
                return
            self._stale.append(lease.id)  # a full pool: revoked off the acquire/release path

    async def renew(self, held: Iterable[Lease]) -> tuple[float, dict[int, int]]:
        """One keepalive for the held leases and every free one in the pool (they ride along, so they stay
        fresh for the next acquire): the send time and id -> TTL (0: gone). The free ones are confirmed here
        and the dead ones dropped; the held ones are the caller's to confirm."""
        with self._mutex:
            pooled = [lease for pool in self._pool.values() for lease in pool]
        sent = monotonic()
        ttls = await self.keepalive(sorted({lease.id for lease in held} | {lease.id for lease in pooled}))
        dead = set()
        for lease in pooled:
            if ttls.get(lease.id, 0) > 0:
                lease.confirm(sent, ttls[lease.id])
            else:
                dead.add(lease.id)
        if dead:
            with self._mutex:
                for pool in self._pool.values():
                    pool[:] = [lease for lease in pool if lease.id not in dead]
        return sent, ttls

    async def revoke_stale(self) -> None:
        """Revoke the leases dropped from the pool (they hold no key; revoking beats waiting for the TTL)."""
        with self._mutex:
            stale, self._stale = self._stale, []
        for lease in stale:
            await self.revoke(lease, op_timeout=min(1.0, self.gw.op_timeout))

    async def aclose(self) -> None:
        """Revoke the free leases (they would expire by themselves: close() does not wait long for this)."""
        with self._mutex:
            pooled = [lease.id for pool in self._pool.values() for lease in pool] + self._stale
            self._pool.clear()
            self._stale = []
        for lease in pooled:
            if not await self.revoke(lease, op_timeout=min(1.0, self.gw.op_timeout)):
                break

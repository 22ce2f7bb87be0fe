# GENERATED from src/distlock/_backends/etcd/_async/mutex.py by scripts/gen_sync.py: edit that file, not this one.
"""The lock algorithm on etcd: the queue of etcd's Go ``concurrency.Mutex`` and its waits (``mutex.go``,
``key.go``), as one ``Attempt`` per acquisition; the ownership condition (``EtcdGuard``, Go's ``Mutex.IsOwner()``) is
``guard.py`` in the folder above, one class for both sides.

Key layout, records and grant rule are pure and live in the folder above (``keys.py``, ``records.py``,
``semaphore.py``, ``rule.py``; the request bodies in ``ops.py``). In short, a contender is the
key ``NAME/<lease hex>`` (its owner record as the value) on its own lease (``leases.py``); the smallest
create revision holds; a waiter watches only the key just ahead of it; the fence is the create revision of
the holder's key. So an ``etcdctl lock NAME`` or a Go ``concurrency.Mutex`` on the same name and a distlock
lock exclude each other. An election candidate (``claim.value`` set) is the same acquisition with its value
as the key's value instead of the owner record: Go's ``concurrency.Election`` and ``etcdctl elect``, whose
campaign is this queue too.

One try creates the key and reads the queue in one txn (the uncontended path is one request after the
lease). A mutex or write claim reads only the tail of the queue up to its own key (``ops.tail_range``:
its key and the one just ahead), as Go's ``Mutex`` does, so neither the create nor a wake-up grows with the
number of waiters; read claims and semaphores, whose rule looks further ahead, read the whole queue.
After every wake-up the waiter re-reads the queue and requires its own key to still be there
(etcd#11456, F6 in docs/safety.md); if its lease was revoked from outside meanwhile, it queues again at the
back with a fresh lease. A timed-out, cancelled or failed acquire deletes its key (and keeps the lease for
reuse) when it knows the key, and otherwise revokes its lease, which deletes its key even if the create's
reply was lost (F10). A granted key is handed to the backend (``__init__.py``), which keeps it until release.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .... import _rt_sync as rt
from ...._sync.backend import SyncAttempt
from ...._core import arbiter
from ...._core.timing import monotonic
from ...._core.types import Claim, Grant, Mode
from ...._errors import BackendError, ConfigError
from .. import keys, ops, records, rule, semaphore
from .gateway import NOT_FOUND, Denied, denied
from .http import Member
from .leases import Lease

if TYPE_CHECKING:
    from . import Backend

log = logging.getLogger("distlock")

#: budget of the clean-up after a failed acquire (what it leaves goes with its lease's TTL)
_CLEANUP = 2.0


@dataclass
class Entry:
    """One claim's key in the queue (waiting or holding)."""

    name: str
    key: bytes
    rev: int
    lease: Lease
    value: bytes  # what the key holds: the owner record, or an election candidate's value (proclaim replaces it)
    token: str = ""
    releasing: bool = False
    #: a read taken by the write holder of its name (a downgrade): the write holding's token
    companion: str | None = None
    #: keys (key, create revision) on this entry's lease that go with its release: a downgraded write's key,
    #: kept in its place in the queue so that no writer queued behind it gets in while this read holds
    keeps: list[tuple[bytes, int]] = field(default_factory=list)
    #: the key's mod revision as the holder last wrote or read it (its grant, its proclaim, a request already
    #: told): a later one is someone else's write, a release request (``Backend.renew`` reads it)
    mod: int = 0


class Attempt(SyncAttempt):
    backend: Backend

    def __init__(self, backend: Backend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self._prefix = keys.lock_prefix(claim.name)
        self._lease: Lease | None = None
        self._entry: Entry | None = None
        self._watch: tuple[records.Contender, ...] = ()
        self._since = 0
        self._woke: tuple[Member, int] | None = None  # where and at which revision the watch saw the delete
        self._quiet = False  # the last wait ran its whole slice and its watch saw no delete
        self._granted = False  # the backend adopted our key as a holding
        self._deadline: float | None = None  # the acquire's deadline, learned from wait()
        self._try_end = 0.0  # the current try's end: its start + the op timeout, or the deadline if sooner
        # a mutex or write claim waits for whatever is ahead: the tail of the queue up to its key is enough
        self._tail = claim.mode in (Mode.EXCLUSIVE, Mode.WRITE)
        # a semaphore claim reads the records too: the permits each contender takes, the semaphore's terms
        self._sem = claim.mode is Mode.SEMAPHORE

    def _budget(self) -> float:
        """How long the next call of this try may take: what is left of the try (at least a moment)."""
        return max(0.01, self._try_end - monotonic())

    def try_acquire(self) -> Grant:
        """One try, bounded as a whole by the op timeout (``timeout=`` in the URL), and by the acquire's
        deadline once wait() told it: a try that runs into the deadline is a plain "not yet"."""
        self._try_end = monotonic() + self.backend.gw.op_timeout
        if self._deadline is not None:
            self._try_end = min(self._try_end, self._deadline)
        try:
            return self._try()
        except Denied as exc:
            what = f"write {self._prefix.decode('utf-8', 'replace')!r}"
            raise denied(exc, self.claim.name, self.backend.gw.username, what) from None
        except BackendError:
            if self._deadline is not None and monotonic() >= self._deadline:
                return Grant(False)  # ran into the acquire's deadline: the store abandons the attempt
            raise

    def try_late(self) -> Grant:
        """At the deadline: no read if the last wait ran its whole slice and its watch saw no key ahead of ours
        deleted: nothing ahead has gone since the last read, the answer would be "not yet" (a thousand
        waiters timing out together read the queue once each, past their deadlines)."""
        if self._quiet:
            return Grant(False)
        return self.try_acquire()

    def _try(self) -> Grant:
        started = monotonic()
        claim = self.claim
        if self._entry is None:
            queued = self._enqueue()
            if queued is None:
                return Grant(False)
            entry, header_rev, queue = queued
        else:
            entry = self._entry
            data = self._reread(entry.rev)
            header_rev = int(data["header"]["revision"])
            queue = self._queue(data.get("kvs") or [])
            if not any(c.key == entry.key and c.rev == entry.rev for c in queue):
                # Our own key is gone (lease revoked or expired while we waited): never act on the old
                # place in the queue (etcd#11456); queue again at the back with a fresh lease.
                self._drop()
                queued = self._enqueue()
                if queued is None:
                    return Grant(False)
                entry, header_rev, queue = queued
        if self._sem:
            mine = next(c for c in queue if c.key == entry.key)
            # another's record is likelier to outlive our holding (which a later create may then copy from)
            others = [c for c in queue if c.key != entry.key]
            self.backend.sem_seen(claim.name, semaphore.stored_terms(others)[0] or semaphore.stored_terms(queue)[0])
            if semaphore.marked_held(mine):  # a shrink found us within the capacity before it (``set_permits``)
                decision = rule.Decision(True)
            else:
                # our record carries the terms in force (every record does): a resize since may leave us too big
                found = arbiter.terms(claim, semaphore.terms_of(mine.value))
                decision = rule.decide(queue, entry.rev, claim.mode, found.capacity, claim.want)
        else:
            decision = rule.decide(queue, entry.rev, claim.mode, 1)
        if not decision.acquired and claim.companion is not None and self._under_own_writer(queue):
            decision = rule.Decision(True)
        if decision.acquired:
            entry.token = claim.token
            entry.companion = claim.companion
            self.backend.adopt(entry)
            self._granted = True
            self._entry = None
            self._lease = None
            return Grant(True, fence=entry.rev, valid_for=max(0.0, min(claim.ttl, entry.lease.left(started))))
        self._watch = decision.watch
        self._since = header_rev + 1
        return Grant(False)

    def _under_own_writer(self, queue: list[records.Contender]) -> bool:
        """A downgrade: whether this owner's write holding (``claim.companion``) is still in the queue, read after
        our key was put (a tail read may not reach back to it: then the whole queue). It holds the name then,
        so our read may hold too, at once, whoever waits behind it."""
        own = self.backend.entry_of(self.claim.companion)
        if own is None:
            return False
        if not any(c.key == own.key and c.rev == own.rev for c in queue):
            data = self.backend.gw.call("/v3/kv/range", ops.prefix_range(self._prefix), op_timeout=self._budget())
            queue = keys.contenders(self._prefix, data.get("kvs") or [])
        return any(c.key == own.key and c.rev == own.rev for c in queue)

    def _queue(self, kvs: list[dict[str, Any]]) -> list[records.Contender]:
        """The contenders of a queue read; a tail read that cannot be trusted alone (``tail_contenders``) is
        followed by a read of the whole queue."""
        if not self._tail:
            return keys.contenders(self._prefix, kvs)
        # (a tail read, below, is a mutex's or a writer's)
        queue = keys.tail_contenders(self._prefix, kvs)
        if queue is None:
            data = self.backend.gw.call("/v3/kv/range", ops.prefix_range(self._prefix), op_timeout=self._budget())
            queue = keys.contenders(self._prefix, data.get("kvs") or [])
        return queue

    def _reread(self, rev: int) -> dict[str, Any]:
        """The queue after a wake-up (the F6 re-check of our own key is made on it).

        Woken by a watch event, the queue is read where the event came from, ``serializable`` (no quorum
        round), and used only if that member is at least at the event's revision: the state it shows is
        then the cluster's state at a revision committed after our key was created and after the watch
        began, which is what a linearizable read taken then would show. It cannot miss a revocation of
        our own lease that came before the predecessor's delete (events apply in revision order).
        Otherwise (timed out, stream error, member behind): a linearizable read with failover.
        """
        woke, self._woke = self._woke, None
        gw = self.backend.gw
        whole = ops.prefix_range(self._prefix, keys_only=not self._sem)
        body = ops.tail_range(self._prefix, rev) if self._tail else whole
        if woke is not None:
            member, event_rev = woke
            data = gw.read_at(member, {**body, "serializable": True})
            if data is not None and int((data.get("header") or {}).get("revision") or 0) >= event_rev > 0:
                return data
        return gw.call("/v3/kv/range", body, op_timeout=self._budget())

    def _enqueue(self) -> tuple[Entry, int, list[records.Contender]] | None:
        """Create our key (put-if-absent on our own lease) and read the queue, in one txn. A semaphore claim's
        record copies the semaphore's terms from a record it read, and the put is guarded by that record being
        unchanged (``_sem_terms``): so every live record carries the terms in force (``docs/etcd.md``). None
        (nothing written) when that record changed at every try until this try's time ran out."""
        claim = self.claim
        value = records.key_value(claim.owner, claim.mode, claim.permits or 1, claim.value)
        queue_range = {"request_range": ops.prefix_range(self._prefix, keys_only=not self._sem)}
        # Our put comes first in the txn, so our key is the newest: the tail read sees it and the one ahead.
        tail_range = {"request_range": ops.tail_range(self._prefix)} if self._tail else queue_range
        guard: list[dict[str, object]] = []
        seen = self.backend.sem_seen(claim.name) if self._sem else None
        fits = None if seen is None else semaphore.fitting_record(claim, semaphore.terms_of(seen.value))
        if seen is not None and fits is not None:
            # a record this store read lately: our create copies its terms if it is still there unchanged
            guard, value = ops.unchanged(seen, seen.mod), fits
        elif self._sem:
            if claim.permits is None:  # nothing of ours to write before the stored terms are known
                data = self.backend.gw.call(
                    "/v3/kv/range", queue_range["request_range"], op_timeout=self._budget()
                )
                guard, value = self._sem_terms(data.get("kvs") or [], int(data["header"]["revision"]))
            else:  # a free semaphore takes our terms; one in use fails the guard and its read tells us its own
                guard, value = [ops.none_under(keys.sem_range(claim.name))], semaphore.claim_record(claim, None)
        fresh = False
        while True:
            if self._lease is None:
                self._lease = self.backend.leases.take(claim.ttl, fresh=fresh, op_timeout=self._budget())
            lease = self._lease
            key = keys.lock_key(claim.name, claim.mode, lease.id)
            data = self.backend.gw.call(
                "/v3/kv/txn",
                {
                    "compare": [ops.create_is(key, 0), *guard],
                    "success": [ops.put_op(key, value, lease.id), tail_range],
                    # the key exists already: a retried create whose first reply was lost (F8); it is ours
                    "failure": [{"request_range": ops.range_op(key)}, queue_range],
                },
                ok_codes=() if fresh else (NOT_FOUND,),
                op_timeout=self._budget(),
            )
            if int(data.get("code") or 0) == NOT_FOUND:
                # "requested lease not found": a pooled lease revoked from outside; nothing was written
                self._lease, fresh = None, True
                continue
            if data.get("succeeded") or ops.kvs_of((data.get("responses") or [{}])[0]):
                break
            # a semaphore's terms changed since they were read (or it went from free to in use): nothing was
            # written; again with the ones this read shows, or at the next try
            if monotonic() >= self._try_end:
                return None
            try:
                guard, value = self._sem_terms(ops.kvs_of(data["responses"][-1]), int(data["header"]["revision"]))
            except ConfigError:
                self.backend.leases.give_back(lease)  # unused: nothing was put on it
                self._lease = None
                raise
        header_rev = int(data["header"]["revision"])
        responses = data.get("responses") or []
        if data.get("succeeded"):
            rev = header_rev
        else:
            rev = int(ops.kvs_of(responses[0])[0]["create_revision"])
        entry = Entry(claim.name, key, rev, lease, value)
        self._entry = entry
        kvs = ops.kvs_of(responses[-1])
        # the failure branch read the whole queue (keys newer than ours may exist there)
        queue = self._queue(kvs) if data.get("succeeded") else keys.contenders(self._prefix, kvs)
        return entry, header_rev, queue

    def _sem_terms(self, kvs: list[dict[str, Any]], rev: int) -> tuple[list[dict[str, object]], bytes]:
        """From a read (at revision ``rev``) of the queue with its records: the guard of our create and our
        record. The terms are those of the newest record that carries them, and the create puts ours only if
        that record is unchanged; a semaphore with no contender takes ours if it still has none. Keys under
        ``NAME/sem/`` whose values carry no terms (not distlock's): ours if nothing there is written since."""
        queue = keys.contenders(self._prefix, kvs)
        source, terms = semaphore.stored_terms(queue)
        value = semaphore.claim_record(self.claim, terms)
        if source is not None:
            self.backend.sem_seen(self.claim.name, source)
            return ops.unchanged(source, source.mod), value
        under = keys.sem_range(self.claim.name)
        if any(c.mode is Mode.SEMAPHORE for c in queue):
            return [ops.quiet_under(under, rev)], value
        return [ops.none_under(under)], value

    def wait(self, grant: Grant, timeout: float | None) -> None:
        # the store passes what is left of the acquire's timeout: later calls of this attempt stop there
        self._deadline = None if timeout is None else monotonic() + timeout
        self._quiet = False
        entry = self._entry
        if entry is None or not self._watch:
            rt.sleep(0.01)
            return
        gw = self.backend.gw
        leases = self.backend.leases
        lease = entry.lease
        leases.waiting(lease, True)  # taken along by this store's other waiters' keepalives while we wait
        try:
            # keep our place in the queue: a waiter's lease is kept alive by the waiters (holders' by the
            # renewer), in one request for all of this store's waiters that are due soon
            if monotonic() >= lease.due():
                limit = gw.op_timeout if timeout is None else max(0.01, min(gw.op_timeout, timeout))
                try:
                    alive = leases.refresh_waiting(lease, op_timeout=limit)
                except BackendError:
                    if self._deadline is not None and monotonic() >= self._deadline:
                        return  # the store sees the deadline passed and abandons the attempt
                    raise
                if not alive:
                    return  # gone: the next try sees our key missing and queues again
            slice_ = max(0.05, lease.due() - monotonic())
            if timeout is not None:
                slice_ = min(slice_, max(0.0, timeout))
            if slice_ <= 0:
                return
            # one watch stream per store and name, shared by its waiters (``waits.py``), not one per waiter
            targets = {c.key: c.rev for c in self._watch}
            if self._sem:  # a resize (``set_permits``) deletes it to wake us: a larger capacity may let us in
                targets[keys.nudge_key(self.claim.name)] = 0
            end = monotonic() + slice_
            self._woke = self.backend.waits.wait_delete(self._prefix, targets, self._since, slice_)
            # (a wait that returned early without a delete had its stream end: the next try reads again)
            self._quiet = self._woke is None and monotonic() >= end
        finally:
            leases.waiting(lease, False)

    def abandon(self) -> None:
        """Bounded by its own budget (``_CLEANUP``, at most the op timeout): on a silent link, what is left
        goes with the lease, which nobody keeps alive any more (it is never given back to the pool)."""
        backend = self.backend
        budget = min(_CLEANUP, backend.gw.op_timeout)
        end = monotonic() + budget
        if self._granted:
            # Granted, but the caller never took the holding (cancelled as the grant came back): release it
            # like any holding, or it would block the name until its lease ran out (F10).
            self._granted = False
            try:
                backend.release(self.claim, op_timeout=budget)
            except BackendError as exc:
                log.warning("clean-up of a grant nobody took (%r) left to its lease: %s", self.claim.name, exc)
            return
        entry = self._entry
        lease = entry.lease if entry is not None else self._lease
        self._entry = None
        self._lease = None
        if lease is None:
            return
        if entry is not None:
            # We know our key (the create's reply arrived): delete it and keep the lease for the next claim.
            try:
                deleted = backend.drop_key(entry.key, entry.rev, budget)
            except BackendError:
                deleted = False
            if deleted:
                backend.leases.give_back(lease)
                return
        # Revoking deletes our key even if the create's reply never reached us (F10).
        if not backend.leases.revoke(lease.id, op_timeout=max(0.05, end - monotonic())):
            log.warning("clean-up of an abandoned acquire of %r left to its lease's TTL", self.claim.name)

    def _drop(self) -> None:
        """Our key is gone from the queue: revoke the lease it was on (it may be dead already)."""
        lease = self._entry.lease if self._entry is not None else self._lease
        self._entry = None
        self._lease = None
        if lease is not None:
            self.backend.leases.revoke(lease.id)

# GENERATED from src/distlock/_backends/etcd/_async/admin.py by scripts/gen_sync.py: edit that file, not this one.
"""What ``inspect``, ``list``, ``break_lock`` and ``request_release`` read (and write) of a lock's queue on
etcd: everyone's keys, not ours.

Owners come from the values of the keys (JSON written by distlock; an empty value is a Go ``Mutex`` or an
``etcdctl lock``, shown as ``unknown:lease:<hex>``). Any other value is an election candidate's (distlock's,
Go's ``Election``, ``etcdctl elect``): reported as the holder's ``value``, with the owner
``unknown:lease:<hex>``. A user whose role does not cover the names gets a one-line error naming what it may
not read.
"""

from __future__ import annotations

import logging
from typing import Any

from ...._core.types import HolderInfo, LockInfo, Mode
from ...._errors import BackendError
from .. import keys, ops, records, rule, semaphore
from .gateway import MAX_TXN_OPS, Denied, Gateway, denied
from .leases import LeasePool

log = logging.getLogger("distlock")


def _read(gw: Gateway, name: str) -> dict[str, Any]:
    """One range read of ``NAME/`` with the values."""
    prefix = keys.lock_prefix(name)
    try:
        return gw.call("/v3/kv/range", ops.prefix_range(prefix, keys_only=False))
    except Denied as exc:
        raise denied(exc, name, gw.username, f"read {prefix.decode('utf-8', 'replace')!r}") from None


def snapshot(
    gw: Gateway, name: str
) -> tuple[list[records.Contender], list[records.Contender], dict[bytes, str], int | None]:
    """(queue, holders, key -> owner id, a semaphore's capacity in force) of one name: one range read."""
    queue = keys.contenders(keys.lock_prefix(name), (_read(gw, name)).get("kvs") or [])
    owners: dict[bytes, str] = {}
    for c in queue:
        owner, _ = records.parse_owner(c.value) if c.value else (None, None)
        if owner is not None:
            owners[c.key] = owner
    terms = semaphore.stored_terms(queue)[1]
    capacity = None if terms is None else terms.capacity
    return queue, rule.holders(queue, capacity), owners, capacity


def inspect(gw: Gateway, leases: LeasePool, name: str) -> LockInfo | None:
    queue, holders, owners, capacity = snapshot(gw, name)
    if not holders:
        return None
    infos = []
    for h in holders:
        ttl_left: float | None = None
        if h.lease:
            ttl_left = float(max(0, leases.time_to_live(h.lease)))
        owner = owners.get(h.key) or f"unknown:lease:{h.lease:x}"
        permits = semaphore.take_of(h) if h.mode is Mode.SEMAPHORE else None
        infos.append(HolderInfo(owner, h.rev, h.mode.value, ttl_left, records.election_value(h.value), permits=permits))
    info = LockInfo(name, rule.queue_kind(queue), tuple(infos), len(queue) - len(holders))
    if info.kind != "semaphore":
        return info
    held = {h.key for h in holders}
    wanted = sum(semaphore.take_of(c) for c in queue if c.key not in held and c.mode is Mode.SEMAPHORE)
    return info.weighed(capacity, wanted)


def set_permits(gw: Gateway, leases: LeasePool, name: str, permits: int) -> bool:
    """Make ``permits`` the capacity in force of the semaphore ``name`` if it has a contender: one txn writes it
    into every contender's record, guarded by each record being unchanged since the read and by no contender
    having come since (its record would carry the old terms), again on a conflict; then the put and delete
    of ``NAME/sem`` (on a lease of its own, so nothing stays if this process dies in between) wakes the
    waiters. False, and nothing written, for a semaphore without a contender."""
    under = keys.sem_range(name)
    for _ in range(16):
        data = _read(gw, name)
        rev = int(data["header"]["revision"])
        queue = keys.contenders(keys.lock_prefix(name), data.get("kvs") or [])
        sems = [c for c in queue if c.mode is Mode.SEMAPHORE]
        if not sems:
            return False
        terms = semaphore.stored_terms(queue)[1]
        # a shrink: the contenders within the capacity before it hold on (a holder is never revoked), so their
        # records say so (``semaphore.marked_held``): nothing else on the server tells a holder from a waiter
        held = (
            semaphore.shrink_marks(queue, terms.capacity) if terms is not None and permits < terms.capacity else set()
        )
        if len(sems) >= MAX_TXN_OPS:
            raise gw.error(
                f"set_permits: semaphore {name!r} has {len(sems)} contenders and one txn rewrites them all, which "
                f"distlock keeps within {MAX_TXN_OPS} operations (etcd's --max-txn-ops): resize it when fewer wait"
            )
        # (a record's mod revision alone tells it is unchanged: one deleted compares as 0, one put again since,
        # even on the same lease, as later than the read; and one compare per record is what etcd's limit allows)
        compare, puts = [ops.quiet_under(under, rev)], []
        for c in sems:
            value = semaphore.resized(c.value, permits, c.key in held)
            if value is not None:
                compare.append(ops.mod_is(c.key, c.mod))
                puts.append(ops.put_op(c.key, value, c.lease))
        if not puts:
            return False  # contenders of another client (no terms in their keys): nothing of ours to resize
        try:
            done = gw.call("/v3/kv/txn", {"compare": compare, "success": puts})
        except Denied as exc:
            raise denied(exc, name, gw.username, f"write keys under {name + '/'!r}") from None
        if done.get("succeeded"):
            _nudge(gw, leases, name)
            return True
    raise gw.error(f"set_permits of {name!r}: its contenders kept changing; try again")


def _nudge(gw: Gateway, leases: LeasePool, name: str) -> None:
    """Wake the semaphore's waiters (they watch ``NAME/sem`` for a delete): put it on a short lease of its own,
    then revoke that lease, which deletes it. Best effort: a waiter also reads again at the end of its slice."""
    try:
        lease = leases.take(1.0, fresh=True)
        try:
            gw.call("/v3/kv/txn", {"success": [ops.put_op(keys.nudge_key(name), b"", lease.id)]})
        finally:
            leases.revoke(lease.id)
    except (BackendError, Denied) as exc:  # the resize is made: the waiters see it at their next look anyway
        log.debug("etcd: could not wake the waiters of %r after a resize: %s", name, exc)


def list_held(gw: Gateway, leases: LeasePool, prefix: str) -> list[LockInfo]:
    """Every held lock whose name starts with ``prefix``: one range read of the names, then each inspected."""
    start = prefix.encode("utf-8")
    op = ops.range_op(start or b"\x01", ops.prefix_end(start) if start else b"\x00")
    try:
        data = gw.call("/v3/kv/range", op)
    except Denied as exc:
        raise denied(exc, None, gw.username, f"read the keys under {prefix!r}") from None
    names: set[str] = set()
    for kv in data.get("kvs") or []:
        if not int(kv.get("lease") or 0):
            continue
        parsed = keys.split_key(ops.unb64(kv.get("key")))
        if parsed is not None and parsed[0].startswith(prefix):
            names.add(parsed[0])
    out = []
    for name in sorted(names):
        info = inspect(gw, leases, name)
        if info is not None:
            out.append(info)
    return out


def request_release(gw: Gateway, name: str, reason: str) -> bool:
    """Put a release request into each distlock holder's key (``records.revoke_value``), on the holder's own
    lease, if nobody wrote the key since it was read (a leader's proclaim is never overwritten with an
    older value); True if there was a holder to ask."""
    prefix = keys.lock_prefix(name)
    asked = False
    for _ in range(3):  # a holder's key written between the read and the put is read again
        try:
            data = gw.call("/v3/kv/range", ops.prefix_range(prefix, keys_only=False))
        except Denied as exc:
            raise denied(exc, name, gw.username, f"read {prefix.decode('utf-8', 'replace')!r}") from None
        kvs = data.get("kvs") or []
        mods = {ops.unb64(kv.get("key")): int(kv.get("mod_revision") or 0) for kv in kvs}
        queue = keys.contenders(prefix, kvs)
        terms = semaphore.stored_terms(queue)[1]
        puts = []
        for h in rule.holders(queue, None if terms is None else terms.capacity):
            value = records.revoke_value(h.value, reason)
            if value is not None:
                guard = [ops.mod_is(h.key, mods[h.key])]
                puts.append({"compare": guard, "success": [ops.put_op(h.key, value, h.lease)]})
        if not puts:
            return asked
        try:
            results = [gw.call("/v3/kv/txn", body) for body in puts]
        except Denied as exc:
            raise denied(exc, name, gw.username, f"write keys under {name + '/'!r}") from None
        done = [bool(r.get("succeeded")) for r in results]
        asked = asked or any(done)
        if all(done):
            return asked
    return asked

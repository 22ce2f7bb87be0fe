"""What ``inspect``, ``list``, ``break_lock`` and ``request_release`` read (and write) of a lock's queue on
etcd: everyone's keys, not ours.

Owners come from the values of the keys (JSON written by distlock; an empty value is a Go ``Mutex`` or an
``etcdctl lock``, shown as ``unknown:lease:<hex>``). Any other value is an election candidate's (distlock's,
Go's ``Election``, ``etcdctl elect``): reported as the holder's ``value``, with the owner
``unknown:lease:<hex>``. A user whose role does not cover the names gets a one-line error naming what it may
not read.
"""

from __future__ import annotations

from ...._core.types import HolderInfo, LockInfo
from .. import keys
from .gateway import Denied, Gateway, denied
from .leases import LeasePool


async def snapshot(gw: Gateway, name: str) -> tuple[list[keys.Contender], list[keys.Contender], dict[bytes, str]]:
    """(queue, holders, key -> owner id) of one name: one range read of ``NAME/`` with the values."""
    prefix = keys.lock_prefix(name)
    try:
        data = await gw.call("/v3/kv/range", keys.prefix_range(prefix, keys_only=False))
    except Denied as exc:
        raise denied(exc, name, gw.username, f"read {prefix.decode('utf-8', 'replace')!r}") from None
    queue = keys.contenders(prefix, data.get("kvs") or [])
    owners: dict[bytes, str] = {}
    permits: int | None = None
    for c in queue:
        owner, n = keys.parse_owner(c.value) if c.value else (None, None)
        if owner is not None:
            owners[c.key] = owner
        if c is queue[0]:
            permits = n
    return queue, keys.holders(queue, permits), owners


async def inspect(gw: Gateway, leases: LeasePool, name: str) -> LockInfo | None:
    queue, holders, owners = await snapshot(gw, name)
    if not holders:
        return None
    infos = []
    for h in holders:
        ttl_left: float | None = None
        if h.lease:
            ttl_left = float(max(0, await leases.time_to_live(h.lease)))
        owner = owners.get(h.key) or f"unknown:lease:{h.lease:x}"
        infos.append(HolderInfo(owner, h.rev, h.mode.value, ttl_left, keys.election_value(h.value)))
    return LockInfo(name, keys.queue_kind(queue), tuple(infos), len(queue) - len(holders))


async def list_held(gw: Gateway, leases: LeasePool, prefix: str) -> list[LockInfo]:
    """Every held lock whose name starts with ``prefix``: one range read of the names, then each inspected."""
    start = prefix.encode("utf-8")
    op = keys.range_op(start or b"\x01", keys.prefix_end(start) if start else b"\x00")
    try:
        data = await gw.call("/v3/kv/range", op)
    except Denied as exc:
        raise denied(exc, None, gw.username, f"read the keys under {prefix!r}") from None
    names: set[str] = set()
    for kv in data.get("kvs") or []:
        if not int(kv.get("lease") or 0):
            continue
        parsed = keys.split_key(keys.unb64(kv.get("key")))
        if parsed is not None and parsed[0].startswith(prefix):
            names.add(parsed[0])
    out = []
    for name in sorted(names):
        info = await inspect(gw, leases, name)
        if info is not None:
            out.append(info)
    return out


async def request_release(gw: Gateway, name: str, reason: str) -> bool:
    """Put a release request into each distlock holder's key (``keys.revoke_value``), on the holder's own
    lease, if nobody wrote the key since it was read (a leader's proclaim is never overwritten with an
    older value); True if there was a holder to ask."""
    prefix = keys.lock_prefix(name)
    asked = False
    for _ in range(3):  # a holder's key written between the read and the put is read again
        try:
            data = await gw.call("/v3/kv/range", keys.prefix_range(prefix, keys_only=False))
        except Denied as exc:
            raise denied(exc, name, gw.username, f"read {prefix.decode('utf-8', 'replace')!r}") from None
        kvs = data.get("kvs") or []
        mods = {keys.unb64(kv.get("key")): int(kv.get("mod_revision") or 0) for kv in kvs}
        queue = keys.contenders(prefix, kvs)
        permits = keys.parse_owner(queue[0].value)[1] if queue and queue[0].value else None
        puts = []
        for h in keys.holders(queue, permits):
            value = keys.revoke_value(h.value, reason)
            if value is not None:
                guard = [keys.mod_is(h.key, mods[h.key])]
                puts.append({"compare": guard, "success": [keys.put_op(h.key, value, h.lease)]})
        if not puts:
            return asked
        try:
            results = [await gw.call("/v3/kv/txn", body) for body in puts]
        except Denied as exc:
            raise denied(exc, name, gw.username, f"write keys under {name + '/'!r}") from None
        done = [bool(r.get("succeeded")) for r in results]
        asked = asked or any(done)
        if all(done):
            return asked
    return asked

# GENERATED from src/distlock/_backends/etcd/_async/latch.py by scripts/gen_sync.py: edit that file, not this one.
"""Count-down latches on etcd: one key per latch, outside every lock's range, changed by compare-and-set
transactions; the waiters' wake-up is a watch stream on that key (``watch.Watch``).

Layout: the latch ``NAME`` is the key ``\\x00distlock/latch/NAME\\x00`` (``keys.latch_key``); its value is JSON
``{"round", "initial", "count", "recent": [ids of the last count-downs]}``. It starts with a NUL byte, which no
lock name has, so it is in no lock's range ``NAME/`` (a Go ``concurrency.Mutex`` counts every key there) and
apart from the store's 0.1 owner records (``\\x00distlock/owner/``); it ends with one, so no latch's key is the
prefix of another's and a watch of one sees no other. A role needs read and write on that prefix for latches.

A latch is created by a put guarded by ``CreateRevision == 0``; a count-down reads the key and puts the new
value guarded by ``ModRevision`` of that read, again on a conflict (etcd's client retries a request whose
answer was lost: the guard then fails and the read again finds the step among the recent ones). The
count-down that reaches 0 puts count 0 on a new lease of ``linger`` seconds (etcd counts it; at least its
minimum TTL): the done marker, which etcd deletes with the lease.
"""

from __future__ import annotations

import json
from typing import Any

from ...._sync.backend import SyncWatch
from ...._core.latch import LatchState, recent_after
from .. import keys, ops
from .gateway import Denied, Gateway, denied
from .watch import Watch


def _guard(key: bytes, target: str, rev: int) -> dict[str, object]:
    field = "create_revision" if target == "CREATE" else "mod_revision"
    return {"key": ops.b64(key), "target": target, "result": "EQUAL", field: str(rev)}


def _read(gw: Gateway, key: bytes) -> tuple[dict[str, Any], int] | None:
    data = gw.call("/v3/kv/range", ops.range_op(key, keys_only=False))
    kvs = ops.kvs_of(data)
    if not kvs:
        return None
    return dict(json.loads(ops.unb64(kvs[0].get("value")))), int(kvs[0].get("mod_revision") or 0)


def _state(record: dict[str, Any]) -> LatchState:
    return LatchState(str(record["round"]), int(record["initial"]), max(0, int(record["count"])))


def listing(gw: Gateway, prefix: str) -> list[tuple[str, int, int]]:
    """Every latch whose name starts with ``prefix`` (name, initial, count), its done marker while it lasts."""
    start = keys.LATCH_PREFIX + prefix.encode("utf-8")
    data = gw.call("/v3/kv/range", ops.range_op(start, ops.prefix_end(start), keys_only=False))
    out = []
    for kv in ops.kvs_of(data):
        try:
            record = json.loads(ops.unb64(kv.get("value")))
            state = _state(record)
        except (ValueError, KeyError, TypeError):
            continue  # not distlock's
        name = ops.unb64(kv.get("key"))[len(keys.LATCH_PREFIX) : -1].decode("utf-8", "replace")
        out.append((name, state.initial, state.count))
    return out


def open_latch(gw: Gateway, name: str, count: int | None, round_id: str) -> LatchState | None:
    key = keys.latch_key(name)
    try:
        while True:
            found = _read(gw, key)
            if found is not None:
                return _state(found[0])
            if count is None:
                return None
            record = {"round": round_id, "initial": count, "count": count, "recent": []}
            put = ops.put_op(key, json.dumps(record).encode(), 0)
            data = gw.call("/v3/kv/txn", {"compare": [_guard(key, "CREATE", 0)], "success": [put]})
            if data.get("succeeded"):
                return _state(record)
    except Denied as exc:
        raise denied(exc, name, gw.username, f"read and write {key!r}") from None


def count_down(gw: Gateway, name: str, round_id: str, step: str, linger: float) -> int:
    key = keys.latch_key(name)
    try:
        while True:
            found = _read(gw, key)
            if found is None:
                return 0
            record, rev = found
            left = int(record["count"])
            if record["round"] != round_id:
                return 0
            if left <= 0 or step in record.get("recent", []):
                return max(0, left)
            record["count"] = left - 1
            record["recent"] = recent_after(" ".join(record.get("recent", [])), step).split()
            lease = 0
            if left == 1:
                granted = gw.call("/v3/lease/grant", {"TTL": str(ops.lease_ttl_seconds(linger))})
                lease = int(granted["ID"])
            put = ops.put_op(key, json.dumps(record).encode(), lease)
            data = gw.call("/v3/kv/txn", {"compare": [_guard(key, "MOD", rev)], "success": [put]})
            if data.get("succeeded"):
                return left - 1
            # changed since the read: read again (a lease granted for it runs out unused)
    except Denied as exc:
        raise denied(exc, name, gw.username, f"read and write {key!r}") from None


def watch(gw: Gateway, name: str) -> SyncWatch:
    key = keys.latch_key(name)
    try:
        return Watch.open(gw, name, prefix=key)
    except Denied as exc:
        raise denied(exc, name, gw.username, f"watch {key!r}") from None

# GENERATED from src/distlock/_backends/etcd/_async/barrier.py by scripts/gen_sync.py: edit that file, not this one.
"""Barriers on etcd: one key per barrier, outside every lock's range, read and replaced whole by compare-and-set
transactions (the record's rules are ``_core/barrier.py``'s).

Layout: the barrier ``NAME`` is the key ``\\x00distlock/barrier/NAME\\x00``, a double barrier's
``\\x00distlock/dbarrier/NAME\\x00`` (``keys.barrier_key``); the value is the record's JSON. NUL first and last, as
the latches' keys: in no lock's range, apart from latches and from each other. A write is guarded by the
``ModRevision`` of the read (``CreateRevision == 0`` for a new key); an empty record is deleted. No lease: a
barrier whose members all died is deleted by the next barrier creation on the cluster (each sweeps the
records whose every lease and marker ended).
"""

from __future__ import annotations

from ...._core import barrier
from ...._core.timing import wall_ms
from ...._core.types import PrimitiveInfo
from .. import keys, ops
from .gateway import Denied, Gateway, denied


def _guard(key: bytes, rev: int) -> dict[str, object]:
    if rev == 0:
        return ops.create_is(key, 0)
    return {"key": ops.b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(rev)}


def read(gw: Gateway, kind: str, name: str) -> tuple[bytes | None, object]:
    key = keys.barrier_key(kind, name)
    try:
        kvs = ops.kvs_of(gw.call("/v3/kv/range", ops.range_op(key, keys_only=False)))
    except Denied as exc:
        raise denied(exc, name, gw.username, f"read and write {key!r}") from None
    if not kvs:
        return None, 0
    return ops.unb64(kvs[0].get("value")), int(kvs[0].get("mod_revision") or 0)


def cas(gw: Gateway, kind: str, name: str, version: object, data: str | None) -> bool:
    key = keys.barrier_key(kind, name)
    rev = int(version)  # type: ignore[call-overload]
    if rev == 0 and data is None:
        return True
    try:
        if rev == 0:
            sweep(gw, kind)
        op = ops.delete_op(key) if data is None else ops.put_op(key, data.encode(), 0)
        reply = gw.call("/v3/kv/txn", {"compare": [_guard(key, rev)], "success": [op]})
    except Denied as exc:
        raise denied(exc, name, gw.username, f"read and write {key!r}") from None
    return bool(reply.get("succeeded"))


def listing(gw: Gateway, prefix: str) -> list[tuple[str, str, PrimitiveInfo | None]]:
    """Every barrier and double barrier whose name starts with ``prefix``: (kind, name, what ``list`` shows)."""
    out = []
    now = wall_ms()
    for kind, kind_prefix in keys.BARRIER_PREFIXES.items():
        start = kind_prefix + prefix.encode("utf-8")
        data = gw.call("/v3/kv/range", ops.range_op(start, ops.prefix_end(start), keys_only=False))
        for kv in ops.kvs_of(data):
            name = ops.unb64(kv.get("key"))[len(kind_prefix) : -1].decode("utf-8", "replace")
            out.append((kind, name, barrier.summary(kind, name, ops.unb64(kv.get("value")), now)))
    return out


def sweep(gw: Gateway, kind: str) -> None:
    """Delete every record of ``kind`` whose leases and markers all ended (one range read, a guarded delete
    for each)."""
    prefix = keys.BARRIER_PREFIXES[kind]
    now = wall_ms()
    for kv in ops.kvs_of(gw.call("/v3/kv/range", ops.range_op(prefix, ops.prefix_end(prefix), keys_only=False))):
        key = ops.unb64(kv.get("key"))
        try:
            record = barrier.decode(ops.unb64(kv.get("value")))
        except ValueError:
            continue
        if record is not None and barrier.spent(record, now):
            guard = _guard(key, int(kv.get("mod_revision") or 0))
            gw.call("/v3/kv/txn", {"compare": [guard], "success": [ops.delete_op(key)]})

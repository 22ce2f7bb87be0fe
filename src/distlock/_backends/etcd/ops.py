"""The JSON gateway's request bodies for etcd's KV calls, with no I/O: the base64 encoding of keys and values,
prefix ranges, the range reads (a name's whole queue, or the tail of it up to a key), the compares that guard a
txn (create revision, mod revision, a quiet or empty prefix), a txn's put and delete operations, the ``kvs`` of
a range answer, and the whole seconds of a lease grant. The keys they name are the layout of ``keys.py``.
"""

from __future__ import annotations

import base64
from typing import Any

from .records import Contender


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: object) -> bytes:
    return base64.b64decode(str(text)) if text else b""


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with ``prefix`` (etcd's ``GetPrefixRangeEnd``)."""
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\x00"  # all 0xff: to the end of the keyspace


def range_op(
    key: bytes, end: bytes | None = None, *, keys_only: bool = True, by_create: bool = False
) -> dict[str, object]:
    op: dict[str, object] = {"key": b64(key)}
    if end is not None:
        op["range_end"] = b64(end)
    if keys_only:
        op["keys_only"] = True
    if by_create:
        op["sort_order"] = "ASCEND"
        op["sort_target"] = "CREATE"
    return op


def prefix_range(prefix: bytes, *, keys_only: bool = True) -> dict[str, object]:
    return range_op(prefix, prefix_end(prefix), keys_only=keys_only, by_create=True)


#: how many keys a tail read asks for: ours and the one just ahead of it
TAIL = 2


def tail_range(prefix: bytes, upto: int | None = None) -> dict[str, object]:
    """The newest ``TAIL`` keys under ``prefix`` by create revision, none newer than ``upto`` (ours): our key
    and the one just ahead of it. What a mutex or write waiter needs of the queue (it waits for whatever is
    ahead, and watches the nearest, as Go's ``Mutex`` does with ``WithLastCreate`` and ``WithMaxCreateRev``),
    whatever the queue's length. Read through ``keys.tail_contenders``."""
    op = range_op(prefix, prefix_end(prefix))
    op.update({"sort_order": "DESCEND", "sort_target": "CREATE", "limit": str(TAIL)})
    if upto is not None:
        op["max_create_revision"] = str(upto)
    return op


def create_is(key: bytes, rev: int) -> dict[str, object]:
    """The compare ``CreateRevision(key) == rev`` (``rev=0``: the key does not exist)."""
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(rev)}


def mod_is(key: bytes, mod: int) -> dict[str, object]:
    """The compare ``ModRevision(key) == mod``: nobody wrote the key since it was read."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(mod)}


def none_under(prefix: bytes) -> dict[str, object]:
    """The compare "no key under ``prefix``" (an empty range compares as one key with create revision 0)."""
    return {**create_is(prefix, 0), "range_end": b64(prefix_end(prefix))}


def quiet_under(prefix: bytes, rev: int) -> dict[str, object]:
    """The compare "no key under ``prefix`` was created or written after revision ``rev``"."""
    return {"key": b64(prefix), "range_end": b64(prefix_end(prefix)), "target": "MOD", "result": "LESS",
            "mod_revision": str(rev + 1)}  # fmt: skip


def unchanged(c: Contender, mod: int) -> list[dict[str, object]]:
    """The compares "``c``'s key is still there, as it was read (create revision, mod revision ``mod``)"."""
    return [create_is(c.key, c.rev), mod_is(c.key, mod)]


def put_op(key: bytes, value: bytes, lease: int) -> dict[str, object]:
    return {"request_put": {"key": b64(key), "value": b64(value), "lease": str(lease)}}


def delete_op(key: bytes) -> dict[str, object]:
    return {"request_delete_range": {"key": b64(key)}}


def kvs_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``kvs`` of a ``response_range`` inside a txn response, or of a plain range response."""
    inner = response.get("response_range", response)
    assert isinstance(inner, dict)
    kvs = inner.get("kvs") or []
    assert isinstance(kvs, list)
    return kvs


def lease_ttl_seconds(ttl: float, minimum: int = 1) -> int:
    """A claim's TTL as the whole seconds etcd leases take: rounded up, never shorter than asked."""
    whole = int(ttl)
    if whole < ttl:
        whole += 1
    return max(minimum, whole)

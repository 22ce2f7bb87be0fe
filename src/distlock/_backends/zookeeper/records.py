"""What a ZooKeeper node's data holds, with no I/O (the nodes themselves, their paths and order, are
``layout.py``).

Queue children
    distlock's children carry an owner record (JSON: owner id, mode, a semaphore lease's permits), for
    ``inspect``; Curator's carry the client's IP address instead (``foreign:<data>:<child>`` to a reader). An
    election candidate's node (a LeaderLatch node) holds only the candidate's value in UTF-8, Curator's
    participant id, so its owner is unknown whoever created it.

A semaphore's capacity
    ``<path>/%count`` and the semaphore's own node hold a 4-byte big-endian int (Curator's ``SharedCount``).
    The holdings among a semaphore's leases are told apart by their czxid: a distlock holding's leases share
    the one of the multi request that created them.

Release requests (``Store.request_release``; Curator's ``Revoker``)
    Curator asks a holder to let go by setting its node's data to ``__REVOKE__``; a holder that made its lock
    revocable watches its own node and runs its listener when it reads exactly those bytes. A distlock holder
    reads them as a request too (no reason: Curator's wire has no place for one). distlock's own request keeps
    the owner record of a distlock node and adds the reason to it (``"revoke": reason``), and sets
    ``__REVOKE__`` on any other node (Curator's), so that a revocable Curator holder's listener fires. An
    election leader's node holds only its value, so a request there rewrites the same bytes: the new version
    is the request (without a reason), told apart from the leader's own ``proclaim`` by the version that
    proclaim got back. What a request writes on each kind of node is ``layout.revoke_data``.
"""

from __future__ import annotations

import json

from ..._core.types import Mode


def node_data(owner: str, mode: Mode, permits: int = 1) -> bytes:
    """What our children carry: who created them (for inspect). Curator stores its IP address instead."""
    body: dict[str, object] = {"owner": owner, "mode": mode.value}
    if mode is Mode.SEMAPHORE:
        body["permits"] = permits
    return json.dumps(body, separators=(",", ":")).encode()


def latch_data(value: str) -> bytes:
    """An election candidate's node data: its value, as Curator stores a LeaderLatch participant id."""
    return value.encode("utf-8")


def latch_holder(data: bytes | None, child: str) -> tuple[str, str]:
    """(owner, value) of a LeaderLatch node. The node holds only the value (Curator's participant id), so
    the owner is unknown whoever created it; ``unknown:`` owners read as None in ``LeaderInfo``."""
    return f"unknown:{child}", (data or b"").decode("utf-8", errors="replace")


def parse_data(data: bytes | None, child: str) -> tuple[str, int | None]:
    """(owner, permits) from a child's data; a foreign child (Curator) gets ``foreign:<data>:<child>``."""
    try:
        body = json.loads(data or b"")
        if isinstance(body, dict) and isinstance(body.get("owner"), str):
            permits = body.get("permits")
            return body["owner"], permits if isinstance(permits, int) else None
    except (ValueError, UnicodeDecodeError):
        pass
    text = (data or b"").decode("utf-8", errors="replace")[:64] or "?"
    return f"foreign:{text}:{child}", None


def count_bytes(n: int) -> bytes:
    """A capacity as Curator's SharedCount stores it: a 4-byte big-endian (signed) int."""
    return n.to_bytes(4, "big", signed=True)


def count_of(data: bytes | None) -> int | None:
    """The capacity in ``data`` (Curator reads the first 4 bytes), or None if it holds none (empty: no
    declared size stored on the semaphore's node)."""
    if not data or len(data) < 4:
        return None
    return int.from_bytes(data[:4], "big", signed=True)


def semaphore_holders(leases: list[str], data: list[bytes | None], czxids: list[int]) -> list[tuple[str, int, int]]:
    """The holdings among a semaphore's leases (in sequence order, with each one's data and czxid): (owner,
    fence, permits) each, in order. A distlock holding is the leases one multi request created: they share its
    czxid. Every other lease has a czxid of its own: Curator creates the leases of an ``acquire(qty)`` one by
    one, and nothing on its wire ties them together, so each counts as a holding of one permit."""
    owners: dict[int, str] = {}
    sizes: dict[int, int] = {}
    for child, body, czxid in zip(leases, data, czxids, strict=True):
        owners.setdefault(czxid, parse_data(body, child)[0])
        sizes[czxid] = sizes.get(czxid, 0) + 1
    return [(owner, czxid, sizes[czxid]) for czxid, owner in owners.items()]


#: Curator's revocation message (``LockInternals.REVOKE_MESSAGE``), compared byte for byte
REVOKE_MESSAGE = b"__REVOKE__"


def revoke_reason(data: bytes | None) -> str | None:
    """The reason of the release request a lock node's data carries ("" for Curator's, which has none), or
    None if it carries none."""
    if data == REVOKE_MESSAGE:
        return ""
    if not data or not data.startswith(b"{"):
        return None
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    reason = body.get("revoke") if isinstance(body, dict) else None
    return reason if isinstance(reason, str) else None

"""How the SQL wing names things on the server: table prefixes, name keys, lock names, hand-over payloads.

No I/O: plain functions of a name (property-tested in tests/test_name_isolation.py).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,40}$")


def valid_prefix(prefix: str) -> bool:
    return bool(_PREFIX.match(prefix))


def name_key(name: str) -> str:
    """The full SHA-256 of the name (hex): the primary key of a name in every table."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


def name_filter(names: Sequence[str] | None, prefix: str, table: str = "") -> tuple[str, tuple[object, ...]]:
    """The WHERE condition (and its arguments) for ``inspect``: these names, or every name that starts with
    ``prefix``; ``table``: the alias the columns are qualified with."""
    t = f"{table}." if table else ""
    if names is not None:
        return f"{t}name_key IN ({', '.join(['%s'] * len(names))})", tuple(name_key(n) for n in names)
    return f"SUBSTR({t}name, 1, %s) = %s", (len(prefix), prefix)


def advisory_key(name: str) -> int:
    """PostgreSQL advisory lock key: the first 8 bytes of SHA-256(name) as a signed 64-bit integer."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big", signed=True)


def get_lock_name(name: str) -> str:
    """MySQL ``GET_LOCK`` name: the name itself up to 64 characters; longer names map to ``~`` and the
    unpadded base64url of their full SHA-256 (44 characters), never a truncation."""
    if len(name) <= 64:
        return name
    digest = base64.urlsafe_b64encode(hashlib.sha256(name.encode("utf-8")).digest()).decode().rstrip("=")
    return "~" + digest


#: the prefix of the lease mode's companion ``GET_LOCK`` names (``bell_name``)
BELL_PREFIX = "distlock-bell:"
#: what ``get_lock_name`` makes of a name longer than 64 characters
_MAPPED = re.compile(r"~[A-Za-z0-9_-]{43}")


def bell_name(key: str) -> str:
    """MySQL companion ``GET_LOCK`` a holder keeps while it holds ``key`` (waiters block on it)."""
    return BELL_PREFIX + key[:48]


def get_lock_refused(name: str) -> str | None:
    """Why ``name`` cannot be a ``GET_LOCK`` session-mode name, or None: one that ``get_lock_name`` gives a
    longer name (``~`` + 43 base64url characters) would share that name's lock, and one starting with
    ``BELL_PREFIX`` a lease-mode store's companion lock on the same server."""
    if _MAPPED.fullmatch(name):
        return (
            "on MySQL (mode=session) a lock name may not have the shape ~<43 base64url characters>: that is the "
            "GET_LOCK name of a name longer than 64 characters; choose another name"
        )
    if name.startswith(BELL_PREFIX):
        return f"on MySQL a lock name may not start with {BELL_PREFIX!r}: those are distlock's own GET_LOCK names"
    return None


def token_digest(token: str) -> str:
    """How a hand-over NOTIFY names the waiter it granted the name to: the first 32 hex digits of the
    SHA-256 of its token (whoever may LISTEN must not learn tokens; the same expression runs in SQL)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class HandOver:
    """A release granted the name to a queued waiter (PostgreSQL's NOTIFY payload after the name key:
    ``digest|fence|stamp``): the waiter's ``token_digest``, its fence, and the lease end the release gave
    its row, which is the deadline the waiter's queue entry had: the one its last write of it wrote (a refused
    try's, ``Grant.queued_until``, or its store's batched keep's)."""

    digest: str
    fence: int
    stamp: float


def handover_of(payload: str) -> tuple[str, HandOver | None]:
    """(name key, hand-over or None) of a NOTIFY payload: a plain wake-up is the name key alone; anything
    malformed after it is a wake-up, never a grant."""
    key, bar, rest = payload.partition("|")
    if not bar:
        return key, None
    parts = rest.split("|")
    try:
        return key, HandOver(parts[0], int(parts[1]), float(parts[2])) if len(parts) == 3 else None
    except ValueError:
        return key, None

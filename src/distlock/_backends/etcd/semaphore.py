"""A semaphore's terms on etcd, kept in its contenders' records, with no I/O: the permits each contender takes,
the capacity in force (every live distlock record carries it, ``docs/etcd.md``), a resize's new record and the
holders a shrink marks, and a claim's own record under the terms it read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..._core import arbiter
from ..._core.arbiter import Capacity
from ..._core.types import Claim, Mode
from ..._errors import ConfigError
from .records import Contender, record_of, sem_value


def take_of(c: Contender) -> int:
    """The permits a semaphore contender takes (1 where its record does not say: an older distlock's)."""
    body = record_of(c.value)
    take = body.get("take", 1) if body is not None else 1
    return take if isinstance(take, int) and take >= 1 else 1


def terms_of(raw: bytes) -> Capacity | None:
    """The semaphore's terms a contender's record carries (declared, in force), or None (not a distlock record)."""
    body = record_of(raw)
    if body is None or body.get("mode") != Mode.SEMAPHORE.value:
        return None
    declared, cap = body.get("permits"), body.get("cap", body.get("permits"))
    if not (isinstance(declared, int) and isinstance(cap, int) and declared >= 1 and cap >= 1):
        return None
    return Capacity(declared, cap)


def resized(raw: bytes, capacity: int, held: bool = False) -> bytes | None:
    """A semaphore contender's record with ``capacity`` in force (its other fields, a release request
    included, kept), marked ``held`` if asked; None if it is no distlock semaphore record."""
    body = record_of(raw)
    terms = terms_of(raw)
    if body is None or terms is None:
        return None
    body.pop("cap", None)
    if capacity != terms.declared:
        body["cap"] = capacity
    if held:
        body["held"] = True
    return json.dumps(body, separators=(",", ":")).encode()


def marked_held(c: Contender) -> bool:
    """Whether a shrink (``set_permits``) found this contender within the capacity before it: it holds (or, a
    waiter that fitted but had not read yet, is granted at its next read), whatever the capacity now."""
    body = record_of(c.value)
    return body is not None and body.get("held") is True


def shrink_marks(queue: Sequence[Contender], capacity: int) -> set[bytes]:
    """The keys a shrink from ``capacity`` marks held: the semaphore contenders that fit it, oldest first (the
    holders and the ones a read would grant now), and those marked by an earlier shrink."""
    out, used = set(), 0
    for c in queue:
        used += take_of(c) if c.mode is Mode.SEMAPHORE else capacity + 1
        if c.mode is not Mode.SEMAPHORE or not (marked_held(c) or used <= capacity):
            break
        out.add(c.key)
    return out


def stored_terms(queue: Sequence[Contender]) -> tuple[Contender | None, Capacity | None]:
    """The terms of a semaphore in use and the contender they were read from (the newest that carries them:
    every distlock semaphore record carries the ones in force, ``docs/etcd.md``), or (None, None)."""
    for c in reversed(queue):
        if c.mode is Mode.SEMAPHORE:
            terms = terms_of(c.value)
            if terms is not None:
                return c, terms
    return None, None


def claim_record(claim: Claim, terms: Capacity | None) -> bytes:
    """A semaphore claim's record under the stored ``terms`` (None: the semaphore is free): ``ConfigError`` if the
    claim does not fit them (``arbiter.terms``)."""
    return sem_value(claim.owner, claim.want, arbiter.terms(claim, terms))


def fitting_record(claim: Claim, terms: Capacity | None) -> bytes | None:
    """A claim's record under ``terms`` read lately (None if there are none, or they do not fit the claim: they
    may be old, so a create must not fail on them)."""
    if terms is None:
        return None
    try:
        return claim_record(claim, terms)
    except ConfigError:
        return None

"""What a contender's key holds on etcd, with no I/O: ``Contender``, one key of a name's queue as read (its
revisions, its lease and its value), and the values distlock writes and reads there.

* the owner record (JSON: owner id, mode, declared permits; a semaphore contender's also the permits it takes
  and the capacity in force, ``semaphore.py``), written with the key in one put;
* an election candidate's value as raw bytes (Go's ``concurrency.Election``), and no owner record;
* a release request: the owner record with ``"revoke": reason`` added, or an election value written again
  (its new mod revision is the request).

Go's ``Mutex`` and ``etcdctl lock`` write an empty value: no owner record, no election value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..._core.arbiter import Capacity
from ..._core.types import Mode


@dataclass(frozen=True)
class Contender:
    """One key of a name's queue as a range read shows it (``keys.contenders``)."""

    key: bytes
    mode: Mode
    rev: int  # create revision: queue order and fence
    lease: int
    value: bytes = b""  # the key's value (owner record, election value; empty for Go's Mutex, or keys-only)
    mod: int = 0  # mod revision: the last write of the key (its create, a resize, a release request)


def owner_value(owner: str, mode: Mode, permits: int, take: int = 1, capacity: int | None = None) -> bytes:
    """The owner record. A semaphore contender's also carries the semaphore's terms (``permits``: the declared
    capacity, ``cap``: the one in force where it differs) and the permits it takes (``take``, where more than 1)."""
    body: dict[str, object] = {"owner": owner, "mode": mode.value, "permits": permits}
    if take != 1:
        body["take"] = take
    if capacity is not None and capacity != permits:
        body["cap"] = capacity
    return json.dumps(body, separators=(",", ":")).encode()


def key_value(owner: str, mode: Mode, permits: int, value: str | None) -> bytes:
    """What a contender's key holds: an election candidate's value as it is (Go's ``Election``, read by
    ``etcdctl elect``), otherwise the owner record."""
    return owner_value(owner, mode, permits) if value is None else value.encode("utf-8")


def sem_value(owner: str, take: int, terms: Capacity) -> bytes:
    """A semaphore contender's record: its owner, the permits it takes and the semaphore's terms."""
    return owner_value(owner, Mode.SEMAPHORE, terms.declared, take, terms.capacity)


def record_of(raw: bytes) -> dict[str, Any] | None:
    """The owner record a key's value holds (a JSON object with an owner), or None."""
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        return None
    return body if isinstance(body, dict) and "owner" in body else None


def parse_owner(raw: bytes) -> tuple[str | None, int | None]:
    try:
        data = json.loads(raw)
        return str(data["owner"]), int(data["permits"])
    except (ValueError, KeyError, TypeError):
        return None, None


def election_value(raw: bytes) -> str | None:
    """The election value of a key's value: None for an owner record (a distlock lock) and for an empty value
    (Go's ``Mutex``, ``etcdctl lock``); otherwise the bytes as text (undecodable bytes replaced)."""
    if not raw or parse_owner(raw)[0] is not None:
        return None
    return raw.decode("utf-8", "replace")


def revoke_value(raw: bytes, reason: str) -> bytes | None:
    """A holder key's value with a release request in it: a distlock owner record with ``"revoke": reason``
    added, an election candidate's value unchanged (the put's new mod revision is the request: no room for a
    reason), or None for an empty value (Go's ``Mutex``, ``etcdctl lock``: nobody there reads a request)."""
    if not raw:
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict) and "owner" in body:
        body["revoke"] = reason
        return json.dumps(body, separators=(",", ":")).encode()
    return raw


def revoke_reason(raw: bytes) -> str | None:
    """The reason of the release request a holder key's value carries (see ``revoke_value``): the owner
    record's ``revoke``; "" for an election value (its change is the request); None if none."""
    try:
        body = json.loads(raw)
    except ValueError:
        return "" if raw else None
    if isinstance(body, dict) and "owner" in body:
        reason = body.get("revoke")
        return reason if isinstance(reason, str) else None
    return "" if raw else None

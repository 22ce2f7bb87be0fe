"""Who may hold a name next: the grant rule for backends that decide in Python (memory, SQLite).

Backends that decide on the server (Redis Lua, SQL statements) implement the same rule in their own
language; this module is its reference, and the conformance suite checks every backend against the
behaviour it describes.

State of one name: the live holders, and the queue of waiting claims (each with a sequence number and
its own server-side deadline, so a dead waiter cannot stall the queue: F12 in docs/safety.md).

Rule for a claim ``c`` (``ahead`` = queue entries with a smaller sequence than ``c``'s own, or all of
them when ``c`` is not queued):

* EXCLUSIVE / WRITE: no holder at all; and, if ``c.fair``, nobody ahead.
* SEMAPHORE: fewer than ``c.permits`` holders; if fair, holders + ahead < permits.
* READ: every holder is a reader; and no WRITE waiter ahead (writers are not starved: a queued writer
  blocks new readers); if fair, nobody ahead at all.

Who queues: a claim that failed and is fair, and every WRITE claim that failed (so readers can see it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .types import Mode


@dataclass(frozen=True)
class Held:
    token: str
    mode: Mode
    expires_at: float


@dataclass(frozen=True)
class Queued:
    token: str
    mode: Mode
    seq: int
    expires_at: float


def live(entries: Iterable[Held], now: float) -> list[Held]:
    return [e for e in entries if e.expires_at > now]


def may_acquire(
    mode: Mode, token: str, permits: int, fair: bool, holders: Sequence[Held], queue: Sequence[Queued]
) -> bool:
    """``holders`` and ``queue`` must already be filtered to live entries (not expired)."""
    if any(h.token == token for h in holders):
        return True
    mine = next((q.seq for q in queue if q.token == token), None)
    ahead = [q for q in queue if q.token != token and (mine is None or q.seq < mine)]
    if mode in (Mode.EXCLUSIVE, Mode.WRITE):
        return not holders and not (fair and ahead)
    if mode is Mode.SEMAPHORE:
        if any(h.mode is not Mode.SEMAPHORE for h in holders):
            return False
        waiting = len(ahead) if fair else 0
        return len(holders) + waiting < permits
    # READ
    if any(h.mode is not Mode.READ for h in holders):
        return False
    if fair:
        return not ahead
    return not any(q.mode is Mode.WRITE for q in ahead)


def should_queue(mode: Mode, fair: bool) -> bool:
    return fair or mode is Mode.WRITE


def retry_after(holders: Sequence[Held], now: float) -> float | None:
    """The earliest moment a holder's lease runs out: worth a re-check even without a wake-up."""
    if not holders:
        return None
    return max(0.0, min(h.expires_at for h in holders) - now)

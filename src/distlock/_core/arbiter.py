"""Who may hold a name next: the grant rule of the lease tables (SQLite, memory, MySQL/MariaDB, PostgreSQL).

The lease-table backends read a name's holders and queue inside their transaction, ask ``decide``, and
write what it says; ``lease_infos`` turns their holder rows into what ``inspect`` reports. Backends that
decide on the server (Redis Lua) implement the same rule in their own language; this module is its
reference, and the conformance suite checks every backend against the behaviour it describes.

State of one name: the live holders, and the queue of waiting claims (each with a sequence number and
its own server-side deadline, so a dead waiter cannot stall the queue: F12 in docs/safety.md).

Rule for a claim ``c`` (``ahead`` = queue entries with a smaller sequence than ``c``'s own, or all of
them when ``c`` is not queued):

* EXCLUSIVE / WRITE: no holder at all; and, if ``c.fair``, nobody ahead.
* SEMAPHORE: fewer than ``c.permits`` holders; if fair, holders + ahead < permits.
* READ: every holder is a reader; and no WRITE waiter ahead (writers are not starved: a queued writer
  blocks new readers); if fair, nobody ahead at all. A READ claim whose ``companion`` is the live WRITE
  holding of its own owner (a downgrade) is granted at once: that holding excludes everyone else, and the
  read it takes keeps writers out after the write is released (they need no holder at all).

Who queues: a claim that failed and is fair, and every WRITE claim that failed (so readers can see it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .types import Claim, HolderInfo, LockInfo, Mode, lock_kind


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
    mode: Mode,
    token: str,
    permits: int,
    fair: bool,
    holders: Sequence[Held],
    queue: Sequence[Queued],
    companion: str | None = None,
) -> bool:
    """``holders`` and ``queue`` must already be filtered to live entries (not expired)."""
    if any(h.token == token for h in holders):
        return True
    if companion is not None and any(h.token == companion and h.mode is Mode.WRITE for h in holders):
        return True  # a downgrade (READ only: the lock layer sets it on no other claim)
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


def looks_ahead(mode: Mode, fair: bool, permits: int) -> int | None:
    """How many of the entries ahead of a claim ``may_acquire`` needs to see (None: all of them); a
    backend may read only these (SQLite does). Any one entry ahead holds back a fair exclusive claim or
    reader; a fair semaphore claim, ``permits`` of them; a non-fair reader, any writer among them."""
    if mode is Mode.SEMAPHORE:
        return permits if fair else 0
    if mode is Mode.READ and not fair:
        return None
    return 1 if fair else 0


def should_queue(mode: Mode, fair: bool) -> bool:
    return fair or mode is Mode.WRITE


def retry_after(holders: Sequence[Held], now: float) -> float | None:
    """The earliest moment a holder's lease runs out: worth a re-check even without a wake-up."""
    if not holders:
        return None
    return max(0.0, min(h.expires_at for h in holders) - now)


@dataclass(frozen=True)
class Decision:
    """What one acquire transaction writes, given the live holders and queue of the claim's name."""

    ours: bool = False  #: the claim already holds it (a retry after a lost reply): read its fence
    grant: bool = False  #: insert the holding with a new fence (and drop the claim's queue entry)
    enqueue: bool = False  #: join the queue, or refresh the deadline of the claim's entry
    retry_after: float | None = None  #: when refused: see ``retry_after``


def decide(claim: Claim, holders: Sequence[Held], queue: Sequence[Queued], now: float, register_all: bool) -> Decision:
    """The one acquire step of every lease table. ``holders`` and ``queue``: the name's live entries, the
    queue in sequence order. ``register_all``: a refused claim joins the queue even where the rule does not
    need it (``should_queue``), so ``inspect`` counts every waiter; SQLite does (a local write), the
    server databases do not (one more statement on the wire per refused try)."""
    if any(h.token == claim.token for h in holders):
        return Decision(ours=True)
    if may_acquire(claim.mode, claim.token, claim.permits, claim.fair, holders, queue, claim.companion):
        return Decision(grant=True)
    return Decision(enqueue=register_all or should_queue(claim.mode, claim.fair), retry_after=retry_after(holders, now))


def lease_infos(
    rows: Iterable[tuple[str, str, str, int, float]], waiting: Callable[[str], int], now: float
) -> list[LockInfo]:
    """``inspect``'s answer from a lease table's live holder rows (name, owner, mode, fence, expires_at),
    sorted by name then fence; ``waiting(name)``: how many live queue entries the name has."""
    by_name: dict[str, list[HolderInfo]] = {}
    kinds: dict[str, str] = {}
    for name, owner, mode, fence, expires in rows:
        by_name.setdefault(name, []).append(HolderInfo.of_record(owner, fence, mode, max(0.0, expires - now)))
        kinds[name] = lock_kind(mode)
    return [LockInfo(n, kinds[n], tuple(hs), waiting(n)) for n, hs in sorted(by_name.items())]

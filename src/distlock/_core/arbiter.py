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
* SEMAPHORE (weighted): ``used`` = the permits the holders hold, ``cap`` = the semaphore's capacity in force,
  ``want`` = the permits ``c`` asks for, all or nothing. No holder of another mode, ``used + want <= cap``, and:
  if fair, room for everyone ahead too (``used + their wants + want <= cap``: strict FIFO); if not, no claim
  ahead that wants more than one permit (a refused claim with ``want > 1`` queues, so a stream of single
  permits cannot starve it). A claim ahead that wants more than ``cap`` (after a shrink) holds nobody back:
  it can never be granted, and its own next try is refused with ``ConfigError``.
* READ: every holder is a reader; and no WRITE waiter ahead (writers are not starved: a queued writer
  blocks new readers); if fair, nobody ahead at all. A READ claim whose ``companion`` is the live WRITE
  holding of its own owner (a downgrade) is granted at once: that holding excludes everyone else, and the
  read it takes keeps writers out after the write is released (they need no holder at all).

Who queues: a claim that failed and is fair, every WRITE claim that failed (so readers can see it), and every
SEMAPHORE claim for more than one permit that failed (so smaller ones wait behind it).

A semaphore in use keeps two numbers on the server (``Capacity``): the permits its first user DECLARED, and the
capacity in FORCE (the declared one until ``set_permits`` changes it). They live exactly as long as the name
has a live holder or waiter: the first claim of a free name writes them from its own ``permits`` (a record
left by a crash, with nobody live, counts as absent), the release or abandon that leaves nobody removes them.
``terms`` checks a claim against them (``ConfigError`` on a mismatch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from .._errors import ConfigError
from .types import Claim, HolderInfo, LockInfo, Mode, lock_kind


@dataclass(frozen=True)
class Held:
    token: str
    mode: Mode
    expires_at: float
    permits: int = 1  #: a semaphore holding's permits (its weight); 1 for every other mode


@dataclass(frozen=True)
class Queued:
    token: str
    mode: Mode
    seq: int
    expires_at: float
    want: int = 1  #: the permits a queued semaphore claim asks for; 1 for every other mode


@dataclass(frozen=True)
class Capacity:
    """The two numbers a semaphore in use keeps on the server."""

    declared: int  #: the ``permits`` of the semaphore's first user: every later user must declare the same (or None)
    capacity: int  #: the capacity in force: ``declared`` until ``set_permits`` changes it


def no_capacity_message(name: str) -> str:
    return f"semaphore {name!r} has no stored capacity yet: pass permits=N"


def mismatch_message(name: str, declared: int, capacity: int) -> str:
    return (
        f"semaphore {name!r} was declared with permits={declared} (capacity now {capacity}); "
        f"build it with permits={declared} or permits=None"
    )


def too_many_message(name: str, want: int, capacity: int) -> str:
    return (
        f"semaphore {name!r} has capacity {capacity}: acquire(permits={want}) could never be granted; "
        f"ask for at most {capacity}"
    )


def terms(claim: Claim, stored: Capacity | None) -> Capacity:
    """The numbers a semaphore claim's try works with: ``stored`` (None: the name has no live holder or waiter,
    so nothing counts as stored), or, for a free name, the claim's own ``permits``. ``ConfigError`` (one line that
    says what to change) when the claim declared another size than the first user did, declared none
    (``permits=None``) of a free name, or wants more than the capacity in force."""
    if stored is None:
        if claim.permits is None:
            raise ConfigError(no_capacity_message(claim.name))
        stored = Capacity(claim.permits, claim.permits)
    elif claim.permits is not None and claim.permits != stored.declared:
        raise ConfigError(mismatch_message(claim.name, stored.declared, stored.capacity))
    if claim.want > stored.capacity:
        raise ConfigError(too_many_message(claim.name, claim.want, stored.capacity))
    return stored


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
    want: int = 1,
) -> bool:
    """``holders`` and ``queue`` must already be filtered to live entries (not expired). ``permits``: a semaphore's
    capacity in force; ``want``: the permits the claim asks for."""
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
        used = sum(h.permits for h in holders)
        waiting = [q for q in ahead if q.mode is Mode.SEMAPHORE and q.want <= permits]
        if fair:
            return used + sum(q.want for q in waiting) + want <= permits
        return used + want <= permits and not any(q.want > 1 for q in waiting)
    # READ
    if any(h.mode is not Mode.READ for h in holders):
        return False
    if fair:
        return not ahead
    return not any(q.mode is Mode.WRITE for q in ahead)


def looks_ahead(mode: Mode, fair: bool, permits: int | None = None) -> int | None:
    """How many of the entries ahead of a claim ``may_acquire`` needs to see (None: all of them); a
    backend may read only these (SQLite does). Any one entry ahead holds back a fair exclusive claim or
    reader; a non-fair reader, any writer among them; a semaphore claim, any claim for several permits
    (fair: the sum of their wants), and the backend also needs them all to tell whether the name is in use."""
    if mode is Mode.SEMAPHORE:
        return None
    if mode is Mode.READ and not fair:
        return None
    return 1 if fair else 0


def should_queue(mode: Mode, fair: bool, want: int = 1) -> bool:
    return fair or mode is Mode.WRITE or (mode is Mode.SEMAPHORE and want > 1)


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
    #: a semaphore's numbers to write with the grant or the queue entry (None: what is stored is right)
    store: Capacity | None = None


def decide(
    claim: Claim,
    holders: Sequence[Held],
    queue: Sequence[Queued],
    now: float,
    register_all: bool,
    stored: Capacity | None = None,
) -> Decision:
    """The one acquire step of every lease table. ``holders`` and ``queue``: the name's live entries, the
    queue in sequence order (for a semaphore claim, every entry ahead of it and its own: ``looks_ahead``).
    ``register_all``: a refused claim joins the queue even where the rule does not need it (``should_queue``),
    so ``inspect`` counts every waiter; SQLite does (a local write), the server databases do not (one more
    statement on the wire per refused try). ``stored``: a semaphore's stored numbers, if it has any (ignored,
    as a crash's leftover, when nobody is live); ``ConfigError`` from ``terms``."""
    if any(h.token == claim.token for h in holders):
        return Decision(ours=True)
    cap = claim.permits or 1
    write = None
    if claim.mode is Mode.SEMAPHORE:
        in_use = stored if holders or queue else None  # with nobody live, a stored record is a crash's leftover
        found = terms(claim, in_use)
        cap, write = found.capacity, (found if in_use is None else None)
    if may_acquire(claim.mode, claim.token, cap, claim.fair, holders, queue, claim.companion, claim.want):
        return Decision(grant=True, store=write)
    enqueue = register_all or should_queue(claim.mode, claim.fair, claim.want)
    return Decision(enqueue=enqueue, retry_after=retry_after(holders, now), store=write if enqueue else None)


def lease_infos(
    rows: Iterable[tuple[str, str, str, int, float, int | None]],
    waiting: Callable[[str], tuple[int, int]],
    now: float,
    capacity: Callable[[str], int | None] = lambda _name: None,
) -> list[LockInfo]:
    """``inspect``'s answer from a lease table's live holder rows (name, owner, mode, fence, expires_at,
    permits: None reads as 1), sorted by name then fence; ``waiting(name)``: how many live queue entries the
    name has and the permits they want; ``capacity(name)``: a semaphore's stored capacity in force."""
    by_name: dict[str, list[HolderInfo]] = {}
    kinds: dict[str, str] = {}
    for name, owner, mode, fence, expires, permits in rows:
        holder = HolderInfo.of_record(owner, fence, mode, max(0.0, expires - now))
        if mode == Mode.SEMAPHORE.value:
            holder = replace(holder, permits=permits or 1)
        by_name.setdefault(name, []).append(holder)
        kinds[name] = lock_kind(mode)
    out = []
    for n, hs in sorted(by_name.items()):
        count, wanted = waiting(n)
        info = LockInfo(n, kinds[n], tuple(hs), count)
        if info.kind == "semaphore":
            info = info.weighed(capacity(n), wanted)
        out.append(info)
    return out

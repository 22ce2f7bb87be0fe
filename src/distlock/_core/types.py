"""Plain data passed between the lock objects and the backends. No I/O here.

The contract between the two layers (see ``_async/backend.py`` for the methods):

* A lock object turns one acquisition into a ``Claim``: the lock name, the ``Mode``,
  a fresh random token, the owner id, the lease TTL, the permit limit and the fairness flag.
* The backend answers single attempts with a ``Grant``: acquired (with the fence) or not
  (with a hint of how long waiting is worth before the next attempt).
* Everything else (blocking, deadlines, reentrancy, renewal, the lost signal) lives above.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from . import ids


class Mode(enum.StrEnum):
    """What a claim asks for. One name may be used with one family of modes at a time."""

    EXCLUSIVE = "lock"  # mutex / rlock / each name of a multilock
    READ = "read"  # rwlock.read: shares with other readers
    WRITE = "write"  # rwlock.write: excludes everyone; waiting writers block new readers
    SEMAPHORE = "semaphore"  # holdings of a few permits each, at most the capacity in all

    @property
    def shared(self) -> bool:
        return self in (Mode.READ, Mode.SEMAPHORE)


_KINDS: dict[str, str] = {"lock": "lock", "read": "rwlock", "write": "rwlock", "semaphore": "semaphore"}


def lock_kind(mode: str) -> str:
    """The lock kind ``inspect`` reports for a holder in ``mode`` (a Mode or its value): read and write holders
    are an rwlock's; an unknown mode (another client's record) reads as a plain lock."""
    return _KINDS.get(str(mode), "lock")


@dataclass(frozen=True)
class Claim:
    """One acquisition attempt, from the first try to the release.

    ``token`` authorises release/renewal: random, >= 128 bits, per acquisition, never derived from the owner id.
    ``owner`` is informational only (``host:pid:thread-or-task``) and never used for authorisation.
    """

    name: str
    mode: Mode
    token: str
    owner: str
    ttl: float
    #: a semaphore's capacity as its user declared it (``store.semaphore(name, permits=N)``); None: the capacity
    #: stored on the server governs (``permits=None``). 1 for every other mode
    permits: int | None = 1
    fair: bool = False
    value: str | None = None  # an election candidate's value (``store.election``); None for a lock
    #: a READ claim taken by the owner of the name's WRITE holding: that holding's token (a downgrade). The
    #: write holding excludes everyone else, so the backend grants the read at once, whoever waits
    companion: str | None = None
    #: the permits this holding takes of a semaphore, all or nothing (``acquire(permits=n)``); 1 for every other mode
    want: int = 1

    @property
    def record(self) -> str:
        """What the backends that keep an owner string store for this claim (``owner_record``)."""
        return owner_record(self.owner, self.value)


#: between the owner id and an election candidate's value in the owner string of the backends that keep one
#: (Redis, Redlock, the SQL lease tables, SQLite). Owner ids never contain it (``owner_record``).
VALUE_SEPARATOR = "\x1f"


def owner_record(owner: str, value: str | None) -> str:
    """The stored owner string: the owner id, then (elections only) the separator and the value."""
    owner = owner.replace(VALUE_SEPARATOR, " ")
    return owner if value is None else owner + VALUE_SEPARATOR + value


def split_record(record: str) -> tuple[str, str | None]:
    """(owner id, election value or None) of a stored owner string."""
    owner, sep, value = record.partition(VALUE_SEPARATOR)
    return (owner, value) if sep else (owner, None)


@dataclass(frozen=True)
class Grant:
    """The answer to one attempt.

    ``retry_after``: seconds after which trying again is worth it even without a wake-up
    (typically the current holder's remaining lease); ``None`` if the backend cannot tell.
    """

    acquired: bool
    fence: int | None = None
    retry_after: float | None = None
    valid_for: float | None = None  # lease validity counted from the attempt's start; None = the claim's TTL
    place: int | None = None  # refused: the claim's place (sequence number) in the server's queue, if reported
    #: refused: the deadline this try wrote on the claim's queue entry (server clock), where a release that
    #: hands the name over echoes it (SQL lease mode on PostgreSQL: ``docs/sql.md``, direct hand-over)
    queued_until: float | None = None


@dataclass(frozen=True)
class HolderInfo:
    """One holder of a name. ``owner`` is the owner id (``host:pid:thread-or-task``); ``client_name`` the
    name of the holder's store (``connect(..., client_name=...)``), None if it had none."""

    owner: str
    fence: int | None
    mode: str
    ttl_left: float | None  # seconds left on the lease; None where the backend has sessions, not TTLs
    value: str | None = None  # an election leader's value; None for a lock holder
    client_name: str | None = None
    permits: int | None = None  # a semaphore holding's permits; None for every other kind

    def __post_init__(self) -> None:
        # the backends pass the stored owner string, which carries the client name (ids.owner_id): split here,
        # the one place every backend's holders pass through
        if self.client_name is None:
            owner, client = ids.split_owner(self.owner)
            if client is not None:
                object.__setattr__(self, "owner", owner)
                object.__setattr__(self, "client_name", client)

    @classmethod
    def of_record(cls, record: str, fence: int | None, mode: str, ttl_left: float | None) -> HolderInfo:
        """A holder whose owner string may carry an election value (``owner_record``)."""
        owner, value = split_record(record)
        return cls(owner, fence, mode, ttl_left, value)


@dataclass(frozen=True)
class LockInfo:
    """What [`Store.inspect`][distlock.Store.inspect] and [`Store.list`][distlock.Store.list] report. Tokens are
    never exposed."""

    name: str
    kind: str
    holders: tuple[HolderInfo, ...]
    waiters: int | None = None  # None where the backend cannot tell
    #: a semaphore's capacity in force (None: another kind, or the backend cannot tell)
    permits: int | None = None
    #: a semaphore's permits held now: the sum of its holders' ``permits`` (None for another kind)
    taken: int | None = None
    #: the permits a semaphore's waiters ask for in all (None: another kind, or the backend cannot tell)
    waiting_permits: int | None = None

    def weighed(self, capacity: int | None, waiting_permits: int | None) -> LockInfo:
        """This semaphore's info with its capacity, the permits its holders take (each holder's ``permits``,
        1 where unknown) and the permits its waiters want."""
        holders = tuple(h if h.permits is not None else replace(h, permits=1) for h in self.holders)
        taken = sum(h.permits or 1 for h in holders)
        return replace(self, holders=holders, permits=capacity, taken=taken, waiting_permits=waiting_permits)

    def to_json(self) -> dict[str, object]:
        """The stable ``--json`` layout of the CLI (documented in docs/cli.md); a semaphore's also has its
        capacity, permits taken and waiting, and each holder's permits."""
        weights: dict[str, object] = {}
        if self.kind == "semaphore":
            weights = {"permits": self.permits, "taken": self.taken, "waiting_permits": self.waiting_permits}
        return {
            "name": self.name,
            "kind": self.kind,
            "waiters": self.waiters,
            **weights,
            "holders": [
                {
                    "owner": h.owner,
                    "fence": h.fence,
                    "mode": h.mode,
                    "ttl_left": None if h.ttl_left is None else round(h.ttl_left, 3),
                    **({} if h.value is None else {"value": h.value}),
                    **({} if h.client_name is None else {"client_name": h.client_name}),
                    **({} if h.permits is None else {"permits": h.permits}),
                }
                for h in self.holders
            ],
        }


@dataclass(frozen=True)
class PrimitiveInfo:
    """A count-down latch or a barrier as ``distlock list`` shows it (a latch: ``count`` left of ``initial``; a
    barrier: the open generation's live arrivals, and the members of tripped generations that have not seen
    their trip yet)."""

    name: str
    kind: str  # "latch", "barrier" or "double barrier"
    count: int | None = None
    initial: int | None = None
    arrived: int | None = None
    tripped: int | None = None

    def to_json(self) -> dict[str, object]:
        """The ``--json`` layout of ``list`` (docs/cli.md)."""
        if self.kind == "latch":
            return {"name": self.name, "kind": self.kind, "count": self.count, "initial": self.initial}
        return {"name": self.name, "kind": self.kind, "arrived": self.arrived, "tripped": self.tripped}


def primitive_infos(
    latches: Iterable[tuple[str, int, int]], barriers: Iterable[tuple[str, str, PrimitiveInfo | None]], prefix: str
) -> list[PrimitiveInfo]:
    """``list``'s latches and barriers, by name then kind: ``latches`` as (name, initial, count) rows (a latch at
    zero is shown until its marker goes), ``barriers`` as (kind, name, summary) (None: nothing live in it)."""
    out = [PrimitiveInfo(n, "latch", count=c, initial=i) for n, i, c in latches if n.startswith(prefix)]
    out += [s for _kind, n, s in barriers if s is not None and n.startswith(prefix)]
    return sorted(out, key=lambda p: (p.name, p.kind))


@dataclass(frozen=True)
class LeaderInfo:
    """What [`Store.leader`][distlock.Store.leader] and [`Store.observe`][distlock.Store.observe] report of an
    election's leader.

    ``term`` is the leadership's fence: strictly increasing over all leaderships of the name, unchanged by
    ``proclaim``. ``owner`` is None where the wire layout has no room for it (etcd, ZooKeeper: the value is
    all a candidate's key or node holds, as in Go's and Curator's elections)."""

    name: str
    value: str | None
    owner: str | None
    term: int | None
    ttl_left: float | None
    client_name: str | None = None  # the leader's store's client name, where the layout keeps the owner

    @classmethod
    def of(cls, info: LockInfo | None) -> LeaderInfo | None:
        if info is None or not info.holders:
            return None
        h = info.holders[0]
        owner = h.owner if h.owner and not h.owner.startswith("unknown:") else None
        return cls(info.name, h.value, owner, h.fence, h.ttl_left, h.client_name)

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "value": self.value,
            "owner": self.owner,
            "term": self.term,
            "ttl_left": None if self.ttl_left is None else round(self.ttl_left, 3),
            **({} if self.client_name is None else {"client_name": self.client_name}),
        }


@dataclass(frozen=True)
class Capabilities:
    """What a backend can give; checked when a lock object is built (``UnsupportedFeature``)."""

    modes: frozenset[Mode] = field(default_factory=lambda: frozenset(Mode))
    fair: bool = True  # supports fair=True (FIFO) at all
    always_fair: bool = False  # FIFO whatever the option says (ZooKeeper, etcd)
    needs_renewal: bool = True  # leases that the store's renewer must extend (False: sessions)
    elections: bool = False  # store.election(): claims carry a value, and proclaim() and watch() work
    downgrade: bool = False  # a write holder may take the read lock of its name (``Claim.companion``)

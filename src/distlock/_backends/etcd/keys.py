"""etcd key layout and the grant rule, with no I/O (the backend is ``_async/`` in this folder).

Layout (the one of etcd's Go ``concurrency.Mutex``, so ``etcdctl lock NAME`` interoperates):

* a contender of lock ``NAME`` is the key ``NAME/<lease id in lowercase hex>``, attached to that
  contender's own lease; its *create revision* orders the queue and is the fence.
* read-write locks use the marker segments of etcd's Go ``recipes.RWMutex``: ``NAME/read/<hex>`` and
  ``NAME/write/<hex>`` (the recipe's own keys, ``NAME/read/<UnixNano>``, are recognised too); semaphores
  use ``NAME/sem/<hex>``.
* who the contender is (owner id, mode, semaphore permits) is the *value* of its own key (JSON), written
  with it in one put. So everything distlock writes for a name lives inside ``NAME/``, the same range a Go
  ``concurrency.Mutex`` needs: an etcd role granted the prefix of the names (or just ``NAME/``) is enough,
  and a role scoped to another prefix can neither read nor delete any of it. Go's Mutex and ``etcdctl
  lock`` write an empty value and never read values (only keys and create revisions), so the queue they
  see has the same keys, revisions and leases as before. distlock 0.1 kept the owner record in a second key,
  ``\\x00distlock/owner/<hex>``, outside every prefix; holders written by 0.1 show as ``unknown:lease:<hex>``.
* an election ``NAME`` (``store.election``) is the layout of Go's ``concurrency.Election``, which is the
  Mutex's queue with a value: a candidate is the same key ``NAME/<hex>`` on its lease, and its value is the
  candidate's value as raw bytes (no owner record), so ``etcdctl elect NAME`` and Go candidates queue with
  distlock's; the leader is the smallest create revision and its term is that revision; a proclaim is a
  put of the new value on the same key and lease guarded by ``CreateRevision(key) == term``, which keeps
  the create revision. ``inspect`` reports a value that is not an owner record as the holder's ``value``
  (an empty one, as Go's Mutex writes, as none), with the owner ``unknown:lease:<hex>``.

Grant rule, FIFO by create revision (``ahead`` = contenders of the name with a smaller revision):

* lock / write: nobody ahead; wait for the delete of the last one ahead (the predecessor only).
* read: no lock/write/semaphore contender ahead; wait for the last such one.
* semaphore with ``permits`` N: fewer than N ahead; wait for the delete of any of those ahead.

Keys under ``NAME/`` that do not parse as one of the shapes above (for example ``NAME/x/<hex>`` of the
lock ``NAME/x``) are someone else's and ignored.

Names kept apart (``name_refused``): the keys of a lock ``P/read``, ``P/write`` or ``P/sem`` would be
``P/read/<hex>`` and so on, the very keys of the read-write lock or semaphore ``P``: no reader could tell them
apart (Go's Mutex writes an empty value, so not even the owner record says which). Such a name is refused.
Every other key ``K/[marker/]<hex>`` parses as a contender of exactly one name (what precedes its last one or
two segments), so two other names never share a key and the reader of one never counts the other's. The
store's own keys (the 0.1 owner records, the count-down latches' ``\x00distlock/latch/NAME\x00``, the barriers'
``\x00distlock/barrier/NAME\x00`` and ``\x00distlock/dbarrier/NAME\x00``) start with a
NUL byte, which no name contains.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..._core.arbiter import Capacity
from ..._core.types import Mode

MARKERS: dict[Mode, bytes] = {
    Mode.EXCLUSIVE: b"",
    Mode.READ: b"read/",
    Mode.WRITE: b"write/",
    Mode.SEMAPHORE: b"sem/",
}
_HEX = re.compile(rb"[0-9a-f]{1,16}")
#: after a marker also the decimal UnixNano ids of Go's recipes.RWMutex (``NAME/read/1700000000123456789``)
_ID = re.compile(rb"[0-9a-f]{1,20}")
_TAIL = re.compile(
    rb"^(?P<base>.+?)/(?:(?P<marker>read|write|sem)/(?P<id>[0-9a-f]{1,20})|(?P<hex>[0-9a-f]{1,16}))$", re.S
)


# -- encoding ------------------------------------------------------------------------------------------
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


#: the segments after a name that mark a contender's mode (``NAME/read/<id>``)
MARKER_SEGMENTS = ("read", "write", "sem")


def name_refused(name: str) -> str | None:
    """Why ``name`` cannot be an etcd lock name (see the module docstring), or None."""
    parent, _, last = name.rpartition("/")
    if parent and last in MARKER_SEGMENTS:
        return (
            f"on etcd a lock name may not end in '/{last}': its keys would be those of the read-write lock or "
            f"semaphore {parent!r} ({parent}/{last}/<lease>); choose another last segment"
        )
    return None


#: the prefix of every count-down latch's key (``_async/latch.py``): a NUL byte first, like the store's own keys
LATCH_PREFIX = b"\x00distlock/latch/"


def latch_key(name: str) -> bytes:
    """The key of the count-down latch ``name``: in no lock's range (NUL first), and no other latch's prefix
    (NUL last: no name has one)."""
    return LATCH_PREFIX + name.encode("utf-8") + b"\x00"


#: the prefix of every barrier's (and double barrier's) key (``_async/barrier.py``): NUL first, like the latches'
BARRIER_PREFIXES = {"barrier": b"\x00distlock/barrier/", "double barrier": b"\x00distlock/dbarrier/"}


def barrier_key(kind: str, name: str) -> bytes:
    """The key of the barrier (or double barrier) ``name``: in no lock's range, no latch's, no other barrier's
    prefix (it ends with a NUL byte)."""
    return BARRIER_PREFIXES[kind] + name.encode("utf-8") + b"\x00"


def lock_prefix(name: str) -> bytes:
    return name.encode("utf-8") + b"/"


def lock_key(name: str, mode: Mode, lease: int) -> bytes:
    return lock_prefix(name) + MARKERS[mode] + format(lease, "x").encode("ascii")


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


def _record(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        return None
    return body if isinstance(body, dict) and "owner" in body else None


def take_of(c: Contender) -> int:
    """The permits a semaphore contender takes (1 where its record does not say: an older distlock's)."""
    body = _record(c.value)
    take = body.get("take", 1) if body is not None else 1
    return take if isinstance(take, int) and take >= 1 else 1


def terms_of(raw: bytes) -> Capacity | None:
    """The semaphore's terms a contender's record carries (declared, in force), or None (not a distlock record)."""
    body = _record(raw)
    if body is None or body.get("mode") != Mode.SEMAPHORE.value:
        return None
    declared, cap = body.get("permits"), body.get("cap", body.get("permits"))
    if not (isinstance(declared, int) and isinstance(cap, int) and declared >= 1 and cap >= 1):
        return None
    return Capacity(declared, cap)


def resized(raw: bytes, capacity: int, held: bool = False) -> bytes | None:
    """A semaphore contender's record with ``capacity`` in force (its other fields, a release request
    included, kept), marked ``held`` if asked; None if it is no distlock semaphore record."""
    body = _record(raw)
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
    body = _record(c.value)
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


def nudge_key(name: str) -> bytes:
    """``NAME/sem``: put and deleted again (on a lease of its own) by ``set_permits``, so that the delete event
    wakes the semaphore's waiters, who watch it along with the keys ahead of theirs. No contender's key (no
    lease id after it) and no other name's (``NAME/sem`` is refused as a name)."""
    return lock_prefix(name) + b"sem"


def election_value(raw: bytes) -> str | None:
    """The election value of a key's value: None for an owner record (a distlock lock) and for an empty value
    (Go's ``Mutex``, ``etcdctl lock``); otherwise the bytes as text (undecodable bytes replaced)."""
    if not raw or parse_owner(raw)[0] is not None:
        return None
    return raw.decode("utf-8", "replace")


def parse_owner(raw: bytes) -> tuple[str | None, int | None]:
    try:
        data = json.loads(raw)
        return str(data["owner"]), int(data["permits"])
    except (ValueError, KeyError, TypeError):
        return None, None


# -- release requests ------------------------------------------------------------------------------------
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


def mod_is(key: bytes, mod: int) -> dict[str, object]:
    """The compare ``ModRevision(key) == mod``: nobody wrote the key since it was read."""
    return {"key": b64(key), "target": "MOD", "result": "EQUAL", "mod_revision": str(mod)}


# -- contenders ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Contender:
    key: bytes
    mode: Mode
    rev: int  # create revision: queue order and fence
    lease: int
    value: bytes = b""  # the key's value (owner record, election value; empty for Go's Mutex, or keys-only)
    mod: int = 0  # mod revision: the last write of the key (its create, a resize, a release request)


def mode_of(prefix: bytes, key: bytes) -> Mode | None:
    """The mode of ``key`` if it is a contender of the lock whose prefix is ``prefix``, else None."""
    if not key.startswith(prefix):
        return None
    rest = key[len(prefix) :]
    for mode, marker in MARKERS.items():
        if marker and rest.startswith(marker) and _ID.fullmatch(rest[len(marker) :]):
            return mode
    return Mode.EXCLUSIVE if _HEX.fullmatch(rest) else None


def contenders(prefix: bytes, kvs: Iterable[dict[str, Any]]) -> list[Contender]:
    """Parse a range response's ``kvs`` (JSON gateway form) into the name's contenders, oldest first."""
    out = []
    for kv in kvs:
        key = unb64(kv.get("key"))
        mode = mode_of(prefix, key)
        if mode is not None:
            rev, lease = int(kv.get("create_revision") or 0), int(kv.get("lease") or 0)
            mod = int(kv.get("mod_revision") or 0)
            out.append(Contender(key, mode, rev, lease, unb64(kv.get("value")), mod))
    out.sort(key=lambda c: c.rev)
    return out


def split_key(key: bytes) -> tuple[str, Mode] | None:
    """``NAME/[marker/]<hex>`` -> (NAME, mode), for ``list`` over arbitrary prefixes. Exact for every name
    ``name_refused`` accepts (a key under a refused name ``P/read`` reads as the read-write lock ``P``'s,
    which is what it is to every reader)."""
    if key.startswith(b"\x00"):
        return None
    m = _TAIL.match(key)
    if m is None:
        return None
    marker = m.group("marker")
    mode = {b"read": Mode.READ, b"write": Mode.WRITE, b"sem": Mode.SEMAPHORE}.get(marker or b"", Mode.EXCLUSIVE)
    try:
        return m.group("base").decode("utf-8"), mode
    except UnicodeDecodeError:
        return None


@dataclass(frozen=True)
class Decision:
    acquired: bool
    watch: tuple[Contender, ...] = ()  # contenders whose delete may let us in (empty when acquired)


def decide(queue: Sequence[Contender], my_rev: int, mode: Mode, permits: int, want: int = 1) -> Decision:
    """The grant rule of the module docstring for the contender with create revision ``my_rev`` (a semaphore's:
    ``permits`` = its capacity in force, ``want`` = the permits this contender takes)."""
    ahead = [c for c in queue if c.rev < my_rev]
    if mode is Mode.SEMAPHORE:
        # every contender ahead counts with its take, holder or waiter (etcd's queue is always fair); one of
        # another kind fills the semaphore
        if sum(take_of(c) if c.mode is Mode.SEMAPHORE else permits for c in ahead) + want <= permits:
            return Decision(True)
        return Decision(False, tuple(ahead))
    if mode is Mode.READ:
        ahead = [c for c in ahead if c.mode is not Mode.READ]
    if not ahead:
        return Decision(True)
    return Decision(False, (ahead[-1],))


def holders(queue: Sequence[Contender], permits: int | None) -> list[Contender]:
    """Who holds the name now, for ``inspect`` (a semaphore's: the oldest contenders whose takes fit ``permits``,
    its capacity in force if known; the first one always)."""
    if not queue:
        return []
    first = queue[0]
    if first.mode is Mode.SEMAPHORE:
        out: list[Contender] = []
        used = 0
        for c in queue:
            used += take_of(c) if c.mode is Mode.SEMAPHORE else (permits or 1) + 1
            if out and not (c.mode is Mode.SEMAPHORE and (marked_held(c) or used <= (permits or 1))):
                break
            out.append(c)
        return out
    if first.mode is Mode.READ:
        out = []
        for c in queue:
            if c.mode is not Mode.READ:
                break
            out.append(c)
        return out
    return [first]


def queue_kind(queue: Sequence[Contender]) -> str:
    modes = {c.mode for c in queue}
    if modes & {Mode.READ, Mode.WRITE}:
        return "rwlock"
    if Mode.SEMAPHORE in modes:
        return "semaphore"
    return "lock"


# -- JSON gateway request bodies -----------------------------------------------------------------------
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
    whatever the queue's length. Read through ``tail_contenders``."""
    op = range_op(prefix, prefix_end(prefix))
    op.update({"sort_order": "DESCEND", "sort_target": "CREATE", "limit": str(TAIL)})
    if upto is not None:
        op["max_create_revision"] = str(upto)
    return op


def tail_contenders(prefix: bytes, kvs: Sequence[dict[str, Any]]) -> list[Contender] | None:
    """The contenders of a ``tail_range`` answer, oldest first; None if it cannot be trusted alone: a full
    answer with a key that is no contender (another lock's, nested under this name) may hide one further
    ahead, so the caller reads the whole queue instead."""
    found = contenders(prefix, kvs)
    if len(kvs) >= TAIL and len(found) < len(kvs):
        return None
    return found


def create_is(key: bytes, rev: int) -> dict[str, object]:
    """The compare ``CreateRevision(key) == rev`` (``rev=0``: the key does not exist)."""
    return {"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": str(rev)}


def sem_range(name: str) -> bytes:
    """The prefix of a semaphore's contender keys, ``NAME/sem/``."""
    return lock_prefix(name) + MARKERS[Mode.SEMAPHORE]


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

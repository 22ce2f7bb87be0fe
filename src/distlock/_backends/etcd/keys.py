"""etcd key layout, with no I/O (the backend is ``_async/`` in this folder): the keys of a name's contenders,
latches and barriers, and the parse of a range read into the name's queue. Beside it, each in a module of its own:
what a contender's key holds (``records.py``), a semaphore's terms in those records (``semaphore.py``), the
grant rule over the queue (``rule.py``) and the JSON gateway's request bodies (``ops.py``).

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

The grant rule over that queue (``rule.py``) is FIFO by create revision.

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

import re
from collections.abc import Iterable, Sequence
from typing import Any

from ..._core.types import Mode
from .ops import (
    TAIL,
    b64,
    create_is,
    delete_op,
    kvs_of,
    lease_ttl_seconds,
    mod_is,
    none_under,
    prefix_end,
    prefix_range,
    put_op,
    quiet_under,
    range_op,
    tail_range,
    unb64,
    unchanged,
)
from .records import (
    Contender,
    election_value,
    key_value,
    owner_value,
    parse_owner,
    revoke_reason,
    revoke_value,
    sem_value,
)
from .rule import Decision, decide, holders, queue_kind
from .semaphore import marked_held, resized, shrink_marks, stored_terms, take_of, terms_of

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


def sem_range(name: str) -> bytes:
    """The prefix of a semaphore's contender keys, ``NAME/sem/``."""
    return lock_prefix(name) + MARKERS[Mode.SEMAPHORE]


def nudge_key(name: str) -> bytes:
    """``NAME/sem``: put and deleted again (on a lease of its own) by ``set_permits``, so that the delete event
    wakes the semaphore's waiters, who watch it along with the keys ahead of theirs. No contender's key (no
    lease id after it) and no other name's (``NAME/sem`` is refused as a name)."""
    return lock_prefix(name) + b"sem"


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


def tail_contenders(prefix: bytes, kvs: Sequence[dict[str, Any]]) -> list[Contender] | None:
    """The contenders of a ``tail_range`` answer, oldest first; None if it cannot be trusted alone: a full
    answer with a key that is no contender (another lock's, nested under this name) may hide one further
    ahead, so the caller reads the whole queue instead."""
    found = contenders(prefix, kvs)
    if len(kvs) >= TAIL and len(found) < len(kvs):
        return None
    return found


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


#: the layout, and the names of the modules beside it that this one held before they got modules of their own
#: (``records.py``, ``semaphore.py``, ``rule.py``, ``ops.py``): importable from here as before
__all__ = ["BARRIER_PREFIXES", "LATCH_PREFIX", "MARKERS", "MARKER_SEGMENTS", "TAIL", "Contender", "Decision",
    "b64", "barrier_key", "contenders", "create_is", "decide", "delete_op", "election_value", "holders",
    "key_value", "kvs_of", "latch_key", "lease_ttl_seconds", "lock_key", "lock_prefix", "marked_held", "mod_is",
    "mode_of", "name_refused", "none_under", "nudge_key", "owner_value", "parse_owner", "prefix_end",
    "prefix_range", "put_op", "queue_kind", "quiet_under", "range_op", "resized", "revoke_reason", "revoke_value",
    "sem_range", "sem_value", "shrink_marks", "split_key", "stored_terms", "tail_contenders", "tail_range",
    "take_of", "terms_of", "unb64", "unchanged"]  # fmt: skip

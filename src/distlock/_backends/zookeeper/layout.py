"""ZooKeeper wire layout, shared with Apache Curator's lock recipes: the nodes' paths, their order and the grant
rule. Pure logic: no I/O. What the nodes hold (owner records, a capacity, release requests) is ``records.py``.

Names -> znode paths
    A lock name maps to ``<root>/<name>`` (root ``/distlock`` by default); a name starting with ``/`` is an
    absolute path used as is (so ``"/distlock/x"`` and ``"x"`` are the same lock under the default root).
    A name whose every ``/``-separated part is a valid znode name (non-empty, not ``.``/``..``, no
    character ZooKeeper refuses, and no ``%``) is used unchanged, so Curator on the same path meets it.
    Any other name is escaped part by part: ``%``, refused characters (control characters, and what Java
    stores as surrogates: every character above U+FFEF or in U+D800..U+F8FF, e.g. emoji) become ``%XX``
    per UTF-8 byte, ``.``/``..`` become ``%2E``/``%2E%2E``, an empty part becomes ``%``. Unchanged paths
    contain no ``%`` and escaped ones always do, and escaping is reversible, so two names never share a path.

Children of a lock path (what Curator creates, protected with a per-attempt UUID)
    mutex                ``_c_<uuid>-lock-<seq>``                  (InterProcessMutex, lock name ``lock-``)
    read / write         ``_c_<uuid>-__READ__<seq>`` / ``_c_<uuid>-__WRIT__<seq>``  (InterProcessReadWriteLock)
    semaphore            ``<path>/locks/_c_<uuid>-lock-<seq>`` (a mutex serialising lease creation) and
                         ``<path>/leases/_c_<uuid>-lease-<seq>`` (InterProcessSemaphoreV2)
    election             ``_c_<uuid>-latch-<seq>``                 (LeaderLatch, lock name ``latch-``), its data the
                         candidate's value in UTF-8 (Curator's participant id); the first by sequence leads
    ``<seq>`` is ZooKeeper's 10-digit sequence. Children are ordered by the text after the LAST marker
    (Curator's ``standardFixForSorting``). A contender is a child of that shape (``is_contender``:
    ``[_c_<id>-]<marker><seq>``, whoever created it); any other child is the path of a longer name (the lock
    ``<path>/x`` of the name ``NAME/x``) or a semaphore's ``locks`` / ``leases``, and no reader counts it.

A semaphore's capacity (Curator's ``SharedCount``, which ``InterProcessSemaphoreV2`` can follow)
    ``<path>/%count``    a persistent node holding the capacity in force: a 4-byte big-endian int, changed by
                         a versioned setData (``SharedCount.trySetCount``; distlock's ``set_permits``). A
                         Curator peer follows it with ``new SharedCount(client, "<path>/%count", seed)``.
    ``<path>`` (data)    the capacity its first user declared, the same 4-byte int (Curator ignores it): a
                         resize changes ``%count`` only, so the users built with the first size go on.
    ``%count`` is never a lock path's part (an escaped part carries ``%`` followed by two upper-case hex
    digits, or is ``%`` alone), so no name's nodes meet it. A weighted holding of ``n`` permits is ``n``
    leases created in one multi request, with the capacity and the declared size when it is the first
    (so the leases share one czxid: the fence), by the holder of the internal mutex once ``n`` more fit.

Release requests (``Store.request_release``; Curator's ``Revoker``)
    A request is written into the holder node's data (``records.py`` says how it reads); ``revoke_data`` here
    picks what it writes by the node's kind: an election leader's value unchanged, a distlock owner record with
    the reason, Curator's ``__REVOKE__`` on any other lock node, nothing on another client's semaphore lease.

Names kept apart (``name_refused``)
    Two names never share a path (above), and every reader counts only contender-shaped children of its own
    path, ``<path>/locks`` and ``<path>/leases``. So a name collides with another only where its path IS one
    of those: ``P/locks`` and ``P/leases`` are the semaphore ``P``'s internal nodes (Curator's layout fixes
    them), and a path whose last part is contender-shaped would be counted in its parent's queue. Such names
    are refused, as are the root itself (every name lives under it) and ``/zookeeper`` (the server's own).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..._core.types import Mode
from .records import (
    REVOKE_MESSAGE,
    count_bytes,
    count_of,
    latch_data,
    latch_holder,
    node_data,
    parse_data,
    revoke_reason,
    semaphore_holders,
)

DEFAULT_ROOT = "/distlock"
PROTECTED = "_c_"
MUTEX_MARK = "lock-"
READ_MARK = "__READ__"
WRITE_MARK = "__WRIT__"
LEASE_MARK = "lease-"
LATCH_MARK = "latch-"
SEM_LOCKS = "locks"
SEM_LEASES = "leases"
SEM_COUNT = "%count"

MARK_OF_MODE = {Mode.EXCLUSIVE: MUTEX_MARK, Mode.READ: READ_MARK, Mode.WRITE: WRITE_MARK}


# -- names <-> paths -----------------------------------------------------------------------------------
def _char_ok(ch: str) -> bool:
    """Would ZooKeeper's PathUtils accept this character (it checks Java UTF-16 code units)?"""
    c = ord(ch)
    if c <= 0x1F or 0x7F <= c <= 0x9F:
        return False
    if 0xD800 <= c <= 0xF8FF or c >= 0xFFF0:  # surrogates (every non-BMP char), private use, specials
        return False
    return True


def _plain(part: str) -> bool:
    return bool(part) and part not in (".", "..") and "%" not in part and all(_char_ok(ch) for ch in part)


def _escape(part: str) -> str:
    if not part:
        return "%"
    if part in (".", ".."):
        return "%2E" * len(part)
    out = []
    for ch in part:
        if ch != "%" and _char_ok(ch):
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def _unescape(part: str) -> str:
    if part == "%":
        return ""
    raw = bytearray()
    i = 0
    while i < len(part):
        if part[i] == "%" and _is_hex(part[i + 1 : i + 3]):
            raw.append(int(part[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(part[i].encode("utf-8"))
            i += 1
    return raw.decode("utf-8", errors="replace")


def _is_hex(s: str) -> bool:
    return len(s) == 2 and all(c in "0123456789abcdefABCDEF" for c in s)


def check_root(root: str) -> str | None:
    """None if ``root`` is a usable absolute znode path, else what is wrong with it."""
    if not root.startswith("/") or root == "/":
        return "root must be an absolute znode path other than / (e.g. /distlock)"
    parts = root[1:].split("/")
    if not all(_plain(p) for p in parts):
        return "root must be a plain znode path (no empty parts, '.', '..', '%' or control characters)"
    if parts[0] == "zookeeper":
        return "root must not be under /zookeeper (reserved by the server)"
    return None


def lock_path(name: str, root: str = DEFAULT_ROOT) -> str:
    """The znode path of lock ``name`` (see the module docstring)."""
    if name.startswith("/"):
        base, parts = "", name[1:].split("/")
    else:
        base, parts = root, name.split("/")
    if all(_plain(p) for p in parts):
        return base + "/" + "/".join(parts)
    return base + "/" + "/".join(_escape(p) for p in parts)


def name_of(path: str, root: str = DEFAULT_ROOT) -> str:
    """The lock name that maps to ``path`` (the inverse of ``lock_path`` for paths under ``root``)."""
    if path.startswith(root + "/"):
        rel, absolute = path[len(root) + 1 :], False
    else:
        rel, absolute = path[1:], True
    parts = rel.split("/")
    if "%" in rel:
        parts = [_unescape(p) for p in parts]
    joined = "/".join(parts)
    return "/" + joined if absolute else joined


def name_of_escaped(child: str, root: str = DEFAULT_ROOT) -> str:
    """The name whose latch or barrier node (a child of the store's latches' or barriers' parent) is ``child``:
    the inverse of their escaping of the lock path (``%`` as ``%25``, then ``/`` as ``%2F``)."""
    return name_of("/" + child.replace("%2F", "/").replace("%25", "%"), root)


def name_refused(name: str, root: str = DEFAULT_ROOT) -> str | None:
    """Why ``name`` cannot be a lock name under ``root`` (see the module docstring), or None."""
    path = lock_path(name, root)
    parent, _, last = path.rpartition("/")
    if parent and last in (SEM_LOCKS, SEM_LEASES):
        return (
            f"on ZooKeeper a lock name may not end in '/{last}': {path} is an internal node of the semaphore "
            f"at {parent} (Curator's layout); choose another last segment"
        )
    if is_contender(last):
        return f"on ZooKeeper a lock name may not end in {last!r}: that is the shape of a lock's queue node"
    if path == root:
        return f"{name!r} is the root of the store's lock names; name a lock below it"
    if path == "/zookeeper" or path.startswith("/zookeeper/"):
        return "/zookeeper is reserved by the ZooKeeper server; choose another path"
    return None


# -- children ------------------------------------------------------------------------------------------
#: a queue child: Curator's protected ``_c_<id>-`` (optional: a client without protection), a marker, and
#: ZooKeeper's sequence (``%010d``: 10 digits, or a sign and 9 or 10 once the parent's counter wrapped past 2^31)
_CONTENDER = re.compile(
    "(?:"
    + re.escape(PROTECTED)
    + ".*-)?(?:"
    + "|".join(re.escape(m) for m in (MUTEX_MARK, READ_MARK, WRITE_MARK, LEASE_MARK, LATCH_MARK))
    + ")(?P<seq>[0-9]{10}|-[0-9]{9,10})",
    re.S,
)


def is_contender(child: str) -> bool:
    """Whether ``child`` is a queue node (of a lock, read-write lock, election or semaphore lease)."""
    return _CONTENDER.fullmatch(child) is not None


def contenders(children: list[str]) -> list[str]:
    """The queue nodes among a path's children: the rest (longer names' paths, a semaphore's ``locks`` and
    ``leases``) is no contender."""
    return [c for c in children if is_contender(c)]


def protected_prefix(uuid: str) -> str:
    return f"{PROTECTED}{uuid}-"


def child_prefix(uuid: str, mark: str) -> str:
    """What we ask ZooKeeper to create (it appends the 10-digit sequence)."""
    return f"{protected_prefix(uuid)}{mark}"


def find_own(children: list[str], uuid: str) -> str | None:
    """Our child among ``children`` by its protected prefix (after a create whose reply was lost: F8)."""
    prefix = protected_prefix(uuid)
    for child in children:
        if child.startswith(prefix):
            return child
    return None


def _fix_for_sorting(child: str, mark: str) -> str:
    i = child.rfind(mark)
    if i < 0:
        return child
    return child[i + len(mark) :]


def sort_key(child: str, marks: tuple[str, ...]) -> str:
    """Curator's sort key: strip up to the last occurrence of each marker, in order."""
    for mark in marks:
        child = _fix_for_sorting(child, mark)
    return child


#: every queue marker: children of one path are ordered by the sequence after whichever marker they carry
QUEUE_MARKS = (MUTEX_MARK, READ_MARK, WRITE_MARK, LATCH_MARK)


#: the queue sort key of children seen lately: a long queue is listed again and again with mostly the same names,
#: and the key (four searches per name) was a good part of a listing's client CPU
_QUEUE_KEYS: dict[str, str] = {}
_QUEUE_KEYS_MAX = 65536


def _queue_key(child: str) -> str:
    key = _QUEUE_KEYS.get(child)
    if key is None:
        if len(_QUEUE_KEYS) >= _QUEUE_KEYS_MAX:
            _QUEUE_KEYS.clear()  # names of children long gone: start again (a dict op; safe across threads)
        key = _QUEUE_KEYS[child] = sort_key(child, QUEUE_MARKS)
    return key


#: the sort keys of the queue children ``queue`` saw lately (contenders only: a name here is a contender)
_CONTENDER_KEYS: dict[str, str] = {}


def queue(children: list[str]) -> list[str]:
    """``sort_children(contenders(children))`` in one pass, the listing of a lock's queue on the grant path: a
    child seen lately is one dict lookup; a new one one match, which both tells a contender and reads its
    sequence. A queue marker (not a lease's) directly before the sequence makes Curator's key the sequence
    itself: no marker occurs within the digits, none overlaps the marker ending before them, so each strip
    leaves that marker and what follows it."""
    keys = _CONTENDER_KEYS
    keyed: list[tuple[str, str]] = []
    for child in children:
        key = keys.get(child)
        if key is None:
            m = _CONTENDER.fullmatch(child)
            if m is None:
                continue
            seq = m["seq"]
            key = sort_key(child, QUEUE_MARKS) if child.endswith(LEASE_MARK + seq) else seq
            if len(keys) >= _QUEUE_KEYS_MAX:
                keys.clear()  # names of children long gone: start again (a dict op; safe across threads)
            keys[child] = key
        keyed.append((key, child))
    keyed.sort(key=_first)
    return [child for _, child in keyed]


def _first(pair: tuple[str, str]) -> str:
    return pair[0]


def sort_children(children: list[str]) -> list[str]:
    """Order the children of a lock path as Curator does.

    On a path used by one kind only (Curator's case) this is exactly Curator's order. On a path where a
    mutex and a read-write lock meet, children of both kinds are ordered by sequence, so they exclude
    each other among distlock clients (Curator itself does not order such a mix: do not rely on it).
    """
    return sorted(children, key=_queue_key)


@dataclass(frozen=True)
class Verdict:
    """Whether our child holds the lock, else which child to watch (its deletion may let us in)."""

    acquired: bool
    watch: str | None = None


class NodeGone(Exception):
    """Our own child is not among the children (session expired, or deleted by an admin)."""


def standard_verdict(ordered: list[str], ours: str, max_leases: int = 1) -> Verdict:
    """Mutex and write lock (Curator's StandardLockInternalsDriver): in if fewer than ``max_leases`` precede."""
    try:
        index = ordered.index(ours)
    except ValueError:
        raise NodeGone(ours) from None
    if index < max_leases:
        return Verdict(True)
    return Verdict(False, ordered[index - max_leases])


def read_verdict(ordered: list[str], ours: str, own_writer: str | None = None) -> Verdict:
    """Read lock (Curator's readLockPredicate): in unless a write (or mutex) child precedes ours; in at once
    while ``own_writer``, the write child of the same owner, is there (a downgrade: Curator's "the write lock is
    owned by the current thread").

    Curator watches the FIRST preceding writer; we watch the nearest one: the grant rule is the same, and
    readers queued behind a later writer are not woken when an earlier writer leaves.
    """
    last_writer: str | None = None
    if own_writer is not None and own_writer in ordered and ours in ordered:
        return Verdict(True)
    for child in ordered:
        if child == ours:
            return Verdict(True) if last_writer is None else Verdict(False, last_writer)
        if WRITE_MARK in child or MUTEX_MARK in child:
            last_writer = child
    raise NodeGone(ours)


def verdict(mode: Mode, ordered: list[str], ours: str, own_writer: str | None = None) -> Verdict:
    if mode is Mode.READ:
        return read_verdict(ordered, ours, own_writer)
    return standard_verdict(ordered, ours, 1)


def blocks_alone(mode: Mode, ordered: list[str], ours: str, watched: str) -> bool:
    """Whether ``watched`` is the only child of ``ordered`` (a listing) that keeps ``ours`` from holding.

    If so, once ``watched`` is gone ``ours`` holds without a new listing: children only ever leave the part of
    the queue ahead of ``ours`` (a new child gets a higher sequence; names are never reused), and under either
    rule a child that leaves never turns a grant into a wait."""
    rest = [c for c in ordered if c != watched]
    try:
        return verdict(mode, rest, ours).acquired
    except NodeGone:
        return False


def holders_of(mode_children: list[str]) -> tuple[list[str], int]:
    """For inspect: (holding children, waiter count) of a mutex / read-write lock path."""
    if not mode_children:
        return [], 0
    ordered = sort_children(mode_children)
    if READ_MARK not in ordered[0]:
        return ordered[:1], len(ordered) - 1
    held = []
    for child in ordered:
        if READ_MARK not in child:
            break
        held.append(child)
    return held, len(ordered) - len(held)


def mark_of(mode: Mode, value: str | None) -> str:
    """The marker of a claim's child: an election candidate (a claim with a value) is a LeaderLatch node."""
    return LATCH_MARK if value is not None else MARK_OF_MODE[mode]


def is_latch(child: str) -> bool:
    return LATCH_MARK in child


def mode_of_child(child: str) -> str:
    if WRITE_MARK in child:
        return Mode.WRITE.value
    if READ_MARK in child:
        return Mode.READ.value
    if LEASE_MARK in child:
        return Mode.SEMAPHORE.value
    return Mode.EXCLUSIVE.value


# -- a semaphore's capacity ---------------------------------------------------------------------------------
def count_path(path: str) -> str:
    """The node of the capacity in force of the semaphore at ``path`` (Curator's SharedCount)."""
    return f"{path}/{SEM_COUNT}"


# -- release requests ----------------------------------------------------------------------------------------
def revoke_data(data: bytes | None, child: str, reason: str) -> bytes | None:
    """A holder node's data with a release request in it: an election leader's value unchanged (the new
    version is the request), a distlock owner record with ``"revoke": reason`` added, and Curator's
    ``__REVOKE__`` on any other lock node. None for another client's semaphore lease: Curator's semaphore
    has no revocation, and its lease's data is its own."""
    if is_latch(child):
        return data or b""
    try:
        body = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict) and isinstance(body.get("owner"), str):
        body["revoke"] = reason
        return json.dumps(body, separators=(",", ":")).encode()
    if LEASE_MARK in child:
        return None
    return REVOKE_MESSAGE


#: the layout, and what the nodes hold (``records.py``), which this module held before it got a module of its own:
#: importable from here as before
__all__ = ["DEFAULT_ROOT", "LATCH_MARK", "LEASE_MARK", "MARK_OF_MODE", "MUTEX_MARK", "PROTECTED", "QUEUE_MARKS",
    "READ_MARK", "REVOKE_MESSAGE", "SEM_COUNT", "SEM_LEASES", "SEM_LOCKS", "WRITE_MARK", "NodeGone", "Verdict",
    "blocks_alone", "check_root", "child_prefix", "contenders", "count_bytes", "count_of", "count_path",
    "find_own", "holders_of", "is_contender", "is_latch", "latch_data", "latch_holder", "lock_path", "mark_of",
    "mode_of_child", "name_of", "name_of_escaped", "name_refused", "node_data", "parse_data", "protected_prefix",
    "queue", "read_verdict", "revoke_data", "revoke_reason", "semaphore_holders", "sort_children", "sort_key",
    "standard_verdict", "verdict"]  # fmt: skip

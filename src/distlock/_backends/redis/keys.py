"""Key layout of the Redis backends (single node, Redis Cluster and each Redlock master). No I/O here.

Keys of one lock name ``N`` (all but the first carry the hash tag ``{N}``, so when ``N`` itself has no
braces every key hashes to the same Redis Cluster slot as ``N``). Every one of them exists only while the
name is held or waited on (and ``{N}:qd`` for a few seconds more, while a cut mark lasts): the last release
(or lease end) removes them all::

    N               string  the exclusive holder (lock / rwlock.write): value = token, PX = lease.
                            The redis-py ``Lock(N)`` layout, so the two exclude each other (the wire layout docs/redis.md documents).
    {N}:r           zset    readers:        token -> lease end (ms, server clock)
    {N}:p           zset    semaphore:      token -> lease end (ms, server clock)
    {N}:i           hash    holder details: token -> "mode|fence|owner" (for inspect and fences; the mode of a
                            semaphore holding of n > 1 permits is "semaphore:n", its weight); the owner
                            part is the claim's record: an election leader's has its value after the owner id
                            and a 0x1F byte (``Claim.record``), which ``proclaim`` rewrites in place.
                            A release request to a holder is the field "<token>!r" -> "revoke|-1|<id>|<reason>"
                            (no token ends in "!r"), which the holder's renewal returns and its release deletes
    {N}:q           zset    waiters:        "mode|token" -> arrival sequence (FIFO order)
    {N}:qd          zset    waiter leases:  "mode|token" -> deadline (ms); a waiter that stops
                            refreshing its entry drops out (F12 in docs/safety.md). Also "gone|token" ->
                            the end of a cut mark: the abandon of an acquire whose try was let go of
                            mid-call (cancelled, its link lost) keeps it a few seconds, and that try,
                            should it reach the server later, grants and queues nothing
    {N}:qa          hash    hand-over:      "mode|token" -> "stamp|ttl ms|marker|owner" of an exclusive
                            waiter that takes a direct hand-over (the release grants it the name in the
                            same step, with a lease capped at its queue deadline): what the grant writes,
                            and the send stamp of the try that wrote it, which the grant's push echoes
                            (docs/models/redis_handover.pml); of a semaphore waiter that wants more than one
                            permit, that number. Written and dropped with the waiter's entry
    {N}:qw          hash    reply channel:  "mode|token" -> the channel on which the waiter's store reads its
                            own wake-ups (``reply_channel``): a release pushes the first waiter's wake-up or
                            hand-over there, so it reaches that one store only. Written and dropped with the
                            waiter's entry; an entry without one (a waiter of an older version, or one whose
                            reply channel was not confirmed at its try) is woken on ``{N}:wake`` as before
    {N}:sem         hash    a semaphore's terms while it is in use: d = the capacity its first user declared,
                            c = the capacity in force (``set_permits`` changes it). Written by the grant or the
                            queue entry of the claim that finds none, kept (PEXPIRE) at least as long as every
                            semaphore holder's lease and waiter's deadline, deleted with the last of them
    {N}:fence       string  0.1.0 only (a per-name counter that never went away): read once, folded into the
                            fence counter below and deleted by the first script that meets it (upgrade)
    {N}:wake        channel wake-ups: a release publishes the token of the first waiter, "*" = all, or
                            "token|fence|stamp" when it granted that waiter the name (a hand-over);
                            elections add ``NOTICE`` (a leader was granted, proclaimed, released or
                            abandoned), which no waiter takes for its own wake-up and every observer does.
                            The wake-up of a waiter with a reply channel goes there instead
    {N}:wake:<id>   channel a store's reply channel for the name (``id``: one per pub/sub connection): the
                            same messages as ``{N}:wake``, for that store's waiters only. Every store that
                            waits on a name subscribes to both; with one shared channel, each release woke
                            every process waiting on the name to read a message meant for one

A count-down latch of the name ``N`` (``store.latch``) has a key and a channel of its own, in the slot of the
name's keys, which no lock script touches::

    {N}:latch       hash    round, initial, count: the latch while its count is above 0; at 0 the done
                            marker, which expires ``linger`` seconds later (PEXPIRE)
    {N}:latch       channel the count-down that reaches 0 publishes there (channels and keys are apart in Redis;
                            a lock's channels end in ``:wake`` or ``:wake:<id>``)

A barrier of the name ``N`` (``store.barrier``, ``store.double_barrier``) is one string key, in the same slot,
which no lock or latch script touches::

    {N}:barrier     string  the JSON record of ``_core/barrier.py``: the open generation and its arrivals'
    {N}:dbarrier    string  leases, the tripped markers; replaced whole by a compare-and-set script, with
                            PEXPIRE at its last lease or marker's end, deleted when empty

Fences come from one counter that does not grow with the names (the 8th key, ``counter_key``):

    C                         hash  on a single node (and on each Redlock master): one per database
    C:{T}                     hash  on Redis Cluster: one per hash slot, T = the fixed tag of the name's slot
                                    (``slot_tag``), so the counter lives in the slot of the name's keys
                              fields: n = the last fence handed out (HINCRBY), e = the marker (below)

``C`` is ``distlock:fences`` unless the store URL names another key (``?fence_counter=app/fences``, checked
by ``check_counter``): a tenant whose ACL covers only its own key pattern keeps its counter there.

On a node (single, Sentinel, each Cluster slot) a fence is ``max(n + 1, server time in microseconds)``, so a
counter that was lost or went back starts again above every earlier fence (docs/models/fence_counter.pml).
The marker ``e`` is how a lost counter is noticed. A flush, an eviction or a restart without persistence
removes the whole hash, marker included. On a node, ``e`` is a random epoch written with a new counter;
a store that sees another epoch than before logs that the counter was lost (the fences need nothing). On a Redlock
master, ``e`` is the server's run id at the time the counter was seeded (the client reads the run id on
each new connection and sends it with the acquire; a restart closes every connection): a master whose
marker is missing or names another run (it restarted, even from older data, or was flushed) is *not seeded*: it still votes
for the lock but its counter counts toward no fence until the client re-seeds it from a majority of
seeded masters (``FENCE_FLOOR``), or, when a majority answers with fewer of them seeded, from the largest
of their counters and clocks (an unseeded master reports its clock in microseconds). ``docs/models/redlock_fence.pml`` models that rule.

Names kept apart (``name_refused``): the keys above after ``N`` are ``{N}:<suffix>`` and no two names
share one of those (the text before ``}:<suffix>`` is the name). The first key is the name itself, though, so a
name shaped like another name's key (``{job}:i``, ``{job}:q``, ...), or like the fence counter (``C``, the
per-slot ``C:{T}``; the default ``distlock:fences`` too, whatever this store's counter is, since stores with the
default share the database), would be someone else's key: such names are refused, and so is a
``fence_counter`` shaped like a name's key. A key of the name that holds another type (created by something
else than distlock) is refused by every script before it writes anything (``DISTLOCK-WRONGTYPE``).

Every script gets the same eleven KEYS (the eight above in their order, then ``{N}:qa``, ``{N}:qw`` and ``{N}:sem``:
``keys``), and the wake-up channel
(``channel``) as ``ARGV[1]``: ``lua/`` holds the scripts, ``calls.py`` packs the calls
and decodes the replies.
"""

from __future__ import annotations

import binascii
import functools
import re

#: the default fence counter of a single node or Redlock master (one per database); on Redis Cluster the
#: prefix of the per-slot counters ``distlock:fences:{<tag of the slot>}``. URL option ``fence_counter``.
NODE_COUNTER = "distlock:fences"
SLOTS = 16384
#: how many KEYS every script gets (``keys``)
NKEYS = 11
#: the wake-up message of an election's observers: the leader or its value may have changed. Not a token (those
#: are hex) and not "*" (that wakes every waiter), so a waiter's listener never takes it for its own turn.
NOTICE = "!leader"


def slot_of(key: str) -> int:
    """The Redis Cluster hash slot of ``key`` (CRC16/XMODEM of the hash tag, or of the key, mod 16384)."""
    data = key.encode()
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


@functools.lru_cache(maxsize=1)
def _slot_tags() -> tuple[str, ...]:
    """A fixed table: for every slot, the smallest decimal string that hashes to it (every client computes
    the same table, ~40 ms once)."""
    tags: list[str | None] = [None] * SLOTS
    left, i = SLOTS, 0
    while left:
        s = binascii.crc_hqx(str(i).encode(), 0) % SLOTS
        if tags[s] is None:
            tags[s] = str(i)
            left -= 1
        i += 1
    return tuple(t for t in tags if t is not None)


def slot_tag(slot: int) -> str:
    return _slot_tags()[slot]


#: the suffixes of a name's keys after its hash tag (``{N}:r``, ...: ``keys``)
SUFFIXES = ("r", "p", "i", "q", "qd", "fence", "qa", "qw", "sem")
#: the suffix of a name's count-down latch (``latch_key``): refused as a lock name's tail like the others
LATCH_SUFFIX = "latch"
#: the suffixes of a name's barrier records (``barrier_key``): refused as a lock name's tail too
BARRIER_SUFFIXES = {"barrier": "barrier", "double barrier": "dbarrier"}
#: a key of some name N other than N itself: ``{N}:<suffix>``
_NAME_KEY = re.compile(r"\{.+\}:(?:" + "|".join((*SUFFIXES, LATCH_SUFFIX, *BARRIER_SUFFIXES.values())) + ")", re.S)


def _counter_shaped(name: str, counter: str) -> bool:
    """Is ``name`` the fence counter ``counter``, or one of its per-slot counters ``counter:{T}``?"""
    return name == counter or re.fullmatch(re.escape(counter) + r":\{[0-9]+\}", name) is not None


def name_refused(name: str, counter: str = NODE_COUNTER) -> str | None:
    """Why ``name`` cannot be a lock name of a store whose fence counter is ``counter`` (see the module
    docstring), or None."""
    if _NAME_KEY.fullmatch(name):
        return (
            f"on Redis a lock name may not have the shape {{NAME}}:{name.rsplit(':', 1)[1]}: that is a key of "
            f"the lock {name[1 : name.rindex('}')]!r}; choose another name"
        )
    if _counter_shaped(name, NODE_COUNTER) or _counter_shaped(name, counter):
        return "on Redis a lock name may not be the key of a fence counter; choose another name"
    return None


def check_counter(counter: str, cluster: bool) -> str | None:
    """Why ``counter`` (URL option ``fence_counter``) cannot name the fence counter, or None if it can."""
    if not counter:
        return "fence_counter must not be empty"
    if any(c < " " or c == "\x7f" for c in counter):
        return "fence_counter must not contain control characters (NUL, newline, ...)"
    if _NAME_KEY.fullmatch(counter):
        return f"fence_counter={counter!r} has the shape of a lock's key ({{NAME}}:suffix); choose another key"
    if cluster and ("{" in counter or "}" in counter):
        return (
            f"fence_counter={counter!r}: no braces on Redis Cluster (the counter of each hash slot is "
            "fence_counter:{TAG}, and the first {...} of a key decides its slot)"
        )
    return None


def counter_key(name: str, cluster: bool = False, counter: str = NODE_COUNTER) -> str:
    """The fence counter ``name`` draws from: the node's one counter ``counter``, or on a cluster the counter
    of the slot that the name's keys hash to (``counter:{T}``)."""
    if not cluster:
        return counter
    return counter + ":{" + slot_tag(slot_of("{" + name + "}:r")) + "}"


def keys(name: str, cluster: bool = False, counter: str = NODE_COUNTER) -> list[str]:
    tag = "{" + name + "}"
    return [
        name,
        tag + ":r",
        tag + ":p",
        tag + ":i",
        tag + ":q",
        tag + ":qd",
        tag + ":fence",
        counter_key(name, cluster, counter),
        tag + ":qa",
        tag + ":qw",
        tag + ":sem",
    ]


def barrier_key(kind: str, name: str) -> str:
    """The key of the barrier (``kind`` "barrier") or double barrier ``name``."""
    return "{" + name + "}:" + BARRIER_SUFFIXES[kind]


def latch_key(name: str) -> str:
    """The key of the count-down latch ``name`` (and the channel its count-down to zero publishes on)."""
    return "{" + name + "}:" + LATCH_SUFFIX


def channel(name: str) -> str:
    return "{" + name + "}:wake"


def reply_channel(wake: str, listener_id: str) -> str:
    """The reply channel of the name whose wake-up channel is ``wake``, for one store's pub/sub connection
    (``listener_id``: a hex string). It starts as the wake-up channel does, so an ACL channel pattern that
    covers ``{N}:wake`` covers it too, and it can equal no name's wake-up channel (those end in ``:wake``)."""
    return wake + ":" + listener_id


def fence_key(name: str) -> str:
    """The per-name counter of distlock 0.1.0 (read and removed on upgrade; never written)."""
    return keys(name)[6]


def name_of_info_key(key: str, suffix: str = "i") -> str | None:
    """The lock name of a ``{N}:i`` key found by SCAN (or of a ``{N}:<suffix>`` key: a latch's, a barrier's),
    else None."""
    tail = "}:" + suffix
    if key.startswith("{") and key.endswith(tail):
        return key[1 : -len(tail)]
    return None


def glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)

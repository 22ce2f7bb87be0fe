"""Requests and replies of the Redis scripts: the pre-encoded ``EVALSHA`` of the hot path, the acquire
arguments, lease milliseconds, and the decoded INSPECT reply (``Snapshot``). No I/O here.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..._core.arbiter import Capacity, terms
from ..._core.types import Claim, Grant, HolderInfo, LockInfo, Mode, lock_kind
from .keys import NKEYS, NODE_COUNTER, channel, keys
from .lua import SHA


# -- pre-encoded calls (the hot path of the single-node backend) --------------------------------------------
def _bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def packed_command(*parts: str) -> bytes:
    """The whole RESP request of any command (each part sent as a bulk string)."""
    return b"*%d\r\n" % len(parts) + b"".join(_bulk(p.encode()) for p in parts)


@functools.lru_cache(maxsize=4096)
def _call_head(script: str, name: str, cluster: bool, counter: str) -> tuple[int, bytes]:
    """RESP of ``EVALSHA sha 10 <keys> <channel>`` for one script and name: (number of parts, bytes)."""
    parts = [
        b"EVALSHA",
        SHA[script].encode(),
        b"%d" % NKEYS,
        *(k.encode() for k in keys(name, cluster, counter)),
        channel(name).encode(),
    ]
    return len(parts), b"".join(_bulk(p) for p in parts)


def packed_call(script: str, name: str, *args: str | int, cluster: bool = False, counter: str = NODE_COUNTER) -> bytes:
    """The whole RESP request of ``EVALSHA`` of ``script`` on ``name`` with ``args`` (after the channel):
    byte for byte what redis-py would send, without its per-argument encoding (the keys of a name are
    encoded once and cached; ``counter``: the store's fence counter)."""
    n, head = _call_head(script, name, cluster, counter)
    # the arguments are ASCII but for an owner id or a name in an argument (rare): then a str's length is
    # its length in bytes, and the whole tail is formatted as one str and encoded once (a third cheaper)
    parts = [str(a) for a in args]
    tail = "".join([f"${len(p)}\r\n{p}\r\n" for p in parts])
    if tail.isascii():
        return b"*%d\r\n%s%s" % (n + len(args), head, tail.encode())
    return b"*%d\r\n%s%s" % (n + len(args), head, b"".join(_bulk(p.encode()) for p in parts))


def release_args(claim: Claim, run: str = "") -> tuple[str, str, str, str]:
    """The ARGV of ``release`` after the channel: token, mode, the run-id marker (Redlock; ``run``) and '0' for
    a claim that is no election candidate's: the script then skips reading its details record, which only
    tells it whether observers must be woken (one server call of four on the hot path)."""
    return claim.token, claim.mode.value, run, "0" if claim.value is None else "1"


def ms(seconds: float) -> int:
    """Seconds -> whole milliseconds, rounded UP (a server lease is never shorter than the local one), at
    least 1 (a 0 PX would be an error, never 'forever'). The 1e-6 absorbs binary noise (0.3 s is
    300.00000000000006 ms, which is 300 ms, not 301)."""
    return max(1, math.ceil(seconds * 1000 - 1e-6))


# -- decoding replies --------------------------------------------------------------------------------------
def _s(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


@dataclass(frozen=True)
class Snapshot:
    """One node's view of a name (decoded INSPECT reply)."""

    holder: str  # '' if nobody holds the exclusive key
    holder_pttl: int
    readers: dict[str, int]  # token -> lease end ms
    permits: dict[str, int]
    details: dict[str, tuple[str, int, str]]  # token -> (mode, fence, owner record: owner id [0x1F value])
    waiters: int
    now: int
    capacity: int | None = None  # a semaphore's capacity in force (its stored terms), None if none
    wanted: int = 0  # the permits the semaphore's live waiters want

    def holders(self) -> list[tuple[str, HolderInfo]]:
        """(token, info) of every live holder; a foreign holder (redis-py Lock) shows owner '?'. An election
        leader's record carries its value (``HolderInfo.value``)."""
        out: list[tuple[str, HolderInfo]] = []
        if self.holder:
            mode, fence, owner = self.details.get(self.holder, ("lock", -1, "?"))
            left = None if self.holder_pttl < 0 else self.holder_pttl / 1000.0
            out.append((self.holder, HolderInfo.of_record(owner, fence if fence >= 0 else None, mode, left)))
        for group, mode in ((self.readers, "read"), (self.permits, "semaphore")):
            for token, end in sorted(group.items(), key=lambda kv: kv[1]):
                kind, fence, owner = self.details.get(token, (mode, -1, "?"))
                info = HolderInfo.of_record(owner, fence if fence >= 0 else None, mode, (end - self.now) / 1000.0)
                if mode == "semaphore":
                    info = replace(info, permits=weight_of(kind))
                out.append((token, info))
        return out

    def info(self, name: str) -> LockInfo | None:
        hs = self.holders()
        if not hs:
            return None
        info = LockInfo(name, lock_kind(hs[0][1].mode), tuple(h for _, h in hs), self.waiters)
        return info.weighed(self.capacity, self.wanted) if info.kind == "semaphore" else info


def weight_of(kind: str) -> int:
    """The permits of a semaphore holding, from the mode part of its details ("semaphore" or "semaphore:<n>")."""
    _, _, n = kind.partition(":")
    return int(n) if n.isdigit() else 1


def _pairs(flat: list[object]) -> list[tuple[str, str]]:
    return [(_s(flat[i]), _s(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]


def decode_inspect(reply: list[object]) -> Snapshot:
    holder, pttl, readers, permits, details, waiters, now, stored, wanted = reply
    det: dict[str, tuple[str, int, str]] = {}
    for token, raw in _pairs(details):  # type: ignore[arg-type]
        mode, _, rest = raw.partition("|")
        fence, _, owner = rest.partition("|")
        det[token] = (mode, int(fence), owner)
    return Snapshot(
        holder=_s(holder),
        holder_pttl=int(pttl),  # type: ignore[call-overload]
        readers={t: int(float(e)) for t, e in _pairs(readers)},  # type: ignore[arg-type]
        permits={t: int(float(e)) for t, e in _pairs(permits)},  # type: ignore[arg-type]
        details=det,
        waiters=int(waiters),  # type: ignore[call-overload]
        now=int(now),  # type: ignore[call-overload]
        capacity=int(stored[1]) if stored[1] else None,  # type: ignore[index]
        wanted=int(wanted),  # type: ignore[call-overload]
    )


def renew_reply(reply: object) -> tuple[bool, tuple[str, str] | None]:
    """A RENEW reply: (extended, the release request made to the holder as (id, reason), or None). An
    extended holding with a request pending answers the request's record instead of 1."""
    if isinstance(reply, (bytes, str)) and _s(reply).startswith("revoke|"):
        _, _, request, reason = _s(reply).split("|", 3)
        return True, (request, reason)
    return int(reply) == 1, None  # type: ignore[call-overload]


#: ``acquire_args(..., marker=REDLOCK + run_id)``: a Redlock master (seeded = its marker holds its run id)
REDLOCK = "@"


def permits_arg(claim: Claim) -> str:
    """ARGV[5] of ``acquire``: '<want>:<declared>' (the permits the claim takes; the capacity its user declared,
    '' for none: the stored one governs)."""
    return f"{claim.want}:{'' if claim.permits is None else claim.permits}"


def acquire_args(
    token: str,
    mode: Mode,
    ttl: float,
    permits: str,
    fair: bool,
    owner: str,
    queue_ttl: float,
    marker: str = "",
    stamp: str = "",
    reply: str = "",
    companion: str | None = None,
) -> list[str]:
    """``stamp``: '' (no direct hand-over), or ``stamp_of`` the request's send time (an exclusive claim
    that takes a hand-over: the release that grants it echoes the stamp, see ``handed_over``).
    ``reply``: '' or the waiter's reply channel (``reply_channel``), whose
    subscription was confirmed before this request is sent: its wake-ups go there, to its store only.
    ``companion``: a read claim's own write holding's token (a downgrade, ``Claim.companion``): sent only then."""
    args = [
        token,
        mode.value,
        str(ms(ttl)),
        permits,
        "1" if fair else "0",
        owner,
        str(ms(queue_ttl) if queue_ttl > 0 else 0),
        marker,
        stamp,
        reply,
    ]
    return args if companion is None else [*args, companion]


def stamp_of(sent: float) -> str:
    """A send time on this process's monotonic clock as the hand-over stamp (whole microseconds, rounded
    DOWN: the lease counted from it never starts later than the request was sent)."""
    return str(math.floor(sent * 1e6))


def stamp_time(stamp: str) -> float:
    """The send time a stamp stands for, as a hand-over push echoes it (``HandOver.since``)."""
    return int(stamp) / 1e6


@dataclass(frozen=True)
class HandOver:
    """A release granted this waiter the name (the push ``token|fence|stamp``): its fence, and ``since`` =
    the send time of the waiter's try whose queue entry the grant took (its lease counts from there)."""

    fence: int
    since: float


def handed_over(message: str) -> tuple[str, HandOver] | None:
    """(token, hand-over) of a hand-over push, or None for any other wake-up message (a token, ``*``, a
    notice) or a malformed one (a wake-up then, never a grant)."""
    token, bar, rest = message.partition("|")
    fence, bar2, stamp = rest.partition("|")
    if not bar or not bar2:
        return None
    try:
        return token, HandOver(int(fence), stamp_time(stamp))
    except ValueError:
        return None


def handover_lease(ttl: float, queue_ttl: float) -> float:
    """How long a handed-over lease lasts at least, counted from the stamp: the grant's ``PX`` is the claim's
    TTL capped at the waiter's queue deadline, which its try set ``queue_ttl`` after the stamp or later."""
    return min(ttl, queue_ttl)


#: the first element of an acquire reply whose semaphore claim does not fit the terms of the semaphore in use
MISFIT = 2


def grant_of(reply: Sequence[Any], claim: Claim | None = None) -> Grant:
    """The grant of a single node's acquire reply ``{1, fence, ...}`` or ``{0, ms until a lease ends, ...}``; a
    semaphore claim that does not fit the stored terms ``{2, declared, mark, counter, capacity}`` raises their
    ``ConfigError`` (``arbiter.terms``)."""
    if int(reply[0]) == MISFIT and claim is not None:
        declared, capacity = int(reply[1]), int(reply[4])
        terms(claim, Capacity(declared, capacity) if declared > 0 else None)
        return Grant(False)  # (the same terms fit here: a try again reads them again)
    if int(reply[0]) == 1:
        fence = int(reply[1])
        return Grant(True, fence=fence if fence >= 0 else None)
    left = int(reply[1])
    return Grant(False, retry_after=None if left < 0 else left / 1000.0)

"""A barrier's record and rules, shared by every backend that keeps a barrier as one record (``_async/barrier.py``).
No I/O here.

A barrier of a name lives on the server as one record (JSON), stepped atomically by the backend (a transaction,
or a compare-and-set of the whole record):

* ``gen``: the id of the *open generation*, the one new arrivals join;
* ``open``: its arrivals, each a lease: ``{member id: expiry}`` (milliseconds of the wall clock). A waiter renews
  its own at the first look after a third of it has passed; a member whose process died stops renewing and no longer counts once it expires;
* ``done``: the *tripped marker* of each generation that reached its parties and still has members that did not
  see it: ``{gen: {"members": {member id: expiry}, "until": ms}}``. The arrival that makes ``parties`` moves the
  open members there and opens the next generation, so a member slow to look is released all the same (no
  stranded waiter) and a newcomer joins the next generation (no early release). A member takes itself off the
  marker when it sees it (``wait``) or leaves (double barrier's ``leave``); the marker goes with its last member,
  or ``linger`` after the trip (members that died), whichever is first.

A record with no open member and no marker is deleted: nothing stays of a free name.

Expiries are read against the caller's wall clock: clocks of the participants' hosts must agree within well
under the arrival's ``ttl`` (the same assumption as SQLite's lease rows).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigError
from .types import PrimitiveInfo

#: how long the tripped marker of a generation stays for members that have not seen it yet (seconds)
LINGER = 60.0
#: an arrival's lease by default (seconds): a participant that stops renewing stops counting this long after
TTL = 10.0
#: the most parties a barrier may have
MAX_PARTIES = 100_000

#: the steps a backend applies (``step``)
ARRIVE, LOOK, WITHDRAW, LEAVE, LEFT = "arrive", "look", "withdraw", "leave", "left"
#: the outcomes a step reports
WAITING, TRIPPED, GONE, WITHDRAWN = "waiting", "tripped", "gone", "withdrawn"


@dataclass(frozen=True)
class Op:
    """One step on a barrier record.

    ``kind``: ``ARRIVE`` (join the open generation: the arrival that makes ``parties`` trips it, and stays on
    its marker like every other member), ``LOOK`` (has ``gen`` tripped for ``member``? renews an open
    arrival; with ``consume``, as a single barrier's members do, takes ``member`` off the marker it sees),
    ``WITHDRAW`` (take ``member``'s arrival back, unless its generation tripped; found by ``member`` alone,
    whatever ``gen`` says, as an arrival whose reply was lost has none), ``LEAVE`` (take ``member``
    off its generation's marker), ``LEFT`` (how many members of ``gen`` have not left)."""

    kind: str
    member: str
    gen: str = ""
    parties: int = 0
    ttl: float = TTL
    linger: float = LINGER
    consume: bool = True
    new_gen: str = ""


@dataclass(frozen=True)
class Reply:
    """What a step found: the ``outcome``, the generation concerned and (``LEFT``) how many members are in it."""

    outcome: str
    gen: str
    members: int = 0


def check_parties(parties: object, *, name: str, backend: str) -> int:
    """``parties=`` of a barrier: an int from 1 to ``MAX_PARTIES``."""
    if isinstance(parties, bool) or not isinstance(parties, int) or not 1 <= parties <= MAX_PARTIES:
        raise ConfigError(
            f"barrier parties must be an int from 1 to {MAX_PARTIES}, not {parties!r}", name=name, backend=backend
        )
    return parties


def check_span(value: object, what: str, low: float, *, name: str, backend: str) -> float:
    """``ttl=`` / ``linger=`` of a barrier: a finite number of seconds from ``low`` to a day."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not low <= float(value) <= 86400:  # type: ignore[arg-type]
        raise ConfigError(
            f"barrier {what} must be a number of seconds from {low} to 86400, not {value!r}", name=name, backend=backend
        )
    return float(value)  # type: ignore[arg-type]


def decode(data: bytes | str | None) -> dict[str, Any] | None:
    """The record ``data`` holds; None for no data. Data distlock did not write raises ``ValueError``."""
    if data is None:
        return None
    record = json.loads(data)
    if not (isinstance(record, dict) and isinstance(record.get("open"), dict) and isinstance(record.get("done"), dict)):
        raise ValueError("not a distlock barrier record")
    return record


def encode(record: dict[str, Any] | None) -> str | None:
    return None if record is None else json.dumps(record, sort_keys=True, separators=(",", ":"))


def keep_ms(record: dict[str, Any] | None, now_ms: int) -> int:
    """How long the server may keep ``record`` (its latest expiry from now; at least 1 ms), for stores that
    expire keys themselves (Redis)."""
    if record is None:
        return 1
    ends = list(record["open"].values())
    for marker in record["done"].values():
        ends.append(marker["until"])
        ends.extend(marker["members"].values())
    return max(1, max(ends, default=now_ms) - now_ms)


def spent(record: dict[str, Any], now_ms: int) -> bool:
    """Has every lease and marker of ``record`` ended (all its members died)? Then it may be deleted."""
    rec = json.loads(json.dumps(record))
    _prune(rec, now_ms)
    return not rec["open"] and not rec["done"]


def _prune(record: dict[str, Any], now_ms: int) -> None:
    record["open"] = {m: end for m, end in record["open"].items() if end > now_ms}
    done = {}
    for gen, marker in record["done"].items():
        members = {m: end for m, end in marker["members"].items() if end > now_ms}
        if members and marker["until"] > now_ms:
            done[gen] = {"members": members, "until": marker["until"]}
    record["done"] = done


def summary(kind: str, name: str, data: bytes | str | None, now_ms: int) -> PrimitiveInfo | None:
    """What ``list`` shows of a barrier record: its open generation's live arrivals and the members of tripped
    generations that have not seen their trip; None when nothing in it is live (or it is not distlock's)."""
    try:
        record = decode(data)
    except ValueError:
        return None
    if record is None:
        return None
    rec = json.loads(json.dumps(record))
    _prune(rec, now_ms)
    if not rec["open"] and not rec["done"]:
        return None
    tripped = sum(len(m["members"]) for m in rec["done"].values())
    return PrimitiveInfo(name, kind, arrived=len(rec["open"]), tripped=tripped)


def step(record: dict[str, Any] | None, op: Op, now_ms: int) -> tuple[dict[str, Any] | None, Reply]:
    """The record after ``op`` at ``now_ms`` (None: delete it) and the step's reply. ``record`` is not changed."""
    rec: dict[str, Any] = (
        {"gen": "a" + op.new_gen, "open": {}, "done": {}} if record is None else json.loads(json.dumps(record))
    )
    _prune(rec, now_ms)
    reply = _apply(rec, op, now_ms)
    if not rec["open"] and not rec["done"]:
        return None, reply
    return rec, reply


def _apply(rec: dict[str, Any], op: Op, now_ms: int) -> Reply:
    ttl_ms = int(op.ttl * 1000)
    if op.kind == ARRIVE:
        for gen, marker in rec["done"].items():
            if op.member in marker["members"]:
                return Reply(TRIPPED, gen)  # this arrival tripped it already (a step sent again after a lost reply)
        gen = rec["gen"]
        rec["open"][op.member] = now_ms + ttl_ms
        if len(rec["open"]) < op.parties:
            return Reply(WAITING, gen)
        until = now_ms + int(op.linger * 1000)
        rec["done"][gen] = {"members": dict.fromkeys(rec["open"], until), "until": until}
        rec["open"] = {}
        rec["gen"] = "b" + op.new_gen
        return Reply(TRIPPED, gen)
    if op.kind == WITHDRAW:  # by member alone (ids are unique): an arrival whose reply was lost has no gen
        for gen, marker in rec["done"].items():
            if op.member in marker["members"]:
                if op.consume:
                    del marker["members"][op.member]
                    if not marker["members"]:
                        del rec["done"][gen]
                return Reply(TRIPPED, gen)
        rec["open"].pop(op.member, None)
        return Reply(WITHDRAWN, op.gen)
    marker = rec["done"].get(op.gen)
    if op.kind == LEFT:
        return Reply(TRIPPED, op.gen, 0 if marker is None else len(marker["members"]))
    if marker is not None and op.member in marker["members"]:
        if op.kind == LEAVE or op.consume:
            del marker["members"][op.member]
            if not marker["members"]:
                del rec["done"][op.gen]
        return Reply(TRIPPED, op.gen, len(marker["members"]))
    if op.kind == LEAVE:
        return Reply(GONE, op.gen, 0 if marker is None else len(marker["members"]))
    if rec["gen"] == op.gen and op.member in rec["open"]:
        if rec["open"][op.member] - now_ms < ttl_ms * 2 // 3:
            rec["open"][op.member] = now_ms + ttl_ms  # renewed once a third of it has passed: the looks between
            # write nothing, so many waiters do not collide on the record every few tenths of a second
        return Reply(WAITING, op.gen)
    return Reply(GONE, op.gen)

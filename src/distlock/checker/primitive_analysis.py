"""Pure analysis of a barrier, latch or double barrier run (``--algorithm barrier`` / ``latch`` /
``double-barrier``: the workloads are in ``primitives.py``; no I/O): waits released early, count-downs that
reported a count twice, and the run's report.

A barrier's wait may return only once ``parties`` participants have arrived; a latch's only once its round's
count-downs have all started, each reporting a distinct count on its way to zero; a double barrier's ``enter``
as a barrier's wait, and its ``leave`` only once every other member of the round has started its leave or may
have run out. The report ends with the keys every kind of report ends with (``history.closing``).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .._core.timing import drift_margin
from .history import Fault, Op, closing, percentiles


def early_barrier_releases(arrivals: Sequence[Op], ops: Sequence[Op], parties: int) -> int:
    """Waits released before a trip could have counted ``parties`` arrivals for each generation released so far.

    Every released wait belongs to a tripped generation of ``parties`` arrivals, and a wait's arrival counts in
    one generation at most (a withdrawn one, whose wait returned False, in none). So when the k-th release in
    time order returned, at least ``parties * ceil(k / parties)`` arrivals whose wait did not return False must
    have started (``arrivals``: sent before each wait called, so a killed or paused participant's is there)."""
    withdrawn = {o["op"] for o in ops if o["released"] is False}
    counted = sorted(a["t"] for a in arrivals if a["op"] not in withdrawn)
    early = 0
    released = sorted((o["t_done"] for o in ops if o["released"]), key=float)
    for k, t in enumerate(released, start=1):
        if bisect.bisect_right(counted, t) < parties * math.ceil(k / parties):
            early += 1
    return early


def early_latch_releases(downs: Sequence[Op], ops: Sequence[Op], count: int) -> int:
    """Waits released before ``count`` count-downs of their round had started (``downs``: sent before each
    ``count_down`` is called, so a killed worker's is there): a count cannot reach zero with fewer."""
    starts: dict[int, list[float]] = {}
    for d in downs:
        starts.setdefault(d["round"], []).append(d["t"])
    for times in starts.values():
        times.sort()
    return sum(1 for o in ops if o["released"] and bisect.bisect_right(starts.get(o["round"], []), o["t_done"]) < count)


def repeated_counts(ops: Sequence[Op]) -> int:
    """Count-downs that reported a count above zero another count-down of the same round reported too: each
    step takes exactly one off, so each value above zero is reported once."""
    seen = Counter((o["round"], o["left"]) for o in ops if isinstance(o.get("left"), int) and o["left"] > 0)
    return sum(n - 1 for n in seen.values())


def _rounds(records: Sequence[Op]) -> dict[int, list[Op]]:
    by: dict[int, list[Op]] = {}
    for r in records:
        by.setdefault(r["round"], []).append(r)
    return by


def _withdrawn(o: Op, run_out: float) -> bool:
    """An ``enter`` that returned False within ``run_out`` seconds of its start: its entry was taken back while
    its place was still live, so a trip that had counted it would have said True. One that took longer (a
    member paused in its call) may have been counted by a trip whose marker, or whose members' nodes, went
    meanwhile: it counts as a killed member's entry does."""
    return o["released"] is False and o["t_done"] - o["t_start"] < run_out


def early_enters(enters: Sequence[Op], ops: Sequence[Op], parties: int, run_out: float) -> int:
    """Entries released before ``parties`` entries of their round could have been in: a barrier's wait, round
    by round (``enters``: sent before each ``enter`` is called; ``ops``: the enters' outcomes; ``run_out``: as
    ``early_leaves``')."""
    judged = [o if o["released"] is not False or _withdrawn(o, run_out) else {**o, "released": None} for o in ops]
    outcomes = _rounds(judged)
    return sum(
        early_barrier_releases(arrivals, outcomes.get(r, []), parties) for r, arrivals in _rounds(enters).items()
    )


def early_leaves(enters: Sequence[Op], leaves: Sequence[Op], ops: Sequence[Op], run_out: float) -> int:
    """Leaves released while another member of their round had neither started its leave nor could have run out.

    A member is an entry that was not withdrawn (``_withdrawn``) and whose ``enter`` did not raise; a killed or
    paused member's, with no outcome, counts. It holds the others' leaves until its own leave starts
    (``leaves``: sent before each ``leave`` is called), or ``run_out`` seconds after its entry started: a
    member's place cannot end sooner (the tripped marker lingers that long after a trip, which comes after
    every entry; a ZooKeeper member's node lasts its session, at least its timeout after the entry was made).
    Places end by a clock other than the one the history is on (the marker's end is whole milliseconds of the
    wall clock; a session's, the server's): one that ends within the drift margin of ``run_out``
    (``timing.drift_margin``, as for a lease) is no early leave."""
    out = {o["op"] for o in ops if o.get("phase") == "enter" and (o["released"] is None or _withdrawn(o, run_out))}
    left = {s["op"]: s["t"] for s in leaves}
    run_out -= drift_margin(run_out)
    early = 0
    released = _rounds([o for o in ops if o.get("phase") == "leave" and o["released"]])
    for number, entries in _rounds(enters).items():
        members = [e for e in entries if e["op"] not in out]
        for o in released.get(number, []):
            t = o["t_done"]
            if any(e["op"] != o["op"] and left.get(e["op"], math.inf) > t and e["t"] + run_out > t for e in members):
                early += 1
    return early


def _passes(enters: Sequence[Op], ops: Sequence[Op]) -> Counter[str]:
    """Each member's pass through its round: ``completed`` (entered and left in time), ``timed_out`` (an enter
    or a leave returned False) or ``failed`` (one raised, or the worker was killed before it returned)."""
    outcome = {(o["op"], o.get("phase")): o["released"] for o in ops}
    tally: Counter[str] = Counter()
    for e in enters:
        entered = outcome.get((e["op"], "enter"))
        done = outcome.get((e["op"], "leave")) if entered else entered
        tally["completed" if done else "timed_out" if done is False else "failed"] += 1
    return tally


def analyse_primitive(
    kind: str,
    ops: Sequence[Op],
    steps: Sequence[Op],
    faults: Sequence[Fault],
    *,
    size: int,
    errors: Sequence[str] = (),
    run_out: float = 0.0,
) -> dict[str, Any]:
    """The report of a barrier (``size``: its parties), latch (``size``: each round's count) or double barrier
    (``size``: its members per round; ``run_out``: ``early_leaves``') run."""
    violations: list[str] = []
    extra: dict[str, Any] = {}
    if kind == "double-barrier":
        enters = [s for s in steps if s["kind"] == "enter"]
        entered = [o for o in ops if o.get("phase") == "enter"]
        early = early_enters(enters, entered, size, run_out)
        late = early_leaves(enters, [s for s in steps if s["kind"] == "leave"], ops, run_out)
        passes = _passes(enters, ops)
        left = [o for o in ops if o.get("phase") == "leave" and o["released"]]
        extra = {  # a pass's counts, in place of the enters' (``operations``, ``timed_out``, ``failed``)
            "operations": sum(passes.values()),
            "completed": passes["completed"],
            "timed_out": passes["timed_out"],
            "failed": passes["failed"],
            "leave_ms": percentiles([o["t_done"] - o["t_start"] for o in left]),
            "early_leaves": late,
        }
        if early:
            violations.append(f"{early} enter(s) released before {size} members of their round could have entered")
        if late:
            violations.append(f"{late} leave(s) released while a member of their round had not left nor run out")
        ops = entered  # ``released`` and ``wait_ms`` below are the enters'
    elif kind == "barrier":
        early = early_barrier_releases([s for s in steps if s["kind"] == "arrive"], ops, size)
        if early:
            violations.append(f"{early} wait(s) released before {size} participants could have arrived")
    else:
        early = early_latch_releases([s for s in steps if s["kind"] == "count"], ops, size)
        repeated = repeated_counts(ops)
        extra["repeated_counts"] = repeated
        if early:
            violations.append(f"{early} wait(s) released before {size} count-downs of their round had started")
        if repeated:
            violations.append(f"{repeated} count-down(s) reported a count another one of the round reported")
    released = [o for o in ops if o["released"]]
    if not released:
        violations.append("no wait was released: nothing was checked")
    return {
        "kind": kind,
        "size": size,
        "operations": len(ops),
        "released": len(released),
        "timed_out": sum(1 for o in ops if o["released"] is False),
        "failed": sum(1 for o in ops if o["released"] is None),
        "wait_ms": percentiles([o["t_done"] - o["t_start"] for o in released]),
        "early_releases": early,
        **extra,
        **closing(faults, errors, violations, []),
    }

"""Pure analysis of a barrier or latch run (``--algorithm barrier`` / ``latch``: the workloads are in
``primitives.py``; no I/O): waits released early, count-downs that reported a count twice, and the run's report.

A barrier's wait may return only once ``parties`` participants have arrived; a latch's only once its round's
count-downs have all started, each reporting a distinct count on its way to zero. The report ends with the keys
every kind of report ends with (``history.closing``).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

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


def analyse_primitive(
    kind: str, ops: Sequence[Op], steps: Sequence[Op], faults: Sequence[Fault], *, size: int, errors: Sequence[str] = ()
) -> dict[str, Any]:
    """The report of a barrier (``size``: its parties) or latch (``size``: each round's count) run."""
    violations: list[str] = []
    extra: dict[str, Any] = {}
    if kind == "barrier":
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

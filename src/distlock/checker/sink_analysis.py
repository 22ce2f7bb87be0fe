"""Pure analysis of a ``--sink`` run (no I/O): the data sinks' figures and the at_risk figures.

Per sink and writer, what the resource accepted and refused, and the stale writes among what it accepted (a write
accepted after an access with a higher fence); per fault that hit a lost holding, whether its holder was told
``at_risk`` before ``lost``, and how long before. ``history.analyse`` reports these figures and judges them (its
module docstring says which are verdicts, and why).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .history import Fault, Op


#: the faults after which a lost holding must have been told ``at_risk`` first: its renewals stopped coming back
#: while it ran (a paused process fires both timers at once when it resumes: not judged)
RISK_JUDGED = ("freeze", "half-open")


def _holdings(ops: Sequence[Op], grants: Sequence[Op]) -> dict[str, tuple[int, float, float]]:
    """op id -> (worker, t_acq, t_end): the end is the release call, or never for a holding never reported."""
    out = {g["op"]: (int(g["worker"]), float(g["t_acq"]), math.inf) for g in grants}
    out.update({o["op"]: (int(o["worker"]), float(o["t_acq"]), float(o["t_rel"])) for o in ops})
    return out


def fault_of(holding: tuple[int, float, float] | None, faults: Sequence[Fault]) -> str:
    """The kind of the landed fault that hit this holding's worker while it held the lock, else "none"."""
    if holding is not None:
        worker, start, end = holding
        for f in faults:
            if f.get("landed") and f.get("worker") == worker and start <= f["t"] <= end:
                return str(f["kind"])
    return "none"


def stale_writes(accepted: Sequence[Op]) -> list[Op]:
    """The writes among one resource's accepted accesses (in the order it accepted them) that it accepted after
    an access with a higher fence: a newer holder had started on the resource."""
    best: int | None = None
    stale = []
    for rec in accepted:
        fence = rec.get("fence")
        if fence is None:
            continue
        if rec["kind"] == "write" and best is not None and int(fence) < best:
            stale.append(rec)
        best = int(fence) if best is None else max(best, int(fence))
    return stale


def sink_figures(
    logs: Mapping[str, Mapping[str, Sequence[Op]]],
    ops: Sequence[Op],
    grants: Sequence[Op] = (),
    lost: dict[str, float] | None = None,
    faults: Sequence[Fault] = (),
) -> dict[str, Any]:
    """Per sink and writer (``logs[sink][writer]``: what the resource accepted, in order): the writes tried, the
    stale writes accepted, the writes refused (by the resource's fence check or the writer's lease), and the
    same per fault that hit the holding (``by_fault``). ``after_lost``: accepted writes sent after the holder's
    ``lost`` had fired (reported, not judged: a fenced write that lands before any newer holder is harmless)."""
    lost = lost or {}
    holdings = _holdings(ops, grants)
    out: dict[str, Any] = {}
    for sink, writers in logs.items():
        out[sink] = {}
        for writer, accepted in writers.items():
            key = f"{sink}/{writer}"
            figures: dict[str, Any] = {"writes": 0, "accepted": 0, "stale_accepted": 0, "stale_refused": 0,
                                       "errors": 0, "after_lost": 0, "by_fault": {}}  # fmt: skip

            def count(fault: str, what: str, fig: dict[str, Any] = figures) -> None:
                fig[what] += 1
                per = fig["by_fault"].setdefault(fault, {"writes": 0, "stale_accepted": 0, "stale_refused": 0})
                if what in per:
                    per[what] += 1

            for o in ops:
                outcome = o.get("sinks", {}).get(key)
                if outcome is None or outcome == "n/a":
                    continue
                fault = fault_of(holdings.get(o["op"]), faults)
                count(fault, "writes")
                if outcome == "refused":
                    count(fault, "stale_refused")
                elif outcome != "accepted":
                    count(fault, "errors")
            for rec in stale_writes(accepted):
                count(fault_of(holdings.get(rec["op"]), faults), "stale_accepted")
            writes = [r for r in accepted if r["kind"] == "write"]
            figures["accepted"] = len(writes)
            figures["after_lost"] = sum(1 for r in writes if r["op"] in lost and r["t"] > lost[r["op"]])
            out[sink][writer] = figures
    return out


def at_risk_figures(
    ops: Sequence[Op],
    grants: Sequence[Op],
    lost: dict[str, float],
    at_risk: Mapping[str, Sequence[float]],
    faults: Sequence[Fault],
) -> dict[str, Any]:
    """Per fault that hit the holding ("none": lost without one): the holdings lost while their holder relied on
    them, how many were told ``at_risk`` before ``lost``, only after it, or never, and how long before ``lost`` the
    last ``at_risk`` before it came (min and median, ms; a holding can be at risk, renewed, and at risk again).
    ``in_release``: holdings lost only once ``release()`` had been called (a release whose answer never came),
    not judged: nobody relied on them any more."""
    holdings = _holdings(ops, grants)
    groups: dict[str, dict[str, Any]] = {}
    leads: dict[str, list[float]] = {}
    for op_id, t_lost in lost.items():
        holding = holdings.get(op_id)
        fault = fault_of(holding, faults)
        g = groups.setdefault(fault, {"lost": 0, "before": 0, "after": 0, "never": 0, "in_release": 0})
        if holding is not None and t_lost > holding[2]:
            g["in_release"] += 1  # lost once release() had been called: the holder no longer relied on it
            continue
        g["lost"] += 1
        times = at_risk.get(op_id, ())
        first = max((t for t in times if t <= t_lost), default=None)
        if first is not None:
            g["before"] += 1
            leads.setdefault(fault, []).append(t_lost - first)
        elif times:
            g["after"] += 1
        else:
            g["never"] += 1
    for fault, g in groups.items():
        got = sorted(leads.get(fault, []))
        g["min_ms"] = round(got[0] * 1000, 1) if got else None
        g["median_ms"] = round(statistics.median(got) * 1000, 1) if got else None
        g["judged"] = fault in RISK_JUDGED
    return dict(sorted(groups.items()))

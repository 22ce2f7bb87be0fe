"""Pure analysis of a check run's history (no I/O): what happened, and which guarantees held.

The verdicts, and why each is or is not a safety violation for a *correct* lease lock:

* **fenced stale writes accepted** (must be 0). The fenced register rejects fences below the highest it has seen;
  an accepted write whose value changed since the same holder's read means two holders were let through with
  fences that did not order them. With strictly increasing fences this cannot happen, pauses or not.
* **fence violations** (must be 0): an acquisition whose fence is not greater than the fence of an acquisition
  that had completed before it started waiting, or a fence handed out twice (fences strictly increase per name).
* **silent overlaps** (must be 0): two holdings overlapped in time and *neither* holder was told it had lost the
  lock (``lost`` event, ``LockLost`` from ``release``). No lease lock can prevent every overlap (a holder paused
  past its TTL resumes believing it holds the lock: docs/safety.md, the one principle), but a correct one always tells
  the paused holder afterwards. Timestamps are taken *inside* the holding (after ``acquire`` returned, before
  ``release`` is called) on one monotonic clock, so a correct hand-over never looks like an overlap.
* **unfenced lost updates** are reported, not judged: under the pause fault a correct lock loses them too,
  because the resumed holder writes before it can learn anything. They are the reason fencing exists. When every
  overlap involved a holder that was told, they are "explained".
* **told late** (must be <= 0): for every hand-over of a lock its holder lost (the holder was told, by its
  ``on_lost`` callback or by ``release()``; or another worker was granted the lock while the old holder was
  still inside its critical section), the moment the old holder was told minus the moment the next holder's
  ``acquire()`` returned; when the old holder had already called ``release()`` before that grant (it no longer
  relied on the lock), the moment of that call counts if it came before it was told.
  distlock promises ``lost`` fires before anyone else can be granted the lock, so every value must be <= 0; a
  holder overtaken in its critical section and never told at all counts as infinitely late. Holdings of a process that was stopped (``pause``,
  ``clock-skew``) are not judged: nothing runs in a stopped process, and a server clock jump is invisible to
  the client (fencing covers both). Killed holders are not judged either: they hold nothing once dead.
* **stale writes accepted by a data sink** (``--sink``; must be 0 for the ``fenced`` and ``scoped`` writers): a
  write the resource accepted after it had accepted an access with a higher fence (a newer holder had started
  on it). The ``unfenced`` writer's are expected under pause, reported and not judged: they show the checker
  sees a stale write when one lands (``sink_analysis.sink_figures``).
* **at_risk before lost** (``--sink``; judged under ``freeze`` and ``half-open``): a holding whose renewals stop
  coming back is told ``at_risk`` before ``lost``; how long before is reported per fault (``sink_analysis.at_risk_figures``).
  Not judged under ``pause``: the stopped process's two timers fire together when it resumes.
* **liveness**: after a holder is killed, the lock must become available again within the TTL (plus slack for
  polling and process start-up): ``allowed = 2 * ttl + 1 s``. A lock without a TTL never recovers.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .sink_analysis import at_risk_figures, sink_figures

Op = dict[str, Any]
Fault = dict[str, Any]


def liveness_allowance(ttl: float) -> float:
    return 2.0 * ttl + 1.0


def percentiles(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p99 and max, in milliseconds, of values in seconds (None when there are none)."""
    if not values:
        return {"p50": None, "p99": None, "max": None}
    s = sorted(values)

    def pick(q: float) -> float:
        return round(s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))] * 1000.0, 3)

    return {"p50": pick(0.50), "p99": pick(0.99), "max": round(s[-1] * 1000.0, 3)}


def closing(
    faults: Sequence[Fault], errors: Sequence[str], violations: list[str], liveness_failures: list[str]
) -> dict[str, Any]:
    """The keys every kind of report ends with: the faults injected and landed, the worker errors (five
    samples), the verdict lists and ``ok``."""
    counts = Counter(f["kind"] for f in faults)
    landed = Counter(f["kind"] for f in faults if f.get("landed"))
    return {
        "faults": {k: {"injected": counts[k], "landed": landed[k]} for k in sorted(counts)},
        "errors": len(errors),
        "error_samples": list(errors[:5]),
        "safety_violations": violations,
        "liveness_failures": liveness_failures,
        "ok": not violations and not liveness_failures,
    }


def overlaps(ops: Sequence[Op]) -> tuple[int, int]:
    """(overlapping pairs, overlapping pairs where neither holder was told it lost the lock)."""
    total = silent = 0
    active: list[Op] = []
    for op in sorted(ops, key=lambda o: o["t_acq"]):
        active = [a for a in active if a["t_rel"] > op["t_acq"]]
        for a in active:
            total += 1
            if not a["told"] and not op["told"]:
                silent += 1
        active.append(op)
    return total, silent


def fence_violations(ops: Sequence[Op]) -> int:
    """Acquisitions whose fence was not above every fence granted before they started, or was granted twice."""
    fenced = sorted((o for o in ops if o["fence"] is not None), key=lambda o: o["t_acq"])
    acquired_at = [o["t_acq"] for o in fenced]
    prefix_max: list[int] = []
    best = -(2**63)
    for o in fenced:
        best = max(best, int(o["fence"]))
        prefix_max.append(best)
    bad: set[str] = set()
    for o in fenced:
        before = bisect.bisect_left(acquired_at, o["t_start"])
        if before and int(o["fence"]) <= prefix_max[before - 1]:
            bad.add(o["op"])
    counts = Counter(int(o["fence"]) for o in fenced)
    bad.update(o["op"] for o in fenced if counts[int(o["fence"])] > 1)
    return len(bad)


def recovery_gaps(ops: Sequence[Op], faults: Iterable[Fault], kind: str, run_end: float) -> list[float]:
    """For each landed fault of ``kind``: seconds until someone *else* next acquired (run end if nobody did)."""
    by_acq = sorted(ops, key=lambda o: o["t_acq"])
    gaps = []
    for f in faults:
        if f["kind"] != kind or not f.get("landed"):
            continue
        nxt = next((o["t_acq"] for o in by_acq if o["t_acq"] > f["t"] and o["worker"] != f["worker"]), None)
        gaps.append((nxt if nxt is not None else run_end) - f["t"])
    return gaps


#: what the error reports of the ``fork`` fault's children say: a child that could not lock through the store it
#: inherited, or did not exit, is a liveness failure of the run
FORKED_CHILD = "forked child"

#: faults that stop the holder's process or move the server's clock: the holdings they hit are not judged by
#: the told-late figure (nothing can be told to a stopped process, nor can a client see a server's clock jump)
UNTELLABLE = ("pause", "clock-skew")


def told_late(
    ops: Sequence[Op],
    grants: Sequence[Op] = (),
    lost: dict[str, float] | None = None,
    faults: Sequence[Fault] = (),
) -> dict[str, Any]:
    """The told-late figure over every hand-over of a lost lock (see the module docstring).

    ``grants`` are the ``grant`` events (op, worker, t_acq), also of holdings whose operation was never
    reported (a worker killed, or stuck on a dead link); ``lost`` maps an op to the moment its ``lost`` fired."""
    lost = lost or {}
    hold: dict[str, dict[str, Any]] = {}
    for g in grants:
        hold[g["op"]] = {"worker": g["worker"], "t_acq": g["t_acq"], "t_end": math.inf, "t_told": None}
    for o in ops:
        h = hold.setdefault(o["op"], {"worker": o["worker"], "t_acq": o["t_acq"], "t_told": None})
        h["t_end"] = o["t_rel"]  # from here on the holder no longer relied on the lock
        if o["told"]:
            h["t_told"] = o.get("t_done", o["t_rel"])
    for op_id, t in lost.items():
        h_lost = hold.get(op_id)
        if h_lost is not None and (h_lost["t_told"] is None or t < h_lost["t_told"]):
            h_lost["t_told"] = t
    kills = [f for f in faults if f["kind"] == "kill"]
    stops = [f for f in faults if f["kind"] in UNTELLABLE and f.get("landed")]
    for h in hold.values():
        # a holding whose operation was never reported and whose worker was killed: it died holding the lock,
        # or releasing it (the release may have reached the server before the kill); either way a dead process
        # relies on nothing and can be told nothing
        h["killed"] = h["t_end"] == math.inf and any(f["worker"] == h["worker"] and f["t"] >= h["t_acq"] for f in kills)
    by_acq = sorted(hold.values(), key=lambda h: h["t_acq"])
    starts = [h["t_acq"] for h in by_acq]
    values: list[float] = []
    never = excluded = 0
    for a in by_acq:
        if a["killed"] or any(f["worker"] == a["worker"] and a["t_acq"] <= f["t"] <= a["t_end"] for f in stops):
            excluded += 1
            continue
        nxt = next((b for b in by_acq[bisect.bisect_right(starts, a["t_acq"]) :] if b["worker"] != a["worker"]), None)
        if nxt is None:
            continue
        if a["t_told"] is None:
            if nxt["t_acq"] < a["t_end"]:
                never += 1  # someone else was granted the lock while this holder relied on it, and nobody said
            continue
        if nxt["t_acq"] < a["t_end"]:
            values.append(a["t_told"] - nxt["t_acq"])  # overtaken while it still relied on the lock
        else:
            # it had stopped relying on the lock (release() called) before the next grant: told, or not, by then
            values.append(min(a["t_told"], a["t_end"]) - nxt["t_acq"])
    late = sum(1 for v in values if v > 0)
    return {
        "handovers": len(values) + never,
        "told": len(values),
        "late": late + never,
        "never_told": never,
        "max_ms": round(max(values) * 1000, 3) if values else None,
        "not_judged": excluded,
    }


def analyse(
    ops: Sequence[Op],
    faults: Sequence[Fault],
    final_unfenced: Iterable[str],
    *,
    ttl: float,
    run_end: float,
    errors: Sequence[str] = (),
    grants: Sequence[Op] = (),
    lost: dict[str, float] | None = None,
    sink_logs: Mapping[str, Mapping[str, Sequence[Op]]] | None = None,
    at_risk: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, Any]:
    """The report of one run: counts, timings, verdicts. Layout documented in docs/checker.md. With ``sink_logs``
    (``--sink``), the data sinks' figures and the at_risk figures too."""
    present = set(final_unfenced)
    lost_updates = sum(1 for o in ops if o["op"] not in present)
    fenced = Counter(o["fenced"] for o in ops)
    pairs, silent = overlaps(ops)
    fence_bad = fence_violations(ops)
    kill_gaps = recovery_gaps(ops, faults, "kill", run_end)
    pause_gaps = recovery_gaps(ops, faults, "pause", run_end)
    allowed = liveness_allowance(ttl)
    max_kill_gap = max(kill_gaps, default=None)
    violations: list[str] = []
    if fenced["stale-accepted"]:
        violations.append(f"{fenced['stale-accepted']} stale fenced write(s) accepted")
    if fence_bad:
        violations.append(f"{fence_bad} fence monotonicity violation(s)")
    if silent:
        violations.append(f"{silent} silent overlap(s): two holders at once and neither was told")
    late = told_late(ops, grants, lost, faults)
    if late["late"]:
        worst = f"{late['never_told']} never told" if late["never_told"] else f"up to {late['max_ms']:.0f} ms late"
        violations.append(
            f"{late['late']} of {late['handovers']} hand-over(s) told late: the old holder learned it lost the lock "
            f"after the next holder was granted it ({worst})"
        )
    extra: dict[str, Any] = {}
    if sink_logs is not None:
        extra["sinks"] = sink_figures(sink_logs, ops, grants, lost, faults)
        for sink, writers in extra["sinks"].items():
            for writer, fig in writers.items():
                if writer != "unfenced" and fig["stale_accepted"]:
                    violations.append(f"{fig['stale_accepted']} stale write(s) accepted by the {sink} sink from the "
                                      f"{writer} writer")  # fmt: skip
        extra["at_risk"] = at_risk_figures(ops, grants, lost or {}, at_risk or {}, faults)
        for fault, g in extra["at_risk"].items():
            if g["judged"] and (g["after"] or g["never"]):
                violations.append(f"under {fault}: {g['after'] + g['never']} of {g['lost']} lost holding(s) not told "
                                  "at_risk before lost")  # fmt: skip
    liveness_failures = []
    if max_kill_gap is not None and max_kill_gap > allowed:
        liveness_failures.append(
            f"lock unavailable for {max_kill_gap:.1f}s after its holder was killed (ttl {ttl:g}s, allowed {allowed:g}s)"
        )
    forked = sum(1 for e in errors if FORKED_CHILD in e)
    if forked:
        liveness_failures.append(
            f"{forked} forked child(ren) of a holder could not lock through the store they inherited (see errors)"
        )
    if not ops:
        violations.append("no acquisition completed: nothing was checked")
    return {
        "acquisitions": len(ops),
        "told_lost": sum(1 for o in ops if o["told"]),
        "wait_ms": percentiles([o["t_acq"] - o["t_start"] for o in ops]),
        "hold_ms": percentiles([o["t_rel"] - o["t_acq"] for o in ops]),
        "unfenced": {
            "writes": len(ops),
            "lost_updates": lost_updates,
            "explained": lost_updates == 0 or silent == 0,
        },
        "fenced": {
            "accepted": fenced["accepted"],
            "stale_rejected": fenced["rejected"],
            "stale_accepted": fenced["stale-accepted"],
            "unfenced_lock": fenced["n/a"],
        },
        "fence_violations": fence_bad,
        "overlaps": {"total": pairs, "silent": silent},
        "told_late": late,
        "liveness": {
            "ttl": ttl,
            "allowed_s": allowed,
            "max_unavailable_after_kill_s": None if max_kill_gap is None else round(max_kill_gap, 3),
            "max_unavailable_after_pause_s": None if not pause_gaps else round(max(pause_gaps), 3),
        },
        **extra,
        **closing(faults, errors, violations, liveness_failures),
    }

"""The weighted semaphore of ``distlock check --algorithm semaphore``: the workers' loop, the ``resize`` fault,
and the pure analysis of the history (no I/O in the ``analyse_semaphore`` half).

Every worker loops on one semaphore of capacity ``--permits`` (CAP): it asks for a weight (mostly 1, sometimes
CAP, now and then one in between), holds it briefly, releases. Each holding gets its own semaphore object, so
an ``on_lost`` that runs late is never taken for the next holding's. The worker reports, as they happen:

* ``grant`` when ``acquire`` returned True: the weight, the fence, and the local lease end then
  (``sem.deadline``, on this host's monotonic clock), before the body runs;
* ``lost`` when the holding's ``on_lost`` ran;
* ``op`` after the release (or the refusal, or the timeout): the weight asked, when the request started and
  ended, whether it was granted, and whether ``release()`` said the holding was lost.

A killed worker reports no ``op`` for its last holding: the grant is enough (the analysis ends such a holding
at the kill, see ``holdings``).

The ``resize`` fault (``Resizer``) shrinks the stored capacity with ``set_permits`` from the parent process
for one lease, then sets it back to CAP; both calls are recorded with the moments they started and returned.

The verdicts (``analyse_semaphore``):

* **over-grants** (must be 0): at the moment each holding was granted, the permits of every holding then
  current and not told ``lost`` (itself included) must fit the capacity in force. That is CAP, or, after a
  shrink, the smaller size until the next resize or until the semaphore may have been free (a free semaphore
  keeps nothing on the server, and its next first user declares CAP again): holders granted before a shrink
  keep their permits above the new size, but nobody granted after it may add to them.
* **shared fences** (must be 0): two holdings with one fence.
* **starved big requests** (liveness): a request for CAP permits that waited longer than the bound
  (``starvation_bound``) without being granted; the longest wait of a CAP request is reported with the run's
  length beside it.
"""

from __future__ import annotations

import bisect
import contextlib
import math
import random
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from .._errors import ConfigError, LockError, NotHeld
from .history import UNTELLABLE, closing, liveness_allowance, percentiles

#: the kind this module runs
SEMAPHORE = "semaphore"
#: the capacity when ``--permits`` is not given
DEFAULT_PERMITS = 3

Op = dict[str, Any]


def weight(cap: int, rng: random.Random) -> int:
    """The permits one request asks for: mostly 1, a fifth of the time CAP, now and then one in between."""
    roll = rng.random()
    if cap == 1 or roll < 0.7:
        return 1
    if roll < 0.9:
        return cap
    return rng.randint(1, cap)


def shrunk(cap: int) -> int:
    """The size the ``resize`` fault shrinks a capacity of ``cap`` to (half, at least 1)."""
    return max(1, cap // 2)


def starvation_bound(lease: float) -> float:
    """How long a request for every permit may wait: every holder ahead of it gone, each within its lease even
    when killed or paused, and the fault that held them up over, with room to spare on a busy host."""
    return 3.0 * liveness_allowance(lease)


# -- the worker side -----------------------------------------------------------------------------------------
def run_semaphore(
    index: int, store: Any, name: str, cap: int, ttl: float, hold: float, events: Any, states: Any, end: Any,
    linger: Any,
) -> None:  # fmt: skip
    """The worker loop until the run's end (``states``/``linger``: the shared arrays of ``worker.py``)."""
    from .worker import HOLD_SLEEP, HOLDING, IDLE, LINGER, STAY, WAITING

    rng = random.Random()
    seq = 0
    while time.monotonic() < end.value:
        op_id = f"{index}.{seq}"
        seq += 1
        want = weight(cap, rng)

        def fired(_sem: object, op_id: str = op_id) -> None:
            events.put({"kind": "lost", "worker": index, "op": op_id, "t": time.monotonic()})

        sem = store.semaphore(name, permits=cap, ttl=ttl, on_lost=fired)
        states[index] = WAITING
        t_start = time.monotonic()
        op: Op = {"kind": "op", "worker": index, "op": op_id, "permits": want, "t_start": t_start}
        try:
            got = sem.acquire(timeout=max(0.0, end.value - t_start), permits=want)
        except ConfigError as err:  # a request that no longer fits a shrunk capacity: refused, not granted
            states[index] = IDLE
            events.put({**op, "t_done": time.monotonic(), "granted": False, "refused": str(err)[:200]})
            time.sleep(0.01)
            continue
        except LockError as err:  # BackendError included: reported, and the loop goes on
            states[index] = IDLE
            events.put({**op, "t_done": time.monotonic(), "granted": None})
            events.put({"kind": "error", "worker": index, "error": f"acquire: {err}"})
            time.sleep(0.05)
            continue
        if not got:
            states[index] = IDLE
            events.put({**op, "t_done": time.monotonic(), "granted": False})
            break
        t_acq = time.monotonic()
        states[index] = HOLDING
        fence = sem.fence
        events.put({"kind": "grant", "worker": index, "op": op_id, "t_acq": t_acq, "permits": want, "fence": fence,
                    "lease_end": sem.deadline})  # fmt: skip
        states[index] = HOLD_SLEEP
        time.sleep(rng.uniform(hold / 2, hold))
        if linger is not None and linger[index] == STAY:  # a gray link fault: stay until told, as a long job would
            states[index] = LINGER
            while linger[index] and not sem.lost.wait(0.005):
                pass
        t_rel = time.monotonic()
        states[index] = IDLE
        told = sem.lost.is_set()
        try:
            sem.release()
        except NotHeld:  # LockLost included: the holder is told
            told = True
        except LockError as err:
            events.put({"kind": "error", "worker": index, "error": f"release: {err}"})
        events.put({**op, "t_acq": t_acq, "t_rel": t_rel, "t_done": time.monotonic(), "granted": True,
                    "fence": fence, "told": told})  # fmt: skip


class Resizer:
    """The ``resize`` fault, from the parent process: ``shrink`` makes the capacity in force ``shrunk(cap)``,
    ``restore`` (a step run one lease later) sets it back to CAP. Each call is recorded in the fault's
    ``changes`` as ``[started, returned, permits, stored]`` (``stored`` False: the semaphore was free, and
    nothing was stored)."""

    def __init__(self, url: str | None, name: str, cap: int) -> None:
        self.url, self.name, self.cap = url, name, cap
        self._store: Any = None

    def _set(self, record: dict[str, Any], permits: int) -> None:
        if self._store is None:
            from .._sync.store import connect

            self._store = connect(self.url)
        t = time.monotonic()
        try:
            stored: bool | None = bool(self._store.semaphore(self.name, permits=None).set_permits(permits))
        except ConfigError:  # permits=None on a free semaphore: nothing stored, nothing to resize
            stored = False
        except LockError:  # the call may or may not have landed
            stored = None
        record["changes"].append([t, time.monotonic(), permits, stored])

    def shrink(self, record: dict[str, Any]) -> None:
        record.setdefault("changes", [])
        self._set(record, shrunk(self.cap))
        record["landed"] = record["changes"][-1][3] is not False

    def restore(self, record: dict[str, Any]) -> None:
        self._set(record, self.cap)

    def close(self) -> None:
        if self._store is not None:
            with contextlib.suppress(LockError):
                self._store.close()


# -- the analysis (pure) -------------------------------------------------------------------------------------
def holdings(ops: Sequence[Op], grants: Sequence[Op], lost: dict[str, float], faults: Sequence[Op]) -> list[Op]:
    """Every granted holding with the interval in which its holder relied on it without having been told it was
    lost: from ``acquire`` returning to the first of ``release()`` called, ``lost`` fired, or ``release()``
    saying it was lost. A holding whose worker was stopped (``pause``) relied on nothing once its process
    stopped, but its permits stay taken on the server until its lease ends: it counts until the later of the
    stop and its lease end at the grant (renewals only move that later, so the server cannot have freed them
    sooner). A killed holder's permits may come back at once (SQLite sees that the holder's process is gone, a
    session-mode server that its connection closed), and under ``clock-skew`` the server's clock ends the lease
    early by design (fencing's case): such a holding counts until the fault."""
    by_op = {o["op"]: o for o in ops if o.get("granted")}
    out: list[Op] = []
    for g in grants:
        op = by_op.get(g["op"])
        end = math.inf
        if op is not None:
            end = op["t_rel"]
            if op.get("told"):
                end = min(end, op["t_done"])
        if g["op"] in lost:
            end = min(end, lost[g["op"]])
        for f in faults:
            if f.get("worker") != g["worker"] or not f.get("landed") or not g["t_acq"] <= f["t"] <= end:
                continue
            if f["kind"] == "pause" and g.get("lease_end") is not None:
                end = min(end, max(f["t"], g["lease_end"]))
            elif f["kind"] in ("kill", *UNTELLABLE):
                end = min(end, f["t"])
        out.append({"op": g["op"], "worker": g["worker"], "t_acq": g["t_acq"], "end": end,
                    "permits": int(g["permits"]), "fence": g.get("fence")})  # fmt: skip
    return sorted(out, key=lambda h: h["t_acq"])


def capacity_at(
    t_start: float, t_acq: float, cap: int, changes: Sequence[Sequence[Any]], covered: Any
) -> int:  # fmt: skip
    """The largest capacity that can have been in force when a request that started at ``t_start`` and returned
    at ``t_acq`` was granted. ``changes``: the resize calls ``[started, returned, permits, stored]``; a call
    overlapping the request may have landed before or after the grant (both count). ``covered(a, b)``: some
    holding was current without a break over ``[a, b]`` (else the semaphore may have been free meanwhile, and
    its next first user declared CAP again)."""
    last: Sequence[Any] | None = None
    possible = set()
    for change in sorted(changes, key=lambda c: c[0]):
        started, returned, permits, stored = change
        if started > t_acq:
            break
        if returned <= t_start:
            last = change
        elif stored is not False:
            possible.add(int(permits))
    if last is None or last[3] is not True or not covered(last[0], t_acq):
        possible.add(cap)  # before any resize, after a call that may not have landed, or free meanwhile
    else:
        possible.add(int(last[2]))
    return max(possible)


def _coverage(held: Sequence[Op]) -> Any:
    """``covered(a, b)``: holdings (their client-side intervals, which lie inside the server's) cover [a, b]."""
    spans: list[list[float]] = []
    for h in held:  # sorted by t_acq
        if spans and h["t_acq"] <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], h["end"])
        else:
            spans.append([h["t_acq"], h["end"]])
    starts = [s[0] for s in spans]

    def covered(a: float, b: float) -> bool:
        i = bisect.bisect_right(starts, a) - 1
        return i >= 0 and spans[i][1] > b

    return covered


def held_at_grants(held: Sequence[Op]) -> list[tuple[Op, int]]:
    """Each holding with the permits held, at the moment it was granted, by the holdings then current and not
    told ``lost`` (itself included). One sweep: only holdings not yet ended stay in the window."""
    out = []
    active: list[Op] = []
    for h in held:  # sorted by t_acq
        now = h["t_acq"]
        active = [o for o in active if o["end"] > now]
        active.append(h)
        out.append((h, sum(o["permits"] for o in active)))
    return out


def over_grants(held: Sequence[Op], ops: Sequence[Op], cap: int, changes: Sequence[Sequence[Any]] = ()) -> list[Op]:
    """The holdings whose grant took the permits of holders not told ``lost`` past the capacity in force (see the
    module docstring); each returned with ``held`` (the permits then) and ``capacity``."""
    started: dict[str, float] = {o["op"]: o["t_start"] for o in ops}
    covered = _coverage(held)
    bad = []
    for h, taken in held_at_grants(held):
        now = float(h["t_acq"])
        allowed = capacity_at(started.get(h["op"], now), now, cap, changes, covered) if changes else cap
        if taken > allowed:
            bad.append({**h, "held": taken, "capacity": allowed})
    return bad


def shared_fences(held: Sequence[Op]) -> int:
    """Holdings whose fence another holding had too."""
    counts = Counter(int(h["fence"]) for h in held if h["fence"] is not None)
    return sum(n for n in counts.values() if n > 1)


def big_waits(ops: Sequence[Op], cap: int, run_end: float) -> list[tuple[float, bool]]:
    """(seconds waited, granted) of each request for all CAP permits that ended (granted, or given up at the
    run's end); a request that failed with an error is left out (its wait says nothing of fairness)."""
    out = []
    for o in ops:
        if o["permits"] != cap or o.get("granted") is None or o.get("refused"):
            continue
        done = o["t_acq"] if o["granted"] else min(o["t_done"], run_end)
        out.append((done - o["t_start"], bool(o["granted"])))
    return out


def analyse_semaphore(
    ops: Sequence[Op],
    grants: Sequence[Op],
    lost: dict[str, float],
    faults: Sequence[Op],
    *,
    cap: int,
    lease: float,
    seconds: float,
    run_end: float,
    errors: Sequence[str] = (),
) -> dict[str, Any]:
    """The report of a semaphore run (layout in docs/checker.md)."""
    held = holdings(ops, grants, lost, faults)
    changes = [c for f in faults if f["kind"] == "resize" for c in f.get("changes", ())]
    over = over_grants(held, ops, cap, changes)
    fences = shared_fences(held)
    waits = big_waits(ops, cap, run_end)
    bound = starvation_bound(lease)
    longest = max((w for w, _ in waits), default=None)
    starved = sum(1 for w, granted in waits if not granted and w > bound)
    violations: list[str] = []
    if over:
        worst = max(over, key=lambda h: h["held"] - h["capacity"])
        violations.append(f"{len(over)} over-grant(s): up to {worst['held']} permits held by holders not told lost "
                          f"(capacity {worst['capacity']})")  # fmt: skip
    if fences:
        violations.append(f"{fences} holding(s) shared a fence with another")
    if not held:
        violations.append("no holding was granted: nothing was checked")
    liveness_failures = []
    if starved:
        liveness_failures.append(f"{starved} request(s) for all {cap} permits waited over {bound:g}s ungranted")
    by_weight = Counter(h["permits"] for h in held)
    return {
        "kind": SEMAPHORE,
        "size": cap,
        "operations": len(ops),
        "granted": len(held),
        "granted_by_permits": {str(k): by_weight[k] for k in sorted(by_weight)},
        "refused": sum(1 for o in ops if o.get("refused")),
        "timed_out": sum(1 for o in ops if o.get("granted") is False and not o.get("refused")),
        "told_lost": len({h["op"] for h in held if h["op"] in lost} | {o["op"] for o in ops if o.get("told")}),
        "peak_permits": max((taken for _, taken in held_at_grants(held)), default=0),
        "over_grants": len(over),
        "over_grant_samples": [{k: h[k] for k in ("op", "t_acq", "held", "capacity")} for h in over[:5]],
        "shared_fences": fences,
        "wait_ms": percentiles([o["t_acq"] - o["t_start"] for o in ops if o.get("granted")]),
        "big_requests": {
            "asked": len(waits),
            "granted": sum(1 for _, g in waits if g),
            "longest_wait_s": None if longest is None else round(longest, 3),
            "run_s": seconds,
            "bound_s": bound,
            "starved": starved,
        },
        "resizes": [c[2:] for c in changes],
        **closing(faults, errors, violations, liveness_failures),
    }

"""``distlock check --algorithm barrier|latch``: barriers and latches under kill -9 and SIGSTOP, then the analysis
that judges them, on hand-made histories (a release no trip or zero count can explain is caught)."""

from __future__ import annotations

from pathlib import Path

import pytest

from distlock.checker.primitive_analysis import analyse_primitive, early_barrier_releases, early_latch_releases
from tests.test_check import check, needs_redis_server


@pytest.mark.parametrize(
    ("kind", "server"),
    [("latch", False), pytest.param("barrier", True, marks=needs_redis_server)],
)
def test_primitive_passes_under_kill_and_pause(
    tmp_path: Path, kind: str, server: bool, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("redis_url") if server else f"sqlite:///{tmp_path}/locks.db"
    # room for one kill and one pause, each judged before the end (5 s let the pause miss on a busy machine)
    code, report, output = check(tmp_path, "--algorithm", kind, "--seconds", "8", "--faults", "kill,pause", url=url)
    assert code == 0 and report["ok"] is True, output
    assert report["kind"] == kind and report["early_releases"] == 0
    landed = {k: v["landed"] for k, v in report["faults"].items()}
    assert landed.get("kill", 0) >= 1 and landed.get("pause", 0) >= 1, report["faults"]
    assert report["released"] >= 4, report


def arrive(op: str, t: float) -> dict[str, object]:
    return {"kind": "arrive", "op": op, "t": t}


def wait(op: str, t_done: float, released: bool | None, **kw: object) -> dict[str, object]:
    return {"op": op, "t_start": 0.0, "t_done": t_done, "released": released, **kw}


def test_a_barrier_release_before_enough_arrivals_is_caught() -> None:
    arrivals = [arrive("a", 1.0), arrive("b", 2.0), arrive("c", 3.0), arrive("d", 3.5)]
    ok = [wait("a", 2.1, True), wait("b", 2.1, True), wait("c", 3.6, True), wait("d", 3.6, True)]
    assert early_barrier_releases(arrivals, ok, 2) == 0
    # "a" released alone; then c and d released with a withdrawn arrival ("b" timed out) in their generation
    assert early_barrier_releases(arrivals, [wait("a", 1.5, True), *ok[1:]], 2) == 1
    assert early_barrier_releases(arrivals, [ok[0], wait("b", 5.0, False), *ok[2:]], 2) == 2
    # a participant killed in its wait reports no outcome: its arrival may have counted
    assert early_barrier_releases(arrivals, ok[1:], 2) == 0


def test_a_latch_release_before_the_count_reached_zero_is_caught() -> None:
    downs = [{"kind": "count", "op": o, "round": 7, "t": t} for o, t in (("a", 1.0), ("b", 2.0), ("c", 2.5))]
    ops = [wait("a", 2.2, True, round=7, left=1), wait("b", 2.2, True, round=7, left=0)]
    assert early_latch_releases(downs, ops, 2) == 0
    assert early_latch_releases(downs, [wait("a", 1.5, True, round=7, left=1)], 2) == 1
    assert early_latch_releases(downs, [wait("z", 9.0, True, round=8, left=0)], 1) == 1  # no count-down at all
    twice = analyse_primitive("latch", [*ops, wait("c", 2.6, True, round=7, left=1)], downs, [], size=2)
    assert twice["repeated_counts"] == 1 and twice["ok"] is False

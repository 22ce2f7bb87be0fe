"""``distlock check --algorithm barrier|latch|double-barrier``: barriers, latches and double barriers under kill -9
and SIGSTOP, then the analysis that judges them, on hand-made histories (a release no trip, zero count or
departure can explain is caught)."""

from __future__ import annotations

from pathlib import Path

import pytest

from distlock.checker.config import CheckConfig, member_place
from distlock.checker.primitive_analysis import (
    analyse_primitive,
    early_barrier_releases,
    early_enters,
    early_latch_releases,
    early_leaves,
)
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


@pytest.mark.parametrize("server", [False, True], ids=["sqlite", "zookeeper"])
def test_double_barrier_passes_under_kill_and_pause(
    tmp_path: Path, server: bool, request: pytest.FixtureRequest
) -> None:
    # ZooKeeper runs Curator's own layout (session-bound members), SQLite the records every other backend shares
    url = request.getfixturevalue("zookeeper_url") if server else f"sqlite:///{tmp_path}/locks.db"
    code, report, output = check(
        tmp_path, "--algorithm", "double-barrier", "--seconds", "8", "--faults", "kill,pause", url=url
    )
    assert code == 0 and report["ok"] is True, output
    assert report["kind"] == "double-barrier" and report["size"] == 4, report
    assert report["early_releases"] == 0 and report["early_leaves"] == 0, report
    landed = {k: v["landed"] for k, v in report["faults"].items()}
    assert landed.get("kill", 0) >= 1 and landed.get("pause", 0) >= 1, report["faults"]
    assert report["completed"] > 0, report
    assert report["operations"] == report["completed"] + report["timed_out"] + report["failed"], report


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


def enter(op: str, t: float, number: int = 1) -> dict[str, object]:
    return {"kind": "enter", "op": op, "round": number, "t": t}


def leave(op: str, t: float, number: int = 1) -> dict[str, object]:
    return {"kind": "leave", "op": op, "round": number, "t": t}


def passed(
    op: str, phase: str, t_done: float, released: bool | None, number: int = 1, t_start: float | None = None
) -> dict[str, object]:
    # an enter or leave that took 0.1 s unless told
    return {
        **wait(op, t_done, released, phase=phase, round=number),
        "t_start": t_done - 0.1 if t_start is None else t_start,
    }


def test_a_double_barrier_enter_before_every_member_entered_is_caught() -> None:
    enters = [enter("a", 1.0), enter("b", 2.0), enter("c", 1.5, number=2)]
    ok = [passed("a", "enter", 2.1, True), passed("b", "enter", 2.1, True)]
    assert early_enters(enters, ok, 2, run_out=1.0) == 0
    assert early_enters(enters, [passed("a", "enter", 1.9, True), ok[1]], 2, run_out=1.0) == 1  # before b's entry
    # c entered round 2 alone: a member of round 1 does not count for it
    assert early_enters(enters, [*ok, passed("c", "enter", 2.5, True, number=2)], 2, run_out=1.0) == 1
    # a withdrawn entry (its enter returned False) counts for nobody; a killed member's (no outcome) may
    assert early_enters([*enters, enter("d", 1.2)], [*ok, passed("d", "enter", 1.6, False)], 3, run_out=1.0) == 2
    assert early_enters([*enters, enter("d", 1.2)], ok, 3, run_out=1.0) == 0
    # d paused in its call for longer than its place lasts: a trip may have counted it before the place went,
    # and its enter returned False all the same (nothing of the trip was left to find)
    stalled = passed("d", "enter", 4.5, False, t_start=1.2)
    assert early_enters([*enters, enter("d", 1.2)], [*ok, stalled], 3, run_out=1.0) == 0


def test_a_double_barrier_leave_before_every_member_left_is_caught() -> None:
    enters = [enter("a", 1.0), enter("b", 1.1), enter("c", 1.2)]
    entered = [passed(o, "enter", 1.3, True) for o in "abc"]
    leaves = [leave("a", 2.0), leave("b", 2.1), leave("c", 2.2)]
    done = [passed(o, "leave", 2.3, True) for o in "abc"]
    assert early_leaves(enters, leaves, [*entered, *done], run_out=10.0) == 0
    # a's leave released before c had started its own: c was still in
    assert early_leaves(enters, leaves, [*entered, passed("a", "leave", 2.15, True), *done[1:]], run_out=10.0) == 1
    # c was killed in its body (no leave, no outcome after its enter): it holds the others until it may have run out
    killed = [*entered[:2], *done[:2]]
    assert early_leaves(enters, leaves[:2], killed, run_out=10.0) == 2
    assert early_leaves(enters, leaves[:2], killed, run_out=1.0) == 0
    # c's place ends in whole milliseconds of the wall clock (a marker's end), the history is on the monotonic
    # one: a leave released within the drift margin of c's place's end is none too early, one before it is
    def released_at(t: float) -> list[dict[str, object]]:
        return [*entered[:2], *(passed(o, "leave", t, True) for o in "ab")]

    assert early_leaves(enters, leaves[:2], released_at(1.2 + 1.0 - 0.001), run_out=1.0) == 0
    assert early_leaves(enters, leaves[:2], released_at(1.2 + 1.0 - 0.05), run_out=1.0) == 2
    # a member whose enter timed out (withdrawn) or raised holds nobody's leave
    for outcome in (False, None):
        assert early_leaves(enters, leaves[:2], [*killed, passed("c", "enter", 1.9, outcome)], run_out=10.0) == 0
    # ... but one whose enter returned False after a stall may have been counted by the trip: it holds them
    stalled = passed("c", "enter", 12.0, False, t_start=1.2)
    assert early_leaves(enters, leaves[:2], [*killed, stalled], run_out=10.0) == 2


def test_the_double_barrier_report_fails_on_an_early_enter_or_leave() -> None:
    enters = [enter("a", 1.0), enter("b", 2.0)]
    leaves = [leave("a", 3.0), leave("b", 3.5)]
    entered = [passed("a", "enter", 2.1, True), passed("b", "enter", 2.1, True)]
    done = [passed("a", "leave", 3.6, True), passed("b", "leave", 3.6, True)]
    steps = [*enters, *leaves]

    def report(ops: list[dict[str, object]]) -> dict[str, object]:
        return analyse_primitive("double-barrier", ops, steps, [], size=2, run_out=10.0)

    good = report([*entered, *done])
    assert good["ok"] is True and good["completed"] == 2 and good["operations"] == 2, good
    early_in = report([passed("a", "enter", 1.5, True), entered[1], *done])
    assert early_in["ok"] is False and early_in["early_releases"] == 1, early_in
    early_out = report([*entered, passed("a", "leave", 3.2, True), done[1]])
    assert early_out["ok"] is False and early_out["early_leaves"] == 1, early_out
    timed_out = report([*entered, passed("a", "leave", 4.0, False)])  # b killed in its leave: no outcome
    assert (timed_out["completed"], timed_out["timed_out"], timed_out["failed"]) == (0, 1, 1), timed_out


def test_a_member_place_is_the_marker_linger_or_a_shorter_zookeeper_session() -> None:
    # what early_leaves may assume a silent member's place lasts: never longer than it really does
    def place(url: str, ttl: float) -> float:
        return member_place(CheckConfig(url, algorithm="double-barrier", ttl=ttl))

    assert place("sqlite:///x.db", 0.5) == 1.0 and place("sqlite:///x.db", 3.0) == 3.0  # the round, its linger
    assert place("zookeeper://127.0.0.1:2181?session_timeout=4", 6.0) == 4.0
    assert place("zookeeper://127.0.0.1:2181", 3.0) == 3.0  # a default session (10 s) outlasts the round

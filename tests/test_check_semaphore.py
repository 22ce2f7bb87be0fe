"""``distlock check --algorithm semaphore``: weighted holdings of one semaphore under kill -9 and SIGSTOP, then the
analysis that judges them, on hand-made histories (an over-grant, a shared fence, a grant past a shrunk
capacity and a starved big request are caught; the histories a correct semaphore makes pass)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from distlock._errors import ConfigError
from distlock.checker.config import CheckConfig, validate
from distlock.checker.semaphore import analyse_semaphore, holdings, over_grants, starvation_bound
from tests.test_check import check
from tools.servers import postgres

needs_postgres = pytest.mark.skipif(postgres.pg_bindir() is None, reason="PostgreSQL is not installed")

CAP = 3


@pytest.mark.parametrize("server", [False, pytest.param(True, marks=needs_postgres)])
def test_semaphore_passes_under_kill_and_pause(tmp_path: Path, server: bool, request: pytest.FixtureRequest) -> None:
    """Four workers on a capacity of three, mostly one permit each: a grant rule that let a fourth single permit
    in, or a big request in beside a small one, would show as permits held above three (the run asks that
    the capacity was reached, and that big requests were granted, so the rule was put to the test)."""
    url = request.getfixturevalue("postgres_url") if server else f"sqlite:///{tmp_path}/locks.db"
    code, report, output = check(
        tmp_path, "--algorithm", "semaphore", "--permits", str(CAP), "--seconds", "8", "--faults", "kill,pause", url=url
    )
    assert code == 0 and report["ok"] is True, output
    assert report["kind"] == "semaphore" and report["size"] == CAP
    assert report["over_grants"] == 0 and report["shared_fences"] == 0
    landed = {k: v["landed"] for k, v in report["faults"].items()}  # 8 s: room for both on a busy machine
    assert landed.get("kill", 0) >= 1 and landed.get("pause", 0) >= 1, report["faults"]
    assert report["peak_permits"] == CAP, report  # the capacity was reached: the rule was exercised
    assert report["granted_by_permits"].get(str(CAP), 0) >= 3, report
    assert report["told_lost"] >= 1  # the paused holder was told when it resumed
    assert report["big_requests"]["starved"] == 0 and report["big_requests"]["longest_wait_s"] is not None


# -- the analysis on hand-made histories ---------------------------------------------------------------------
def hold(op: str, worker: int, t_acq: float, t_rel: float, permits: int, fence: int, **kw: Any) -> tuple[dict, dict]:
    """A grant and its operation: asked at ``t_acq - 0.1``, released at ``t_rel``."""
    grant = {"kind": "grant", "op": op, "worker": worker, "t_acq": t_acq, "permits": permits, "fence": fence,
             "lease_end": t_acq + 1.0}  # fmt: skip
    done = {"kind": "op", "op": op, "worker": worker, "permits": permits, "t_start": t_acq - 0.1, "t_acq": t_acq,
            "t_rel": t_rel, "t_done": t_rel + 0.01, "granted": True, "fence": fence, "told": False, **kw}  # fmt: skip
    return grant, done


def judge(*pairs: tuple[dict, dict], lost: dict[str, float] | None = None, faults: tuple[dict, ...] = (),
          drop: tuple[str, ...] = (), cap: int = CAP) -> dict[str, Any]:  # fmt: skip
    """``drop``: ops whose worker never reported them (killed)."""
    grants = [g for g, _ in pairs]
    ops = [o for _, o in pairs if o["op"] not in drop]
    return analyse_semaphore(ops, grants, lost or {}, list(faults), cap=cap, lease=1.0, seconds=10.0, run_end=10.0)


def test_a_clean_history_passes() -> None:
    report = judge(
        hold("a", 0, 1.0, 1.5, 1, 1), hold("b", 1, 1.1, 1.6, 1, 2), hold("c", 2, 1.2, 1.4, 1, 3),
        hold("d", 3, 1.45, 2.0, 1, 4),  # c released first: three held at most
        hold("e", 0, 2.1, 2.3, 3, 5),  # everything else gone
    )  # fmt: skip
    assert report["ok"] is True, report
    assert report["peak_permits"] == 3 and report["granted_by_permits"] == {"1": 4, "3": 1}


def test_an_over_grant_is_caught() -> None:
    # a big request granted while a single permit is still held by a holder nobody told
    report = judge(hold("a", 0, 1.0, 1.5, 1, 1), hold("b", 1, 1.2, 1.8, 3, 2))
    assert report["over_grants"] == 1 and report["ok"] is False
    assert report["over_grant_samples"][0]["held"] == 4 and "over-grant" in report["safety_violations"][0]
    # four single permits at once
    singles = [hold(f"s{i}", i, 1.0 + i / 10, 2.0, 1, i + 1) for i in range(4)]
    assert judge(*singles)["over_grants"] == 1


def test_a_holder_told_lost_no_longer_counts() -> None:
    report = judge(hold("a", 0, 1.0, 1.5, 1, 1), hold("b", 1, 1.2, 1.8, 3, 2), lost={"a": 1.19})
    assert report["ok"] is True, report
    assert judge(hold("a", 0, 1.0, 1.5, 1, 1), hold("b", 1, 1.2, 1.8, 3, 2), lost={"a": 1.21})["over_grants"] == 1


def test_a_paused_holder_counts_until_its_lease_end_and_a_killed_one_until_the_kill() -> None:
    pause = {"kind": "pause", "worker": 0, "t": 1.1, "landed": True}
    # paused at 1.1; its lease (granted at 1.0) ends at 2.0: a big grant at 1.5 is an over-grant, at 2.1 it is not
    held = holdings([], [hold("a", 0, 1.0, 9.0, 1, 1)[0]], {"a": 3.5}, [pause])
    assert held[0]["end"] == 2.0
    assert judge(hold("a", 0, 1.0, 3.4, 1, 1), hold("b", 1, 1.5, 1.8, 3, 2), faults=(pause,))["over_grants"] == 1
    assert judge(hold("a", 0, 1.0, 3.4, 1, 1), hold("b", 1, 2.1, 2.2, 3, 2), faults=(pause,))["ok"] is True
    # killed at 1.1 (SQLite frees a dead process's permits at once; a session ends with its connection)
    kill = {"kind": "kill", "worker": 0, "t": 1.1, "landed": True}
    assert judge(hold("a", 0, 1.0, 9.0, 1, 1), hold("b", 1, 1.5, 1.8, 3, 2), faults=(kill,), drop=("a",))["ok"] is True
    # the same grant with no kill and no report: the holder still relies on its permit
    assert judge(hold("a", 0, 1.0, 9.0, 1, 1), hold("b", 1, 1.5, 1.8, 3, 2), drop=("a",))["over_grants"] == 1


def test_two_holdings_sharing_a_fence_are_caught() -> None:
    report = judge(hold("a", 0, 1.0, 1.1, 1, 7), hold("b", 1, 1.2, 1.3, 1, 7))
    assert report["shared_fences"] == 2 and report["ok"] is False


def test_a_grant_past_a_shrunk_capacity_is_caught_unless_the_semaphore_was_free() -> None:
    """After ``set_permits(1)`` returned, a grant that takes the permits held to 2 breaks the rule, unless the
    semaphore was free meanwhile (it keeps nothing then: the next user declares 3 again) or the capacity was
    set back first. Holders granted before the shrink keep their permits above it."""
    shrink = {"kind": "resize", "worker": -1, "t": 1.0, "landed": True, "changes": [[1.0, 1.05, 1, True]]}
    old = hold("a", 0, 0.5, 3.0, 2, 1)  # granted before: keeps its two permits over the new size of one
    assert judge(old, hold("b", 1, 1.5, 1.8, 1, 2), faults=(shrink,))["over_grants"] == 1
    assert judge(old, faults=(shrink,))["ok"] is True  # above the new size by an older holding only: fine
    # the semaphore was free between 1.2 and 1.3: its capacity may be 3 again
    early = hold("a", 0, 0.5, 1.2, 1, 1)
    assert judge(early, hold("c", 2, 1.3, 1.8, 2, 2), hold("b", 1, 1.5, 1.8, 1, 3), faults=(shrink,))["ok"] is True
    # set back to 3 before the grant
    back = {**shrink, "changes": [[1.0, 1.05, 1, True], [1.3, 1.35, 3, True]]}
    assert judge(old, hold("b", 1, 1.5, 1.8, 1, 2), faults=(back,))["ok"] is True
    # a shrink that found the semaphore free stored nothing
    unstored = {**shrink, "changes": [[1.0, 1.05, 1, False]]}
    assert over_grants(holdings([], [old[0]], {}, []), [], CAP, unstored["changes"]) == []


def test_a_starved_big_request_is_a_liveness_failure() -> None:
    bound = starvation_bound(1.0)
    starved = {"kind": "op", "op": "z", "worker": 3, "permits": CAP, "t_start": 0.0, "t_done": bound + 1.0,
               "granted": False}  # fmt: skip
    report = judge(hold("a", 0, 1.0, 1.5, 1, 1))
    assert report["ok"] is True and report["big_requests"]["asked"] == 0
    pairs = [hold("a", 0, 1.0, 1.5, 1, 1)]
    report = analyse_semaphore([pairs[0][1], starved], [pairs[0][0]], {}, [], cap=CAP, lease=1.0, seconds=20.0,
                               run_end=20.0)  # fmt: skip
    assert report["big_requests"]["starved"] == 1 and report["liveness_failures"], report
    assert report["big_requests"]["longest_wait_s"] == round(bound + 1.0, 3)


@pytest.mark.parametrize(
    ("algorithm", "faults", "permits", "says"),
    [
        ("distlock", (), 3, "--permits is the capacity of --algorithm semaphore"),
        ("distlock", ("resize",), None, "the resize fault resizes a semaphore"),
        ("semaphore", ("fork",), 3, "has none (drop fork)"),
        ("semaphore", (), 0, "--permits must be 1 or more"),
    ],
)
def test_bad_semaphore_options_are_refused_in_one_line(
    tmp_path: Path, algorithm: str, faults: tuple[str, ...], permits: int | None, says: str
) -> None:
    cfg = CheckConfig(f"sqlite:///{tmp_path}/l.db", algorithm=algorithm, faults=faults, permits=permits)
    with pytest.raises(ConfigError, match=re.escape(says)):
        validate(cfg)

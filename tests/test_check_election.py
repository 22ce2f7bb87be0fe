"""``distlock check --election``: N processes campaign in one election, the leader writes to the fenced
register with its term, under the same faults as the locks. Zero stale writes accepted, and a leader whose
link froze is told it lost leadership before the next leader is elected (told late <= 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_check import assert_correct_under_faults, assert_safe, check
from tests.test_check_gray import needs_redis_server


@pytest.mark.parametrize("api", ["sync", "async"])
def test_election_on_sqlite_under_kill_and_pause(tmp_path: Path, api: str) -> None:
    url = f"sqlite:///{tmp_path}/locks.db"
    code, report, output = check(
        tmp_path, "--election", "--api", api, "--seconds", "7", "--faults", "kill,pause", url=url
    )
    assert report["algorithm"] == "election"
    # the paused leader resumed and wrote with its old term: the register turned it away, and it was told
    assert_correct_under_faults(code, report, output)


@needs_redis_server
def test_a_frozen_leader_is_told_before_the_next_leader_is_elected(tmp_path: Path) -> None:
    code, report, output = check(tmp_path, "--election", "--seconds", "5", "--spawn", "--faults", "freeze")
    assert report["faults"]["freeze"]["landed"] >= 1, output
    late = report["told_late"]
    assert late["handovers"] >= 1 and late["told"] >= 1, late
    assert late["late"] == 0 and late["max_ms"] <= 0, late
    assert_safe(code, report, output, "freeze", least=5)


def test_election_and_algorithm_exclude_each_other(tmp_path: Path) -> None:
    code, _report, output = check(tmp_path, "--election", "--algorithm", "ignore-lost", "--seconds", "1")
    assert code == 2 and "exclude" in output

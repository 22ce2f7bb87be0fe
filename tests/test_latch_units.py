"""Count-down latches: the record's rules (pure), the argument checks, and the backends that refuse latches."""

from __future__ import annotations

import pytest

import distlock
from distlock import ConfigError, UnsupportedFeature
from distlock._core.latch import (
    MAX_COUNT,
    RECENT,
    LatchState,
    check_count,
    check_linger,
    mismatch,
    recent_after,
    seen_count,
)


def test_counts_and_lingers_are_checked_before_anything_is_sent() -> None:
    assert check_count(None, name="n", backend="memory") is None
    assert check_count(3, name="n", backend="memory") == 3
    for bad in (0, -1, True, 2.0, "3", MAX_COUNT + 1):
        with pytest.raises(ConfigError) as err:
            check_count(bad, name="n", backend="memory")
        assert "\n" not in str(err.value)
    assert check_linger(60, name="n", backend="memory") == 60.0
    for bad in (0, 0.01, float("nan"), float("inf"), True, "1", 86401):
        with pytest.raises(ConfigError):
            check_linger(bad, name="n", backend="memory")


def test_a_creator_with_another_count_is_told_so_and_a_joiner_never_is() -> None:
    live, done = LatchState("r1", 3, 2), LatchState("r1", 3, 0)
    assert mismatch(None, 5) is None and mismatch(live, None) is None and mismatch(live, 3) is None
    assert "count=3, not 4" in (mismatch(live, 4) or "")
    assert "reached zero" in (mismatch(done, 4) or "")


def test_an_object_sees_only_its_own_round() -> None:
    assert seen_count(LatchState("r1", 3, 2), "r1") == 2
    assert seen_count(LatchState("r2", 3, 2), "r1") == 0  # a new round of the name: ours is over
    assert seen_count(None, "r1") == 0 and seen_count(LatchState("r1", 3, 2), None) == 0


def test_the_store_checks_the_latch_arguments() -> None:
    with distlock.connect("memory://") as store:
        for kwargs in ({"count": 0}, {"count": 1, "linger": 0}):
            with pytest.raises(ConfigError):
                store.latch("n", **kwargs)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            store.latch("")


def test_redlock_refuses_latches_in_one_line(redlock_url: str) -> None:
    with distlock.connect(redlock_url) as store:
        with pytest.raises(UnsupportedFeature) as err:
            store.latch("n", count=2)
        assert "Redlock" in str(err.value) and "\n" not in str(err.value)


def test_a_record_keeps_the_ids_of_the_last_count_downs_only() -> None:
    recent = ""
    for i in range(RECENT + 5):
        recent = recent_after(recent, f"{i:032x}")
    kept = recent.split()
    assert len(kept) == RECENT and kept[-1] == f"{RECENT + 4:032x}" and kept[0] == f"{5:032x}"

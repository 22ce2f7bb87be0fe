"""Barriers: the record's rules (pure, ``_core/barrier.py``), the argument checks, and Redlock's refusal."""

from __future__ import annotations

import pytest

import distlock
from distlock import ConfigError, UnsupportedFeature
from distlock._core import barrier as b


def _op(kind: str, member: str, gen: str = "", *, parties: int = 2, consume: bool = True) -> b.Op:
    return b.Op(kind, member, gen, parties, 10.0, 60.0, consume, "g-" + member)


def test_the_arrival_that_makes_parties_trips_and_each_member_takes_itself_off_the_marker() -> None:
    rec, a = b.step(None, _op(b.ARRIVE, "a"), 1000)
    assert a.outcome == b.WAITING and rec is not None and set(rec["open"]) == {"a"}
    rec, t = b.step(rec, _op(b.ARRIVE, "b"), 1001)
    assert t.outcome == b.TRIPPED and t.gen == a.gen and rec is not None
    assert rec["open"] == {} and set(rec["done"][a.gen]["members"]) == {"a", "b"}
    rec, again = b.step(rec, _op(b.ARRIVE, "b"), 1002)  # the tripping step sent again: not a new arrival
    assert again.outcome == b.TRIPPED and rec is not None and rec["open"] == {}
    rec, r = b.step(rec, _op(b.LOOK, "a", a.gen), 1003)
    assert r.outcome == b.TRIPPED
    rec, r = b.step(rec, _op(b.LOOK, "b", a.gen), 1004)
    assert r.outcome == b.TRIPPED and rec is None  # the last member saw it: nothing stays


def test_an_arrival_counts_only_while_its_lease_runs() -> None:
    rec, a = b.step(None, _op(b.ARRIVE, "a"), 0)
    rec, late = b.step(rec, _op(b.ARRIVE, "b"), 10_001)  # a's lease (10 s) ended without a renewal
    assert late.outcome == b.WAITING and rec is not None and set(rec["open"]) == {"b"}
    rec, gone = b.step(rec, _op(b.LOOK, "a", a.gen), 10_002)
    assert gone.outcome == b.GONE
    before = rec
    rec, r = b.step(rec, _op(b.LOOK, "b", late.gen), 12_000)
    assert r.outcome == b.WAITING and rec == before  # a look soon after the renewal writes nothing
    rec, r = b.step(rec, _op(b.LOOK, "b", late.gen), 19_000)  # a look after a third of the lease renews it
    rec, r = b.step(rec, _op(b.ARRIVE, "c"), 28_000)
    assert r.outcome == b.TRIPPED


def test_a_withdrawal_after_the_trip_reports_the_trip_and_before_it_takes_the_arrival_back() -> None:
    rec, a = b.step(None, _op(b.ARRIVE, "a"), 0)
    rec, w = b.step(rec, _op(b.WITHDRAW, "a", a.gen), 1)
    assert w.outcome == b.WITHDRAWN and rec is None
    rec, a = b.step(None, _op(b.ARRIVE, "a"), 0)
    rec, _ = b.step(rec, _op(b.ARRIVE, "b"), 1)
    rec, w = b.step(rec, _op(b.WITHDRAW, "a", a.gen), 2)
    assert w.outcome == b.TRIPPED
    rec, _ = b.step(rec, _op(b.ARRIVE, "c"), 3)
    rec, w = b.step(rec, _op(b.WITHDRAW, "c", ""), 4)  # an arrival whose reply was lost: no generation known
    assert w.outcome == b.WITHDRAWN and rec is not None and rec["open"] == {}
    rec, w = b.step(rec, _op(b.WITHDRAW, "b", ""), 5)
    assert w.outcome == b.TRIPPED and w.gen == a.gen and rec is None


def test_a_marker_ends_at_its_linger_and_a_double_barrier_counts_who_has_not_left() -> None:
    rec, a = b.step(None, _op(b.ARRIVE, "a", consume=False), 0)
    rec, _ = b.step(rec, _op(b.ARRIVE, "b", consume=False), 1)
    rec, seen = b.step(rec, _op(b.LOOK, "a", a.gen, consume=False), 2)
    assert seen.outcome == b.TRIPPED and rec is not None and len(rec["done"][a.gen]["members"]) == 2
    rec, left = b.step(rec, _op(b.LEAVE, "a", a.gen), 3)
    assert left.members == 1
    assert b.spent(rec, 60_002) and not b.spent(rec, 30_000)  # type: ignore[arg-type]
    rec, left = b.step(rec, _op(b.LEFT, "a", a.gen), 60_002)
    assert left.members == 0 and rec is None


def test_parties_ttl_and_linger_are_checked() -> None:
    for bad in (0, -1, True, 2.0, "2", b.MAX_PARTIES + 1):
        with pytest.raises(ConfigError) as err:
            b.check_parties(bad, name="n", backend="memory")
        assert "\n" not in str(err.value)
    for bad in (0, 0.5, float("nan"), True, 86401):
        with pytest.raises(ConfigError):
            b.check_span(bad, "ttl", 1.0, name="n", backend="memory")
    with distlock.connect("memory://") as store, pytest.raises(ConfigError):
        store.barrier("n", 2, ttl=0)


def test_records_not_written_by_distlock_are_refused() -> None:
    for bad in ("[]", "{}", '{"open": []}', "x"):
        with pytest.raises(ValueError):
            b.decode(bad)


def test_redlock_refuses_barriers_in_one_line(redlock_url: str) -> None:
    with distlock.connect(redlock_url) as store:
        for build in (lambda: store.barrier("n", 2), lambda: store.double_barrier("n", 2)):
            with pytest.raises(UnsupportedFeature) as err:
                build()
            assert "Redlock" in str(err.value) and "\n" not in str(err.value)

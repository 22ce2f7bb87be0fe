"""The weighted semaphore's grant rule and stored numbers (``_core/arbiter.py``), pure: every backend implements
this rule (the lease tables call it; Redis, etcd and ZooKeeper have their own copy, checked by
tests/_async/test_semaphore.py against the same behaviour)."""

from __future__ import annotations

import pytest

from distlock import ConfigError
from distlock._core import arbiter
from distlock._core.arbiter import Capacity, Held, Queued
from distlock._core.types import Claim, HolderInfo, LockInfo, Mode

S = Mode.SEMAPHORE


def held(token: str, permits: int) -> Held:
    return Held(token, S, 100.0, permits)


def queued(token: str, seq: int, want: int) -> Queued:
    return Queued(token, S, seq, 100.0, want)


def claim(token: str = "c", permits: int | None = 3, want: int = 1, fair: bool = False) -> Claim:
    return Claim("sem", S, token, "h:1:t", 10.0, permits=permits, fair=fair, want=want)


def test_a_claim_takes_all_its_permits_or_none() -> None:
    may = arbiter.may_acquire
    assert not may(S, "c", 3, False, [held("a", 2)], [], want=2)  # 2 + 2 > 3: nothing taken
    assert may(S, "c", 3, False, [held("a", 2)], [], want=1)
    assert may(S, "c", 3, False, [held("a", 1)], [], want=2)
    assert not may(S, "c", 3, False, [Held("w", Mode.EXCLUSIVE, 100.0)], [], want=1)  # another kind holds the name
    # holders above a shrunk capacity keep theirs; new grants wait until they fit under it
    assert not may(S, "c", 1, False, [held("a", 1), held("b", 2)], [], want=1)
    assert may(S, "c", 1, False, [], [], want=1)


def test_a_big_request_is_not_starved_by_single_permits() -> None:
    may = arbiter.may_acquire
    big = queued("big", 1, 3)
    assert arbiter.should_queue(S, False, want=3) and not arbiter.should_queue(S, False, want=1)
    assert not may(S, "c", 3, False, [held("a", 1)], [big], want=1)  # room for one, but the big one waits first
    assert not may(S, "c", 3, False, [], [big, queued("c", 2, 2)], want=2)  # bigger ones queue behind it too
    assert may(S, "big", 3, False, [], [big, queued("c", 2, 1)], want=3)  # it does not wait for those behind
    assert may(S, "c", 3, False, [], [queued("one", 1, 1)], want=1)  # a single permit ahead holds nobody back
    # one that wants more than a shrunk capacity can never be granted: it holds nobody back
    assert may(S, "c", 2, False, [held("a", 1)], [big], want=1)


def test_fair_claims_leave_room_for_everyone_ahead() -> None:
    may = arbiter.may_acquire
    assert not may(S, "c", 3, True, [held("a", 1)], [queued("x", 1, 2)], want=1)  # 1 + 2 + 1 > 3
    assert may(S, "c", 4, True, [held("a", 1)], [queued("x", 1, 2)], want=1)
    assert may(S, "x", 3, True, [held("a", 1)], [queued("x", 1, 2), queued("c", 2, 1)], want=2)
    assert arbiter.looks_ahead(S, True, 3) is None and arbiter.looks_ahead(S, False, 3) is None  # sums: all


def test_the_stored_numbers_decide_the_mismatch_and_too_big_errors() -> None:
    stored = Capacity(declared=3, capacity=5)  # resized by set_permits since the first user declared 3
    assert arbiter.terms(claim(permits=3), stored) == stored  # the first users' declaration still fits
    assert arbiter.terms(claim(permits=None), stored) == stored
    assert arbiter.terms(claim(permits=4), None) == Capacity(4, 4)  # a free name: the first user decides
    for bad, said in (
        (claim(permits=4), "semaphore 'sem' was declared with permits=3 (capacity now 5); build it with permits=3 or permits=None"),
        (claim(permits=None, want=6), "acquire(permits=6) could never be granted; ask for at most 5"),
    ):
        with pytest.raises(ConfigError) as err:
            arbiter.terms(bad, stored)
        assert said in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="has no stored capacity yet: pass permits=N"):
        arbiter.terms(claim(permits=None), None)


def test_decide_writes_the_numbers_of_a_free_name_and_ignores_a_crashs_leftover() -> None:
    leftover = Capacity(2, 2)  # nobody live: a record a crashed holder left
    first = arbiter.decide(claim(permits=3, want=3), [], [], 0.0, register_all=False, stored=leftover)
    assert first.grant and first.store == Capacity(3, 3)
    in_use = arbiter.decide(claim(permits=3, want=1), [held("a", 1)], [], 0.0, register_all=False, stored=Capacity(3, 3))
    assert in_use.grant and in_use.store is None
    refused = arbiter.decide(claim(permits=3, want=2), [held("a", 2)], [], 0.0, register_all=False, stored=Capacity(3, 3))
    assert not refused.grant and refused.enqueue  # a big one queues (non-fair)
    with pytest.raises(ConfigError):
        arbiter.decide(claim(permits=4), [held("a", 1)], [], 0.0, register_all=False, stored=Capacity(3, 3))
    # a retry after a lost reply is ours whatever the numbers say now
    assert arbiter.decide(claim(permits=9, want=3), [held("c", 3)], [], 0.0, False, stored=Capacity(1, 1)).ours


def test_inspect_reports_permits_held_and_wanted() -> None:
    rows = [("sem", "h:1:a", "semaphore", 7, 15.0, 2), ("sem", "h:1:b", "semaphore", 8, 15.0, None)]
    (info,) = arbiter.lease_infos(rows, lambda _n: (2, 5), now=10.0, capacity=lambda _n: 4)
    assert (info.permits, info.taken, info.waiters, info.waiting_permits) == (4, 3, 2, 5)
    assert [h.permits for h in info.holders] == [2, 1]
    out = info.to_json()
    assert (out["permits"], out["taken"], out["waiting_permits"]) == (4, 3, 5)
    assert [h["permits"] for h in out["holders"]] == [2, 1]  # type: ignore[attr-defined]
    lock = LockInfo("x", "lock", (HolderInfo("h:1:a", 1, "lock", 1.0),), 0)
    assert "permits" not in lock.to_json() and "permits" not in lock.to_json()["holders"][0]  # type: ignore[index]

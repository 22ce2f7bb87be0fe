# GENERATED from tests/_async/test_election.py by scripts/gen_sync.py: edit that file, not this one.
"""Leader election on every backend, on the async API; ``tests/_sync/`` is generated from this file.

Parametrized over the conformance table (tests/backends.py), like test_conformance.py. The observer checks
compare what ``observe()`` delivered with the campaigners' own history; each change waits until the
observer has reported the one before, so none may be missed.
"""

from __future__ import annotations

import itertools
from time import monotonic
from typing import Any

import pytest

import distlock
from distlock import ConfigError, LeaderInfo, LockError, LockLost, NotHeld
from tests.concurrency_sync import run_all, sleep


def test_election_campaign_proclaim_resign_and_the_leader_seen_by_anyone(
    sync_store: distlock.Store, name: str
) -> None:
    assert sync_store.leader(name) is None
    el = sync_store.election(name, ttl=10)
    assert not el.is_leader() and el.term is None
    assert el.campaign("host-a:8080", timeout=5)
    assert el.is_leader()
    term = el.term
    assert isinstance(term, int)
    info = sync_store.leader(name)
    assert isinstance(info, LeaderInfo)
    assert (info.value, info.term) == ("host-a:8080", term)
    assert info.ttl_left is None or 0 < info.ttl_left <= 10
    el.proclaim("host-a:9090")
    info = sync_store.leader(name)
    assert info is not None and (info.value, info.term) == ("host-a:9090", term)
    assert el.term == term and el.value == "host-a:9090"
    el.resign()
    assert el.term is None and not el.is_leader()
    assert sync_store.leader(name) is None
    assert el.campaign("again", timeout=5)
    assert el.term is not None and el.term > term
    el.resign()


def test_election_candidates_lead_in_the_order_they_campaigned_one_at_a_time(
    sync_store: distlock.Store, name: str
) -> None:
    first = sync_store.election(name, ttl=10)
    assert first.campaign("c0", timeout=5)
    leaders: list[tuple[str, int | None, float, float]] = []

    def queued(n: int) -> None:
        """Until ``n`` candidates wait in line where the backend counts them (else, as on Redlock, whose
        candidates retry rather than queue, a generous pause: 3 s at most)."""
        end = monotonic() + 3
        while monotonic() < end:
            info = sync_store.inspect(name)
            if info is None or info.waiters is None:
                sleep(0.4 * n)
                return
            if info.waiters >= n:
                return
            sleep(0.02)

    def candidate(i: int) -> Any:
        def run() -> None:
            queued(i - 1)  # campaign in the order 1, 2, 3 (a busy machine delays threads, not the line)
            el = sync_store.election(name, ttl=10)
            assert el.campaign(f"c{i}", timeout=20)
            began = monotonic()
            info = sync_store.leader(name)
            assert info is not None and info.value == f"c{i}" and info.term == el.term
            sleep(0.1)
            leaders.append((f"c{i}", el.term, began, monotonic()))
            el.resign()

        return run

    def first_resigns() -> None:
        queued(3)  # every candidate is queued by now
        first.resign()

    run_all(candidate(1), candidate(2), candidate(3), first_resigns)
    assert [v for v, *_ in leaders] == ["c1", "c2", "c3"]
    terms = [t for _, t, *_ in leaders]
    assert all(isinstance(t, int) for t in terms) and terms == sorted(terms) and len(set(terms)) == 3
    for (_, _, _, end), (_, _, began, _) in itertools.pairwise(leaders):
        assert began >= end  # never two leaders at once


def test_election_observe_reports_every_leader_and_value_and_no_leader(
    sync_store: distlock.Store, name: str
) -> None:
    seen: list[tuple[str, int | None] | None] = []
    history: list[tuple[str, int | None]] = []
    finished = []

    def observer() -> None:
        for info in sync_store.observe(name, timeout=20.0):
            seen.append(None if info is None else (str(info.value), info.term))
            if info is None and finished:
                break

    def observed(state: tuple[str, int | None] | None) -> None:
        # The next change waits until the observer has reported this one: on a loaded machine a read can take
        # longer than any fixed pause, and an observer may skip a state shorter than one read (docs/election.md).
        # A change the observer never reports fails here, after 5 s.
        deadline = monotonic() + 5.0
        while not (seen and seen[-1] == state):
            assert monotonic() < deadline, f"the observer did not report {state!r}; it saw {seen!r}"
            sleep(0.01)

    def campaigners() -> None:
        observed(None)
        for i in range(3):
            el = sync_store.election(name, ttl=10)
            assert el.campaign(f"v{i}", timeout=5)
            history.append((f"v{i}", el.term))
            observed(history[-1])
            el.proclaim(f"v{i}-b")
            history.append((f"v{i}-b", el.term))
            observed(history[-1])
            if i == 2:
                finished.append(True)
            el.resign()
            observed(None)

    run_all(observer, campaigners)
    # in order, each once, nothing else: "no leader" first, between the leaderships and last
    assert seen[0] is None and seen[-1] is None
    assert [s for s in seen if s is not None] == history
    assert seen.count(None) == 4


def test_election_not_the_leader_cannot_proclaim_or_resign(sync_store: distlock.Store, name: str) -> None:
    leader = sync_store.election(name, ttl=10)
    other = sync_store.election(name, ttl=10)
    assert leader.campaign("L", timeout=5)
    with pytest.raises(NotHeld):
        other.proclaim("usurper")
    with pytest.raises(NotHeld):
        other.resign()
    started = monotonic()
    assert not other.campaign("O", timeout=0.3)
    assert monotonic() - started >= 0.29
    info = sync_store.inspect(name)
    assert info is not None and info.waiters in (0, None)  # the timed-out candidacy left nothing queued
    with pytest.raises(LockError):
        leader.campaign("twice")
    with pytest.raises(ConfigError):
        other.campaign("nul\x00byte")
    with pytest.raises(ConfigError):
        leader.proclaim(12)  # type: ignore[arg-type]
    info2 = sync_store.leader(name)
    assert info2 is not None and info2.value == "L"
    leader.resign()


def test_election_a_broken_leadership_is_lost_and_the_next_candidate_leads(
    sync_store: distlock.Store, name: str
) -> None:
    called: list[object] = []
    leader = sync_store.election(name, ttl=10, on_lost=called.append)
    assert leader.campaign("L", timeout=5)
    term = leader.term
    assert sync_store.break_lock(name)
    assert not leader.is_leader()
    assert leader.lost.is_set() and leader.term is None
    with pytest.raises(LockLost):
        leader.proclaim("still me?")
    nxt = sync_store.election(name, ttl=10)
    assert nxt.campaign("N", timeout=5)
    assert nxt.term is not None and term is not None and nxt.term > term
    with pytest.raises(LockLost):
        leader.resign()
    nxt.resign()
    for _ in range(50):
        if called:
            break
        sleep(0.05)
    assert called == [leader]


def test_election_with_block_campaigns_and_resigns(sync_store: distlock.Store, name: str) -> None:
    with sync_store.election(name, ttl=10, timeout=5) as el:
        info = sync_store.leader(name)
        assert info is not None and info.term == el.term and info.value  # this process's owner id
    assert sync_store.leader(name) is None

def test_election_lead_runs_each_term_campaigns_again_after_a_loss_and_gives_the_leadership_back(
    sync_store: distlock.Store, name: str
) -> None:
    election = sync_store.election(name, ttl=10)
    calls: list[str] = []
    terms: list[int] = []
    seen: list[distlock.LeaderInfo | None] = []

    class Done(Exception):
        pass

    def work(el: distlock.Election) -> None:
        assert el.term is not None
        terms.append(el.term)
        info = sync_store.leader(name)
        assert info is not None and info.term == el.term and info.value == "me"
        if len(terms) == 1:
            assert sync_store.break_lock(name)  # taken away: the term ends lost, and lead() campaigns again
            end = monotonic() + 30
            while not el.lost.is_set():
                assert monotonic() < end, "the broken leadership was never lost"
                sleep(0.05)
            sleep(0.05)  # asyncio: cancelled here (LockLost); threads: told by lost, and return
            return
        end = monotonic() + 30
        while not any(i is not None and i.term == el.term for i in seen):  # on_new_leader saw this term
            assert monotonic() < end, f"on_new_leader never reported term {el.term}: {seen}"
            sleep(0.05)
        raise Done

    with pytest.raises(Done):
        election.lead(
            work,
            value="me",
            on_started=lambda el: calls.append(f"started {el.term}"),
            on_stopped=lambda el: calls.append("stopped"),
            on_new_leader=seen.append,
        )
    assert len(terms) == 2 and terms[1] > terms[0]
    assert calls == [f"started {terms[0]}", "stopped", f"started {terms[1]}", "stopped"]
    assert sync_store.leader(name) is None  # the failing term resigned on the way out

    def one_term(el: distlock.Election) -> None:
        assert el.is_leader()

    assert election.lead(one_term, requeue=False) == 1
    assert sync_store.leader(name) is None
    with pytest.raises(ConfigError):
        election.lead("not a function", requeue=False)  # type: ignore[arg-type]

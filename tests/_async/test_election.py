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
from tests.concurrency_async import run_all, sleep


async def test_election_campaign_proclaim_resign_and_the_leader_seen_by_anyone(
    async_store: distlock.AsyncStore, name: str
) -> None:
    assert await async_store.leader(name) is None
    el = async_store.election(name, ttl=10)
    assert not await el.is_leader() and el.term is None
    assert await el.campaign("host-a:8080", timeout=5)
    assert await el.is_leader()
    term = el.term
    assert isinstance(term, int)
    info = await async_store.leader(name)
    assert isinstance(info, LeaderInfo)
    assert (info.value, info.term) == ("host-a:8080", term)
    assert info.ttl_left is None or 0 < info.ttl_left <= 10
    await el.proclaim("host-a:9090")
    info = await async_store.leader(name)
    assert info is not None and (info.value, info.term) == ("host-a:9090", term)
    assert el.term == term and el.value == "host-a:9090"
    await el.resign()
    assert el.term is None and not await el.is_leader()
    assert await async_store.leader(name) is None
    assert await el.campaign("again", timeout=5)
    assert el.term is not None and el.term > term
    await el.resign()


async def test_election_candidates_lead_in_the_order_they_campaigned_one_at_a_time(
    async_store: distlock.AsyncStore, name: str
) -> None:
    first = async_store.election(name, ttl=10)
    assert await first.campaign("c0", timeout=5)
    leaders: list[tuple[str, int | None, float, float]] = []

    async def queued(n: int) -> None:
        """Until ``n`` candidates wait in line where the backend counts them (else, as on Redlock, whose
        candidates retry rather than queue, a generous pause: 3 s at most)."""
        end = monotonic() + 3
        while monotonic() < end:
            info = await async_store.inspect(name)
            if info is None or info.waiters is None:
                await sleep(0.4 * n)
                return
            if info.waiters >= n:
                return
            await sleep(0.02)

    def candidate(i: int) -> Any:
        async def run() -> None:
            await queued(i - 1)  # campaign in the order 1, 2, 3 (a busy machine delays threads, not the line)
            el = async_store.election(name, ttl=10)
            assert await el.campaign(f"c{i}", timeout=20)
            began = monotonic()
            info = await async_store.leader(name)
            assert info is not None and info.value == f"c{i}" and info.term == el.term
            await sleep(0.1)
            leaders.append((f"c{i}", el.term, began, monotonic()))
            await el.resign()

        return run

    async def first_resigns() -> None:
        await queued(3)  # every candidate is queued by now
        await first.resign()

    await run_all(candidate(1), candidate(2), candidate(3), first_resigns)
    assert [v for v, *_ in leaders] == ["c1", "c2", "c3"]
    terms = [t for _, t, *_ in leaders]
    assert all(isinstance(t, int) for t in terms) and terms == sorted(terms) and len(set(terms)) == 3
    for (_, _, _, end), (_, _, began, _) in itertools.pairwise(leaders):
        assert began >= end  # never two leaders at once


async def test_election_observe_reports_every_leader_and_value_and_no_leader(
    async_store: distlock.AsyncStore, name: str
) -> None:
    seen: list[tuple[str, int | None] | None] = []
    history: list[tuple[str, int | None]] = []
    finished = []

    async def observer() -> None:
        async for info in async_store.observe(name, timeout=20.0):
            seen.append(None if info is None else (str(info.value), info.term))
            if info is None and finished:
                break

    async def observed(state: tuple[str, int | None] | None) -> None:
        # The next change waits until the observer has reported this one: on a loaded machine a read can take
        # longer than any fixed pause, and an observer may skip a state shorter than one read (docs/election.md).
        # A change the observer never reports fails here, after 5 s.
        deadline = monotonic() + 5.0
        while not (seen and seen[-1] == state):
            assert monotonic() < deadline, f"the observer did not report {state!r}; it saw {seen!r}"
            await sleep(0.01)

    async def campaigners() -> None:
        await observed(None)
        for i in range(3):
            el = async_store.election(name, ttl=10)
            assert await el.campaign(f"v{i}", timeout=5)
            history.append((f"v{i}", el.term))
            await observed(history[-1])
            await el.proclaim(f"v{i}-b")
            history.append((f"v{i}-b", el.term))
            await observed(history[-1])
            if i == 2:
                finished.append(True)
            await el.resign()
            await observed(None)

    await run_all(observer, campaigners)
    # in order, each once, nothing else: "no leader" first, between the leaderships and last
    assert seen[0] is None and seen[-1] is None
    assert [s for s in seen if s is not None] == history
    assert seen.count(None) == 4


async def test_election_not_the_leader_cannot_proclaim_or_resign(async_store: distlock.AsyncStore, name: str) -> None:
    leader = async_store.election(name, ttl=10)
    other = async_store.election(name, ttl=10)
    assert await leader.campaign("L", timeout=5)
    with pytest.raises(NotHeld):
        await other.proclaim("usurper")
    with pytest.raises(NotHeld):
        await other.resign()
    started = monotonic()
    assert not await other.campaign("O", timeout=0.3)
    assert monotonic() - started >= 0.29
    info = await async_store.inspect(name)
    assert info is not None and info.waiters in (0, None)  # the timed-out candidacy left nothing queued
    with pytest.raises(LockError):
        await leader.campaign("twice")
    with pytest.raises(ConfigError):
        await other.campaign("nul\x00byte")
    with pytest.raises(ConfigError):
        await leader.proclaim(12)  # type: ignore[arg-type]
    info2 = await async_store.leader(name)
    assert info2 is not None and info2.value == "L"
    await leader.resign()


async def test_election_a_broken_leadership_is_lost_and_the_next_candidate_leads(
    async_store: distlock.AsyncStore, name: str
) -> None:
    called: list[object] = []
    leader = async_store.election(name, ttl=10, on_lost=called.append)
    assert await leader.campaign("L", timeout=5)
    term = leader.term
    assert await async_store.break_lock(name)
    assert not await leader.is_leader()
    assert leader.lost.is_set() and leader.term is None
    with pytest.raises(LockLost):
        await leader.proclaim("still me?")
    nxt = async_store.election(name, ttl=10)
    assert await nxt.campaign("N", timeout=5)
    assert nxt.term is not None and term is not None and nxt.term > term
    with pytest.raises(LockLost):
        await leader.resign()
    await nxt.resign()
    for _ in range(50):
        if called:
            break
        await sleep(0.05)
    assert called == [leader]


async def test_election_with_block_campaigns_and_resigns(async_store: distlock.AsyncStore, name: str) -> None:
    async with async_store.election(name, ttl=10, timeout=5) as el:
        info = await async_store.leader(name)
        assert info is not None and info.term == el.term and info.value  # this process's owner id
    assert await async_store.leader(name) is None

async def test_election_lead_runs_each_term_campaigns_again_after_a_loss_and_gives_the_leadership_back(
    async_store: distlock.AsyncStore, name: str
) -> None:
    election = async_store.election(name, ttl=10)
    calls: list[str] = []
    terms: list[int] = []
    seen: list[distlock.LeaderInfo | None] = []

    class Done(Exception):
        pass

    async def work(el: distlock.AsyncElection) -> None:
        assert el.term is not None
        terms.append(el.term)
        info = await async_store.leader(name)
        assert info is not None and info.term == el.term and info.value == "me"
        if len(terms) == 1:
            assert await async_store.break_lock(name)  # taken away: the term ends lost, and lead() campaigns again
            end = monotonic() + 30
            while not el.lost.is_set():
                assert monotonic() < end, "the broken leadership was never lost"
                await sleep(0.05)
            await sleep(0.05)  # asyncio: cancelled here (LockLost); threads: told by lost, and return
            return
        end = monotonic() + 30
        while not any(i is not None and i.term == el.term for i in seen):  # on_new_leader saw this term
            assert monotonic() < end, f"on_new_leader never reported term {el.term}: {seen}"
            await sleep(0.05)
        raise Done

    with pytest.raises(Done):
        await election.lead(
            work,
            value="me",
            on_started=lambda el: calls.append(f"started {el.term}"),
            on_stopped=lambda el: calls.append("stopped"),
            on_new_leader=seen.append,
        )
    assert len(terms) == 2 and terms[1] > terms[0]
    assert calls == [f"started {terms[0]}", "stopped", f"started {terms[1]}", "stopped"]
    assert await async_store.leader(name) is None  # the failing term resigned on the way out

    async def one_term(el: distlock.AsyncElection) -> None:
        assert await el.is_leader()

    assert await election.lead(one_term, requeue=False) == 1
    assert await async_store.leader(name) is None
    with pytest.raises(ConfigError):
        await election.lead("not a function", requeue=False)  # type: ignore[arg-type]

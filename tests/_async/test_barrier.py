"""Barriers and double barriers on every backend, on the async API; ``tests/_sync/`` is generated from this file.

Parametrized over the conformance table (tests/backends.py): rows without barriers refuse these tests by name
(``test_barrier``, ``test_double_barrier``). Timing bounds are generous: what is checked is that the waiters are
released together, within seconds of the last arrival rather than at their timeout.
"""

from __future__ import annotations

import signal
from time import monotonic

import pytest

import distlock
from distlock import ConfigError
from distlock._core import barrier as rules
from tests.concurrency_async import run_all, sleep
from tests.latch_raw import left_of
from tests.test_processes import read_line, spawn


async def _gone(store: distlock.AsyncStore, url: str, name: str) -> list[str]:
    """What is left of ``name`` on the server once it settles (a few seconds at most)."""
    deadline = monotonic() + 10
    while (left := left_of(store, url, name)) and monotonic() < deadline:
        await sleep(0.2)
    return left


async def test_barrier_releases_every_party_of_two_stores_together(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    other = await distlock.connect_async(backend_url)
    try:
        woke: list[float] = []
        last = [0.0]

        async def party(store: distlock.AsyncStore, delay: float) -> None:
            await sleep(delay)
            if delay:
                last[0] = monotonic()
            assert await store.barrier(name, 3).wait(timeout=30)
            woke.append(monotonic())

        await run_all(lambda: party(async_store, 0), lambda: party(other, 0.3), lambda: party(async_store, 1.0))
        assert len(woke) == 3 and min(woke) >= last[0] and max(woke) - last[0] < 5.0
        assert await _gone(async_store, backend_url, name) == []  # every member saw the trip: nothing stays
        # the name is reusable at once: the next generation trips on its own arrivals
        results = await run_all(
            lambda: other.barrier(name, 2).wait(timeout=30), lambda: async_store.barrier(name, 2).wait(timeout=30)
        )
        assert results == [True, True]
    finally:
        await other.aclose()


async def test_barrier_wait_times_out_false_withdrawn_then_the_next_generation_trips(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    began = monotonic()
    assert not await async_store.barrier(name, 2).wait(timeout=0.5)
    assert 0.45 <= monotonic() - began < 3.5  # max(T, 2 s) + 1 s at most
    assert left_of(async_store, backend_url, name) == []  # the arrival was withdrawn: nothing left
    # the timed-out arrival does not count: one more arrival alone does not trip it
    assert not await async_store.barrier(name, 2).wait(timeout=0.3)
    results = await run_all(
        lambda: async_store.barrier(name, 2).wait(timeout=30), lambda: async_store.barrier(name, 2).wait(timeout=30)
    )
    assert results == [True, True]
    assert await _gone(async_store, backend_url, name) == []


async def test_barrier_a_killed_participant_does_not_count(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    if async_store.scheme == "memory":
        pytest.skip("memory:// lives in one process")
    child = spawn("barrier", backend_url, name, "2", "1.5")
    try:
        read_line(child, "ARRIVING")
        deadline = monotonic() + 10
        while not left_of(async_store, backend_url, name) and monotonic() < deadline:
            await sleep(0.1)
        assert left_of(async_store, backend_url, name)  # the child's arrival is on the server
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    await sleep(2.5)  # its lease (1.5 s) ran out with no renewal
    assert not await async_store.barrier(name, 2, ttl=1.5).wait(timeout=0.5)  # alone: the dead one is not a party
    results = await run_all(
        lambda: async_store.barrier(name, 2, ttl=1.5).wait(timeout=30),
        lambda: async_store.barrier(name, 2, ttl=1.5).wait(timeout=30),
    )
    assert results == [True, True]
    assert await _gone(async_store, backend_url, name) == []


async def test_barrier_a_slow_member_is_released_and_a_newcomer_waits_for_its_own_generation(
    async_store: distlock.AsyncStore, name: str
) -> None:
    backend = async_store._backend

    async def step(kind: str, member: str, gen: str = "") -> rules.Reply:
        return await backend.barrier_step(
            "barrier", name, rules.Op(kind, member, gen, 2, 10.0, 60.0, True, member + "-next")
        )

    a = await step(rules.ARRIVE, "a")
    b = await step(rules.ARRIVE, "b")
    assert a.outcome == rules.WAITING and b.outcome == rules.TRIPPED and b.gen == a.gen
    c = await step(rules.ARRIVE, "c")  # after the trip, before "a" looked: the next generation
    assert c.outcome == rules.WAITING and c.gen != a.gen
    assert (await step(rules.LOOK, "a", a.gen)).outcome == rules.TRIPPED  # "a" is released all the same
    assert (await step(rules.LOOK, "c", c.gen)).outcome == rules.WAITING  # "c" is not
    assert (await step(rules.WITHDRAW, "c", c.gen)).outcome == rules.WITHDRAWN
    assert (await step(rules.LOOK, "b", b.gen)).outcome == rules.TRIPPED


async def test_double_barrier_enter_waits_for_all_and_leave_for_all_to_leave(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    other = await distlock.connect_async(backend_url)
    try:
        events: list[tuple[str, str, float]] = []

        async def member(store: distlock.AsyncStore, who: str, enter_after: float, leave_after: float) -> None:
            b = store.double_barrier(name, 2)
            await sleep(enter_after)
            events.append(("enter", who, monotonic()))
            assert await b.enter(timeout=30)
            events.append(("entered", who, monotonic()))
            await sleep(leave_after)
            events.append(("leave", who, monotonic()))
            assert await b.leave(timeout=30)
            events.append(("left", who, monotonic()))

        await run_all(lambda: member(async_store, "a", 0, 0), lambda: member(other, "b", 0.8, 1.0))
        at = {(kind, who): t for kind, who, t in events}
        assert at["entered", "a"] >= at["enter", "b"]  # a entered only once b came
        assert at["left", "a"] >= at["leave", "b"]  # a's leave waited for b's
        assert await _gone(async_store, backend_url, name) == []
    finally:
        await other.aclose()


async def test_double_barrier_enter_times_out_false_and_leaves_nothing(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    b = async_store.double_barrier(name, 2)
    began = monotonic()
    assert not await b.enter(timeout=0.5)
    assert 0.45 <= monotonic() - began < 3.5
    assert left_of(async_store, backend_url, name) == []
    with pytest.raises(ConfigError):
        await b.leave(timeout=1)  # not entered
    with pytest.raises(ConfigError):
        async_store.barrier(name, 0)

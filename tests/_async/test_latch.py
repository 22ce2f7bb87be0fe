"""Count-down latches on every backend, on the async API; ``tests/_sync/`` is generated from this file.

Parametrized over the conformance table (tests/backends.py): rows that have no latch refuse these tests by
name (``test_latch``). Timing bounds are generous: what is checked is that waiters are woken at all, and
within seconds rather than at their timeout.
"""

from __future__ import annotations

import signal
from time import monotonic

import pytest

import distlock
from distlock import ConfigError
from tests.concurrency_async import run_all, sleep
from tests.latch_raw import left_of
from tests.test_processes import read_line, spawn


async def test_latch_counts_down_from_many_owners_and_releases_every_waiter(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    other = await distlock.connect_async(backend_url)
    try:
        latch = async_store.latch(name, count=3)
        assert await latch.count() == 3
        woke: list[float] = []

        async def waiter(store: distlock.AsyncStore) -> None:
            assert await store.latch(name).wait(timeout=30)
            woke.append(monotonic())

        async def counters() -> None:
            await sleep(0.5)  # the waiters wait by now
            assert await other.latch(name, count=3).count_down() == 2
            assert await async_store.latch(name).count_down() == 1
            assert woke == []
            global_end[0] = monotonic()
            assert await other.latch(name).count_down() == 0

        global_end = [0.0]
        await run_all(lambda: waiter(async_store), lambda: waiter(other), lambda: waiter(async_store), counters)
        assert len(woke) == 3 and max(woke) - global_end[0] < 5.0  # woken at zero, not at their timeout
        assert await latch.count() == 0 and await latch.count_down() == 0  # never below 0
        assert await other.latch(name).wait(timeout=0)  # a waiter that comes later returns at once
    finally:
        await other.aclose()


async def test_latch_wait_times_out_false_then_returns_true(async_store: distlock.AsyncStore, name: str) -> None:
    latch = async_store.latch(name, count=1)
    began = monotonic()
    assert not await latch.wait(timeout=0.3)
    assert 0.25 <= monotonic() - began < 3.5  # max(T, 2 s) + 1 s at most
    assert not await latch.wait(timeout=0)
    assert await latch.count_down() == 0
    assert await latch.wait(timeout=0.3)
    assert await latch.wait()


async def test_latch_count_never_goes_below_zero(async_store: distlock.AsyncStore, name: str) -> None:
    latch = async_store.latch(name, count=2)
    results = await run_all(*[latch.count_down for _ in range(6)])
    assert sorted(results) == [0, 0, 0, 0, 0, 1]
    assert await latch.count() == 0
    assert await async_store.latch(name).count() == 0


async def test_latch_with_another_count_is_a_config_error(async_store: distlock.AsyncStore, name: str) -> None:
    with pytest.raises(ConfigError):
        async_store.latch(name, count=0)
    latch = async_store.latch(name, count=3)
    assert await latch.count_down() == 2
    with pytest.raises(ConfigError) as err:
        await async_store.latch(name, count=4).count()
    assert "count=3" in str(err.value) and "\n" not in str(err.value)
    joined = async_store.latch(name)
    assert await joined.count() == 2  # count=None joins whatever round exists
    assert await async_store.latch(name, count=3).count_down() == 1  # the same count joins too
    assert await latch.count() == 1


async def test_latch_a_creator_after_zero_sees_it_done_and_the_name_is_fresh_after_the_linger(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    latch = async_store.latch(name, count=1, linger=1.0)
    assert await latch.count_down() == 0
    late = async_store.latch(name, count=1, linger=1.0)
    assert await late.count() == 0 and await late.wait(timeout=0)  # the marker: done, not a new round
    assert await late.count_down() == 0
    await sleep(1.5)
    fresh = async_store.latch(name, count=2)
    assert await fresh.count() == 2  # after the linger: a new round of the name
    assert await latch.count() == 0 and await latch.wait(timeout=0)  # the old object's round stays done
    assert await fresh.count_down() == 1
    assert await fresh.count_down() == 0


async def test_latch_leaves_nothing_on_the_server_after_its_linger(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    latch = async_store.latch(name, count=2, linger=0.5)
    assert left_of(async_store, backend_url, name) == []  # made at the first call, not by the object
    assert await latch.count() == 2
    assert left_of(async_store, backend_url, name)  # the reader sees the live latch
    await latch.count_down()
    await latch.count_down()
    assert await latch.wait(timeout=0)
    await sleep(1.0)
    # the stores without server-side expiry remove the marker at their next latch call
    other = name[::-1]  # a name whose keys do not contain this one
    assert await async_store.latch(other, count=1, linger=0.5).count() == 1
    await async_store.latch(other, linger=0.5).count_down()
    assert await latch.count() == 0
    deadline = monotonic() + 10
    while left_of(async_store, backend_url, name) and monotonic() < deadline:
        await sleep(0.2)
    assert left_of(async_store, backend_url, name) == []


async def test_latch_keeps_its_count_when_its_creator_is_killed(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    if async_store.scheme == "memory":
        pytest.skip("memory:// lives in one process")
    child = spawn("latch", backend_url, name, "3")
    try:
        assert read_line(child, "COUNTED") == "2"
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)  # reaps it and closes its pipes
    await sleep(0.5)
    latch = async_store.latch(name, count=3)
    assert await latch.count() == 2  # no lease on the count: the dead creator's round goes on
    assert not await latch.wait(timeout=0.2)
    assert await latch.count_down() == 1
    assert await latch.count_down() == 0
    assert await latch.wait(timeout=5)


async def test_latch_counted_down_by_other_processes_releases_the_waiters(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    if async_store.scheme == "memory":
        pytest.skip("memory:// lives in one process")
    latch = async_store.latch(name, count=3)
    assert await latch.count() == 3
    children = [spawn("latch", backend_url, name, "3") for _ in range(3)]
    try:
        counted = sorted(int(read_line(child, "COUNTED")) for child in children)
    finally:
        for child in children:
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=30)
    assert counted == [0, 1, 2]  # each process took one off, none twice, none below 0
    assert await latch.wait(timeout=5) and await async_store.latch(name).wait(timeout=5)


async def test_latch_a_waiter_is_woken_promptly_at_zero(async_store: distlock.AsyncStore, name: str) -> None:
    latch = async_store.latch(name, count=1)
    zero_at = [0.0]

    async def waiter() -> float:
        assert await async_store.latch(name).wait(timeout=60)
        return monotonic()

    async def counter() -> float:
        await sleep(1.0)
        zero_at[0] = monotonic()
        assert await latch.count_down() == 0
        return 0.0

    woke, _ = await run_all(waiter, counter)
    assert woke - zero_at[0] < 5.0


async def test_latch_a_count_down_sent_again_after_a_lost_reply_counts_once(
    async_store: distlock.AsyncStore, name: str
) -> None:
    latch = async_store.latch(name, count=3)
    assert await latch.count() == 3
    backend = async_store._backend
    round_id = latch._round
    assert round_id is not None
    # what a driver's resend of one count-down looks like to the server: the same step id twice
    assert await backend.latch_count_down(name, round_id, "a" * 32, 60.0) == 2
    assert await backend.latch_count_down(name, round_id, "a" * 32, 60.0) == 2
    assert await backend.latch_count_down(name, round_id, "b" * 32, 60.0) == 1
    assert await backend.latch_count_down(name, "another-round", "c" * 32, 60.0) == 0  # not its round
    assert await latch.count() == 1

"""Weighted semaphores on every backend, on the async API; ``tests/_sync/`` is generated from this file.

Parametrized over the conformance table (tests/backends.py). A backend without semaphores (Redlock, the SQL
session modes) refuses them when the object is built, which each test checks and stops there. What is checked
is the contract of docs/getting-started.md ("Semaphores"): permits taken all or nothing as one holding, a big
request not starved by single permits, one declared size per semaphore, ``set_permits`` for everyone, nothing
left on the server once nobody uses it, and a crashed holder's permits freed. Bounds are generous.
"""

from __future__ import annotations

import signal
from time import monotonic

import pytest

import distlock
from distlock import AcquireTimeout, ConfigError
from tests._async.test_conformance import refuses_semaphores
from tests.concurrency_async import run_all, sleep
from tests.latch_raw import left_of
from tests.test_processes import read_line, spawn


async def test_semaphore_permits_are_taken_all_or_nothing_as_one_holding(
    async_store: distlock.AsyncStore, name: str
) -> None:
    if refuses_semaphores(async_store, name):
        return
    a = async_store.semaphore(name, permits=3, ttl=10)
    b = async_store.semaphore(name, permits=3, ttl=10)
    fences: list[int] = []
    looked: list[bool] = []  # the other owner has looked: the holder may release (no timing between the two)

    async def until(flag: list[int] | list[bool]) -> None:
        end = monotonic() + 30
        while not flag and monotonic() < end:
            await sleep(0.02)
        assert flag

    async def holder() -> None:
        assert await a.acquire(permits=2)
        assert a.hold_count == 2 and a.fence is not None
        fences.append(a.fence)
        await until(looked)
        await a.release()  # both permits go with one release

    async def other() -> None:
        await until(fences)
        assert not await b.acquire(timeout=0.3, permits=2)  # one is free: nothing of it is taken
        info = await async_store.inspect(name)
        assert info is not None and info.kind == "semaphore"
        assert (info.permits, info.taken) == (3, 2)
        assert [h.permits for h in info.holders] == [2] and [h.fence for h in info.holders] == fences
        assert b.hold_count == 0
        assert await b.acquire(blocking=False)  # the one free permit
        await b.release()
        looked.append(True)
        assert await b.acquire(timeout=30, permits=2)  # granted once the holder releases
        assert b.hold_count == 2 and b.fence is not None and b.fence > fences[0]
        await b.release()

    await run_all(holder, other)
    assert await async_store.inspect(name) is None


async def test_semaphore_take_is_the_with_form_of_a_weighted_acquire(
    async_store: distlock.AsyncStore, name: str
) -> None:
    if refuses_semaphores(async_store, name):
        return
    sem = async_store.semaphore(name, permits=3, ttl=10)
    async with sem.take(2, timeout=5) as held:
        assert held is sem and sem.hold_count == 2 and isinstance(held.fence, int)
        with pytest.raises(AcquireTimeout):
            async with async_store.semaphore(name, permits=3).take(2, timeout=0.2):
                pytest.fail("granted beyond the capacity")
        async with sem.take():  # one more holding of this owner: the last free permit
            assert sem.hold_count == 3
        assert sem.hold_count == 2
    assert sem.hold_count == 0 and await async_store.inspect(name) is None


async def test_semaphore_a_big_request_is_not_starved_by_single_permits(
    async_store: distlock.AsyncStore, name: str
) -> None:
    if refuses_semaphores(async_store, name):
        return
    done = [False]
    granted: list[float] = []

    async def small() -> None:
        sem = async_store.semaphore(name, permits=3, ttl=10)
        while not done[0]:
            if await sem.acquire(timeout=30):
                await sleep(0.05)
                await sem.release()

    async def big() -> None:
        await sleep(0.5)  # the small ones keep the semaphore busy by now
        sem = async_store.semaphore(name, permits=3, ttl=10)
        began = monotonic()
        try:
            assert await sem.acquire(timeout=60, permits=3)
            granted.append(monotonic() - began)
            info = await async_store.inspect(name)
            assert info is not None and info.taken == 3 and len(info.holders) == 1
            await sem.release()
        finally:
            done[0] = True

    await run_all(small, small, small, small, big)  # four on three permits: one always waits
    assert granted and granted[0] < 30.0


async def test_semaphore_declared_size_mismatch_and_bad_permits_are_config_errors(
    async_store: distlock.AsyncStore, name: str
) -> None:
    if refuses_semaphores(async_store, name):
        return
    with pytest.raises(ConfigError, match="no stored capacity yet: pass permits=N"):
        await async_store.semaphore(name, permits=None).acquire(timeout=5)  # free: nothing to follow, no wait
    sem = async_store.semaphore(name, permits=3, ttl=10)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError):
            await sem.acquire(permits=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="could never be granted"):
        await sem.acquire(permits=4)
    assert await sem.acquire()
    with pytest.raises(ConfigError) as err:
        await async_store.semaphore(name, permits=4).acquire(timeout=5)
    assert "declared with permits=3" in str(err.value) and "\n" not in str(err.value)
    follower = async_store.semaphore(name, permits=None, ttl=10)
    with pytest.raises(ConfigError, match="could never be granted"):
        await follower.acquire(timeout=5, permits=4)
    info = await async_store.inspect(name)
    assert info is not None and info.taken == 1  # none of the refused ones took anything
    assert await follower.acquire(timeout=5, permits=2)  # permits=None follows the stored capacity
    await follower.release()
    await sem.release()
    assert await async_store.inspect(name) is None


async def test_semaphore_set_permits_resizes_for_everyone(async_store: distlock.AsyncStore, name: str) -> None:
    if refuses_semaphores(async_store, name):
        return
    sems = [async_store.semaphore(name, permits=2, ttl=10) for _ in range(5)]
    assert not await sems[0].set_permits(4)  # free: nothing stored, the next first user decides
    assert await sems[0].acquire() and await sems[1].acquire()
    assert not await sems[2].acquire(blocking=False)

    async def grow() -> None:
        await sleep(0.3)
        assert await sems[4].set_permits(4)

    async def waiter() -> None:
        assert await sems[2].acquire(timeout=30)  # woken by the resize, not only by a release
        await sems[2].release()

    await run_all(grow, waiter)
    # the first users' permits=2 still fits (declared, not in force), and two more are in
    assert await sems[2].acquire(blocking=False) and await sems[3].acquire(blocking=False)
    assert not await sems[4].acquire(blocking=False)
    assert await sems[4].set_permits(1)  # four held, capacity 1: nobody is revoked
    info = await async_store.inspect(name)
    assert info is not None and (info.permits, info.taken) == (1, 4)
    for sem in sems[:3]:
        await sem.release()
    assert not await sems[4].acquire(timeout=0.3)  # one still held: used 1 + 1 > 1
    await sems[3].release()
    assert await sems[4].acquire(timeout=10)
    await sems[4].release()


async def test_semaphore_leaves_nothing_on_the_server_once_nobody_uses_it(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    if refuses_semaphores(async_store, name):
        return
    sem = async_store.semaphore(name, permits=2, ttl=10)
    assert await sem.acquire(permits=2)
    assert await sem.set_permits(3)
    assert not await async_store.semaphore(name, permits=2).acquire(timeout=0.3, permits=2)  # a big one queued
    await sem.release()
    after = [a for a in left_of(async_store, backend_url, name) if "fence" not in a]  # counters of fences stay
    assert after == [], after
    # the next first user declares anew
    again = async_store.semaphore(name, permits=5, ttl=10)
    assert await again.acquire(permits=5)
    await again.release()


async def test_semaphore_a_killed_holder_frees_all_its_permits(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    if refuses_semaphores(async_store, name):
        return
    if async_store.scheme == "memory":
        pytest.skip("memory:// lives in one process")
    child = spawn("semaphore", backend_url, name, "3", "2", "2")
    try:
        fence = int(read_line(child, "ACQUIRED"))
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    sem = async_store.semaphore(name, permits=3, ttl=10)
    assert await sem.acquire(timeout=30, permits=3)  # its lease (2 s) or session ends: both permits come back
    assert sem.fence is not None and sem.fence > fence
    await sem.release()

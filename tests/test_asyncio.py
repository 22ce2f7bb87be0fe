"""asyncio-specific guarantees, on every backend: cancellation leaves nothing behind, ownership is per task,
the event loop is never blocked, and closing a store stops every background task."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import distlock
from distlock import LockError, NotHeld, _steps
from distlock._core.types import Mode

ROOT = Path(__file__).resolve().parent.parent


async def assert_nothing_left(store: distlock.AsyncStore, name: str, holders: int = 0) -> None:
    info = await store.inspect(name)
    if holders == 0:
        assert info is None or not info.holders, info
    else:
        assert info is not None and len(info.holders) == holders, info
    if info is not None:
        assert info.waiters in (0, None), info


@pytest.mark.parametrize("delay_ms", [0, 0.2, 0.5, 1, 2, 3, 5, 8, 13, 21])
async def test_cancelled_uncontended_acquire_leaves_no_entry(
    async_store: distlock.AsyncStore, name: str, delay_ms: float
) -> None:
    lock = async_store.lock(name, ttl=10)
    task = asyncio.create_task(lock.acquire(timeout=10))
    await asyncio.sleep(delay_ms / 1000)
    task.cancel()
    try:
        acquired = await task
    except asyncio.CancelledError:
        acquired = False
    # the client believes it holds exactly what the backend has: no orphan entry, no phantom holding
    held = lock._held()
    info = await async_store.inspect(name)
    assert len(held) == int(acquired)
    assert (len(info.holders) if info else 0) == int(acquired), info
    if acquired:
        assert await async_store.break_lock(name)
    await assert_nothing_left(async_store, name)


@pytest.mark.parametrize("mode", ["lock", "write", "fair"])
async def test_cancelled_waiter_leaves_no_queue_entry(async_store: distlock.AsyncStore, name: str, mode: str) -> None:
    caps = async_store.capabilities
    if mode == "write" and Mode.WRITE not in caps.modes:
        pytest.skip("this backend refuses read-write locks (declared in its capabilities)")
    holder = async_store.lock(name, ttl=10)
    await holder.acquire()
    for delay_ms in (0, 1, 5, 20, 60):
        if mode == "write":
            waiter = async_store.rwlock(name, ttl=10).write
        elif mode == "fair" and (async_store.capabilities.fair or async_store.capabilities.always_fair):
            waiter = async_store.lock(name, ttl=10, fair=True)
        else:
            waiter = async_store.lock(name, ttl=10)
        task = asyncio.create_task(waiter.acquire(timeout=10))
        await asyncio.sleep(delay_ms / 1000)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await assert_nothing_left(async_store, name, holders=1)
    await holder.release()
    # and the lock is free for the next one: no dead queue entry blocks it
    nxt = async_store.lock(name, ttl=10, fair=True) if mode == "fair" and async_store.capabilities.fair else None
    nxt = nxt or async_store.lock(name, ttl=10)
    assert await nxt.acquire(timeout=5)
    await nxt.release()


@pytest.mark.parametrize("delay_ms", [0, 0.2, 0.5, 1, 2, 5])
async def test_cancelled_release_is_never_half_done(
    async_store: distlock.AsyncStore, name: str, delay_ms: float
) -> None:
    lock = async_store.lock(name, ttl=10)
    releasing = asyncio.Event()

    async def owner() -> None:  # ownership is per task: the same task acquires and releases
        await lock.acquire()
        releasing.set()
        await lock.release()

    task = asyncio.create_task(owner())
    await releasing.wait()
    await asyncio.sleep(delay_ms / 1000)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    # the release ran to completion: free on the backend AND not held by the object
    await assert_nothing_left(async_store, name)
    assert lock._held() == []
    assert await lock.acquire(timeout=5)
    await lock.release()


async def test_rlock_is_reentrant_per_task_not_per_thread(async_store: distlock.AsyncStore, name: str) -> None:
    rlock = async_store.rlock(name, ttl=10)
    assert await rlock.acquire()
    assert await rlock.acquire()  # same task: re-entry

    async def other_task() -> tuple[bool, bool]:
        got = await rlock.acquire(timeout=0.2)  # same thread, other task: must wait, not re-enter
        try:
            await rlock.release()
            released = True
        except NotHeld:
            released = False
        return got, released

    assert await asyncio.create_task(other_task()) == (False, False)
    await rlock.release()
    await rlock.release()
    assert not await rlock.locked()


async def test_task_cannot_release_another_tasks_hold(async_store: distlock.AsyncStore, name: str) -> None:
    lock = async_store.lock(name, ttl=10)
    await lock.acquire()
    with pytest.raises(NotHeld):
        await asyncio.create_task(lock.release())
    assert await lock.owned()
    await lock.release()


async def test_event_loop_keeps_its_cadence_under_contention(async_store: distlock.AsyncStore, name: str) -> None:
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async def worker() -> None:
        lock = async_store.lock(name, ttl=10)
        for _ in range(10):
            async with lock:
                await asyncio.sleep(0.002)

    tick = asyncio.create_task(ticker())
    await asyncio.gather(*(worker() for _ in range(10)))
    stop.set()
    await tick
    assert len(gaps) > 5
    # a blocking driver call on the loop would show up as a gap of the order of a lock hand-off chain
    assert max(gaps) < 0.25, f"event loop stalled for {max(gaps) * 1000:.0f} ms"


async def test_hundred_tasks_and_two_processes_share_a_counter(
    async_store: distlock.AsyncStore, backend: str, backend_url: str, name: str, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    others: list[subprocess.Popen[str]] = []
    if backend != "memory":
        others = [
            subprocess.Popen(
                [sys.executable, "-m", "tests.proc_worker", "counter", backend_url, name, "15", str(tmp_path), f"p{i}"],
                cwd=ROOT,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(2)
        ]

    async def task_worker() -> None:
        lock = async_store.lock(name, ttl=10)
        async with lock:
            value = int(counter.read_text())
            await asyncio.sleep(0.0005)
            counter.write_text(str(value + 1))

    try:
        await asyncio.gather(*(task_worker() for _ in range(100)))
    finally:
        errors = [(p, (await asyncio.to_thread(p.communicate, timeout=120))[1]) for p in others]
    for p, err in errors:
        assert p.returncode == 0, err
    assert int(counter.read_text()) == 100 + 15 * len(others)


async def test_waiters_of_one_store_do_not_herd_at_the_backend(async_store: distlock.AsyncStore, name: str) -> None:
    """F11 in docs/safety.md inside one process: 12 tasks wait for a held lock; the whole hand-off chain costs about one
    backend try per waiter, not one per waiter per release (a herd is ~n^2/2 = 78 tries on a backend that
    wakes every waiter at each release)."""
    backend = async_store._backend
    real_attempt = backend.attempt
    tries = [0]

    def counting_attempt(claim: Any) -> Any:
        attempt = real_attempt(claim)
        real_try = attempt.try_acquire

        async def try_acquire() -> Any:
            tries[0] += 1
            return await real_try()

        attempt.try_acquire = try_acquire
        return attempt

    holder = async_store.lock(name, ttl=10)
    await holder.acquire()
    order: list[int] = []

    async def waiter(i: int) -> None:
        async with async_store.lock(name, ttl=10):
            order.append(i)

    backend.attempt = counting_attempt  # type: ignore[method-assign]
    try:
        tasks = [asyncio.create_task(waiter(i)) for i in range(12)]
        await asyncio.sleep(0.3)  # every waiter is parked
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    finally:
        backend.attempt = real_attempt  # type: ignore[method-assign]
    assert sorted(order) == list(range(12))
    assert tries[0] <= 3 * 12, f"{tries[0]} backend tries for 12 waiters: they herd"


async def test_aclose_releases_and_stops_background_tasks(backend_url: str, name: str) -> None:
    store = await distlock.connect_async(backend_url)
    lock = store.lock(name, ttl=5)
    await lock.acquire()
    before = {t for t in asyncio.all_tasks() if not t.done()}
    await store.aclose()
    await asyncio.sleep(0)
    after = {t for t in asyncio.all_tasks() if not t.done()}
    assert not {t for t in before - {asyncio.current_task()} if "distlock" in t.get_name()} & after
    async with await distlock.connect_async(backend_url) as other:
        assert await other.inspect(name) is None  # close released what was held
        with pytest.raises(LockError):
            store.lock(name)  # a closed store builds nothing


async def test_cancelled_multilock_releases_what_it_took(async_store: distlock.AsyncStore, name: str) -> None:
    blocker = async_store.lock(name + "-b", ttl=10)
    await blocker.acquire()
    multi = async_store.multilock([name + "-a", name + "-b"], ttl=10)
    task = asyncio.create_task(multi.acquire(timeout=10))
    for _ in range(200):  # until it holds -a and waits for -b
        info = await async_store.inspect(name + "-a")
        if info is not None and info.holders:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await assert_nothing_left(async_store, name + "-a")
    await blocker.release()


async def test_barrier_a_cancelled_wait_withdraws_its_arrival(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    from tests.latch_raw import left_of

    for delay in (0.0, 0.001, 0.01, 0.05, 0.5):
        task = asyncio.create_task(async_store.barrier(name, 2).wait(timeout=30))
        await asyncio.sleep(delay)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert left_of(async_store, backend_url, name) == [], delay  # no arrival left to count
    assert not await async_store.barrier(name, 2).wait(timeout=0.3)  # alone: no cancelled arrival counts


async def test_double_barrier_a_cancelled_enter_withdraws_its_entry(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    from tests.latch_raw import left_of

    for delay in (0.0, 0.01, 0.5):
        task = asyncio.create_task(async_store.double_barrier(name, 2).enter(timeout=30))
        await asyncio.sleep(delay)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert left_of(async_store, backend_url, name) == [], delay
    assert not await async_store.double_barrier(name, 2).enter(timeout=0.3)


async def test_barrier_a_wait_cancelled_while_its_arrival_is_in_flight_leaves_nothing(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    """The arrival's step is applied after the cancel (it waited for SQLite's write lock): the withdrawal still
    takes it back."""
    import sqlite3

    from tests.latch_raw import left_of

    if async_store.scheme != "sqlite":
        pytest.skip("needs a database file another connection can hold the write lock of")
    assert not await async_store.barrier(name + "-x", 2).wait(timeout=0)  # the table exists
    blocker = sqlite3.connect(backend_url.split("sqlite://", 1)[1], isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        task = asyncio.create_task(async_store.barrier(name, 2).wait(timeout=30))
        await asyncio.sleep(0.5)  # its arrival waits for the write lock
        task.cancel()
        await asyncio.sleep(0.2)
        blocker.execute("ROLLBACK")
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        blocker.close()
    assert left_of(async_store, backend_url, name) == []
    assert not await async_store.barrier(name, 2).wait(timeout=0.3)


async def test_postgres_release_runs_its_driver_call_in_the_release_s_own_task(
    postgres_session_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PostgreSQL release is one shielded task with its driver call awaited inside it: a shield of the call's
    own (a task and two loop turns more) would guard against a cancellation the release's task already keeps
    away. The acquire's call keeps its shield: a cancelled acquire ends the call by shutting its socket."""
    made: list[str] = []

    class Counted(_steps._Unstoppable):  # type: ignore[type-arg]
        def __init__(self, coro: Any, on_cancel: Any) -> None:
            made.append(coro.__qualname__)
            super().__init__(coro, on_cancel)

    async with await distlock.connect_async(postgres_session_url) as store:
        lock = store.lock("asyncio/pg-release-tasks", ttl=10)
        assert await lock.acquire(timeout=10)
        await lock.release()  # warm: the connection is open and pinned, as in a loop of pairs
        monkeypatch.setattr(_steps, "_Unstoppable", Counted)
        assert await lock.acquire(timeout=10)
        assert len(made) == 1, made  # the statement's own shield
        made.clear()
        await lock.release()
        assert made == ["AsyncLock._release_holding"], made

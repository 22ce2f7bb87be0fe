"""The behaviour every backend must show, on the async API; ``tests/_sync/`` is generated from this file.

Parametrized over every row of the conformance table (tests/backends.py). Timings are generous bounds on waits, never
speed assertions: a lock that is not handed over within its TTL is broken, not slow.
"""

from __future__ import annotations

import math
from time import monotonic

import pytest

import distlock
from distlock import ConfigError, LockError, LockLost, NotHeld, UnsupportedFeature
from distlock._core.types import Mode
from tests.concurrency_async import other_owner, run_all, sleep


async def test_acquire_release_and_fences_increase(async_store: distlock.AsyncStore, name: str) -> None:
    lock = async_store.lock(name, ttl=10)
    fences = []
    for _ in range(3):
        assert await lock.acquire()
        assert await lock.owned()
        assert await lock.locked()
        fences.append(lock.fence)
        await lock.release()
        assert lock.fence is None
    assert all(isinstance(f, int) for f in fences)
    assert fences == sorted(fences) and len(set(fences)) == 3
    assert not await lock.locked()


async def test_two_lock_objects_exclude_each_other(async_store: distlock.AsyncStore, name: str) -> None:
    a = async_store.lock(name, ttl=10)
    b = async_store.lock(name, ttl=10)
    assert await a.acquire()
    assert not await b.acquire(blocking=False)
    started = monotonic()
    assert not await b.acquire(timeout=0.3)
    assert monotonic() - started >= 0.29
    await a.release()
    assert await b.acquire(timeout=5)
    assert b.fence is not None and a.fence is None
    await b.release()


async def test_shared_object_excludes_other_owner(async_store: distlock.AsyncStore, name: str) -> None:
    lock = async_store.lock(name, ttl=10)
    assert await lock.acquire()

    async def other() -> bool:
        return await lock.acquire(timeout=0.2)

    assert not await other_owner(other)

    async def other_release() -> None:
        await lock.release()

    with pytest.raises(NotHeld):
        await other_owner(other_release)
    assert await lock.owned()
    await lock.release()


async def test_reacquire_by_holder_raises_for_lock_but_counts_for_rlock(
    async_store: distlock.AsyncStore, name: str
) -> None:
    lock = async_store.lock(name, ttl=10)
    async with lock:
        with pytest.raises(LockError):
            await lock.acquire()
    rlock = async_store.rlock(name + "-r", ttl=10)
    assert await rlock.acquire()
    fence = rlock.fence
    assert await rlock.acquire()
    assert rlock.fence == fence  # re-entry keeps the fence
    await rlock.release()
    assert await rlock.owned()  # still held once
    assert not await other_owner(lambda: async_store.lock(name + "-r").acquire(blocking=False))
    await rlock.release()
    assert not await rlock.locked()
    with pytest.raises(NotHeld):
        await rlock.release()


async def test_context_manager_raises_on_timeout(async_store: distlock.AsyncStore, name: str) -> None:
    holder = async_store.lock(name, ttl=10)
    await holder.acquire()
    ran = False
    with pytest.raises(distlock.AcquireTimeout):
        async with async_store.lock(name, timeout=0.2):
            ran = True
    assert not ran  # the body never runs without the lock
    await holder.release()


async def test_release_without_holding_raises_not_held(async_store: distlock.AsyncStore, name: str) -> None:
    with pytest.raises(NotHeld):
        await async_store.lock(name).release()
    with pytest.raises(NotHeld):
        await async_store.lock(name).extend()


async def test_lease_expires_without_renewal_and_loser_cannot_release_winner(
    async_store: distlock.AsyncStore, name: str
) -> None:
    if not async_store.capabilities.needs_renewal:
        pytest.skip("locks hang off a session: its timeout, not the lock's ttl, frees them (backend fault tests)")
    calls: list[object] = []
    first = async_store.lock(name, ttl=0.5, auto_renew=False, on_lost=calls.append)
    assert await first.acquire()
    old_fence = first.fence
    second = async_store.lock(name, ttl=10)
    assert await second.acquire(timeout=5)  # frees itself within the TTL
    assert second.fence is not None and old_fence is not None and second.fence > old_fence
    with pytest.raises(LockLost):
        await first.release()
    assert first.lost.is_set()
    assert await second.owned()  # the loser's release did not touch the winner
    await second.release()
    for _ in range(50):
        if calls:
            break
        await sleep(0.02)
    assert calls == [first]


async def test_renewal_keeps_lock_for_three_ttls(async_store: distlock.AsyncStore, name: str) -> None:
    lock = async_store.lock(name, ttl=0.6)
    assert await lock.acquire()
    await sleep(1.8)  # without renewal the lease would have ended at 0.6 s
    assert not lock.lost.is_set()
    assert await lock.owned()
    assert not await async_store.lock(name).acquire(blocking=False)
    await lock.release()


async def test_extend_sets_a_new_ttl(async_store: distlock.AsyncStore, name: str) -> None:
    lock = async_store.lock(name, ttl=0.5, auto_renew=False)
    assert await lock.acquire()
    await lock.extend(5)
    await sleep(0.8)
    assert await lock.owned()
    await lock.release()


async def test_waiter_is_handed_the_lock_on_release(async_store: distlock.AsyncStore, name: str) -> None:
    got: list[float] = []

    async def holder() -> None:
        lock = async_store.lock(name, ttl=30)
        assert await lock.acquire()
        await sleep(0.4)
        got.append(monotonic())
        await lock.release()

    async def waiter() -> None:
        await sleep(0.1)
        lock = async_store.lock(name, ttl=30)
        assert await lock.acquire(timeout=20)
        got.append(monotonic())
        await lock.release()

    await run_all(holder, waiter)
    released_at, acquired_at = got
    assert acquired_at >= released_at
    assert acquired_at - released_at < 10  # long before the 30 s lease: woken, not expired


async def test_timed_out_acquire_leaves_nothing_behind(async_store: distlock.AsyncStore, name: str) -> None:
    holder = async_store.lock(name, ttl=10)
    await holder.acquire()
    for kind in ("lock", "write"):
        other = async_store.rwlock(name).write if kind == "write" else async_store.lock(name)
        assert not await other_owner(lambda o=other: o.acquire(timeout=0.2))  # type: ignore[misc]
    info = await async_store.inspect(name)
    assert info is not None and len(info.holders) == 1
    assert info.waiters in (0, None)
    await holder.release()
    assert await async_store.inspect(name) is None


async def test_rwlock_readers_share_writers_exclude(async_store: distlock.AsyncStore, name: str) -> None:
    rw1 = async_store.rwlock(name, ttl=10)
    rw2 = async_store.rwlock(name, ttl=10)
    assert await rw1.read.acquire()
    assert await rw2.read.acquire(blocking=False)
    assert not await async_store.rwlock(name, ttl=10).write.acquire(timeout=0.2)  # (rw2's own: an upgrade)
    await rw1.read.release()
    await rw2.read.release()
    assert await rw1.write.acquire(timeout=5)
    assert not await rw2.read.acquire(timeout=0.2)
    assert not await rw2.write.acquire(blocking=False)
    await rw1.write.release()


async def test_rwlock_waiting_writer_is_not_starved(async_store: distlock.AsyncStore, name: str) -> None:
    order: list[str] = []

    async def first_reader() -> None:
        reader = async_store.rwlock(name, ttl=10).read
        assert await reader.acquire()
        await sleep(0.7)
        await reader.release()

    async def writer() -> None:
        await sleep(0.1)
        write = async_store.rwlock(name, ttl=10).write
        assert await write.acquire(timeout=20)
        order.append("writer")
        await sleep(0.2)
        await write.release()

    async def late_reader() -> None:
        await sleep(0.4)  # the writer is waiting by now
        late = async_store.rwlock(name, ttl=10).read
        assert not await late.acquire(blocking=False)  # a queued writer blocks new readers
        assert await late.acquire(timeout=20)
        order.append("reader")
        await late.release()

    await run_all(first_reader, writer, late_reader)
    assert order == ["writer", "reader"]


async def test_rwlock_is_reentrant_refuses_an_upgrade_and_downgrades_without_letting_a_writer_in(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    rw = async_store.rwlock(name, ttl=10)
    assert await rw.read.acquire()
    assert await rw.read.acquire(blocking=False) and rw.read.hold_count == 2  # reentrant per owner
    with pytest.raises(LockError, match="upgrade"):
        await rw.write.acquire(blocking=False)  # two readers upgrading would wait for each other for ever
    await rw.read.release()
    await rw.read.release()
    if not async_store.capabilities.downgrade:
        async with rw.write:
            with pytest.raises(UnsupportedFeature, match="downgrade"):
                await rw.read.acquire(blocking=False)
        return
    events: list[str] = []

    async def downgrader() -> None:
        assert await rw.write.acquire()
        assert await rw.write.acquire(blocking=False) and rw.write.hold_count == 2
        events.append("write")
        await sleep(0.4)  # the other writer queues meanwhile
        end = monotonic() + 20  # (where the backend counts its waiters, until it has, on a busy machine too)
        while (info := await async_store.inspect(name)) is not None and info.waiters == 0 and monotonic() < end:
            await sleep(0.05)
        assert await rw.read.acquire(blocking=False)  # granted at once, the queued writer notwithstanding
        fence = rw.read.fence
        await rw.write.release()
        await rw.write.release()  # downgraded: the read lock alone is held now
        assert rw.write.hold_count == 0 and rw.read.fence == fence
        await sleep(0.5)
        assert events == ["write"], events  # the writer is still kept out by the read lock
        if "mode=session" not in backend_url:  # session mode: only while the writer's server-side wait runs
            late = async_store.rwlock(name, ttl=10).read
            assert not await late.acquire(blocking=False)  # and a queued writer blocks new readers, as always
        events.append("read released")
        await rw.read.release()

    async def writer() -> None:
        await sleep(0.2)
        other = async_store.rwlock(name, ttl=10).write
        assert await other.acquire(timeout=30)
        events.append("other writer")
        await other.release()

    await run_all(downgrader, writer)
    assert events == ["write", "read released", "other writer"]


def refuses_semaphores(store: distlock.AsyncStore, name: str) -> bool:
    """True if the backend declares no semaphores; then asking for one must fail at construction."""
    if Mode.SEMAPHORE in store.capabilities.modes:
        return False
    with pytest.raises(UnsupportedFeature):
        store.semaphore(name, permits=2)
    return True


async def test_semaphore_never_exceeds_permits(async_store: distlock.AsyncStore, name: str) -> None:
    if refuses_semaphores(async_store, name):  # a backend without them refuses (Redlock: UnsupportedFeature)
        return
    sems = [async_store.semaphore(name, permits=2, ttl=10) for _ in range(3)]
    assert await sems[0].acquire(blocking=False)
    assert await sems[1].acquire(blocking=False)
    assert not await sems[2].acquire(timeout=0.2)
    info = await async_store.inspect(name)
    assert info is not None and len(info.holders) == 2 and info.kind == "semaphore"
    await sems[0].release()
    assert await sems[2].acquire(timeout=5)
    await sems[1].release()
    await sems[2].release()


async def test_semaphore_contention_holds_at_most_n(async_store: distlock.AsyncStore, name: str) -> None:
    if refuses_semaphores(async_store, name):  # a backend without them refuses (Redlock: UnsupportedFeature)
        return
    inside = 0
    peak = 0

    async def worker() -> None:
        nonlocal inside, peak
        sem = async_store.semaphore(name, permits=2, ttl=10)
        for _ in range(3):
            assert await sem.acquire(timeout=30)
            inside += 1
            peak = max(peak, inside)
            await sleep(0.02)
            inside -= 1
            await sem.release()

    await run_all(*[worker] * 5)
    assert peak <= 2
    assert peak >= 1


async def test_multilock_all_or_nothing(async_store: distlock.AsyncStore, name: str) -> None:
    names = [name + "-b", name + "-a", name + "-c"]
    blocker = async_store.lock(name + "-c", ttl=10)
    await blocker.acquire()
    multi = async_store.multilock(names, ttl=10)
    assert not await multi.acquire(timeout=0.3)
    for n in names[:2]:
        assert await async_store.inspect(n) is None  # nothing half-taken is left behind
    await blocker.release()
    async with multi:
        assert set(multi.fences) == set(names)
        assert multi.fence == max(f for f in multi.fences.values() if f is not None)
        for n in names:
            assert await async_store.inspect(n) is not None
    for n in names:
        assert await async_store.inspect(n) is None


async def test_multilocks_in_opposite_orders_do_not_deadlock(async_store: distlock.AsyncStore, name: str) -> None:
    a, b = name + "-a", name + "-b"

    async def worker(names: list[str]) -> int:
        done = 0
        for _ in range(5):
            async with async_store.multilock(names, ttl=10, timeout=30):
                done += 1
        return done

    assert await run_all(lambda: worker([a, b]), lambda: worker([b, a])) == [5, 5]


async def test_inspect_list_and_break(async_store: distlock.AsyncStore, name: str) -> None:
    lock = async_store.lock(name + "/x", ttl=10)
    await lock.acquire()
    info = await async_store.inspect(name + "/x")
    assert info is not None
    (holder,) = info.holders
    assert holder.fence == lock.fence
    assert holder.owner.count(":") >= 2  # host:pid:thread-or-task
    assert holder.ttl_left is None or 0 < holder.ttl_left <= 10
    listed = [i.name for i in await async_store.list(name)]
    assert listed == [name + "/x"]
    assert await async_store.break_lock(name + "/x")
    assert await async_store.inspect(name + "/x") is None
    assert not await lock.owned()
    assert lock.lost.is_set()
    with pytest.raises(LockLost):
        await lock.release()
    assert not await async_store.break_lock(name + "/x")


async def test_client_name_is_stored_with_the_holding_for_every_reader(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    async with await distlock.connect_async(backend_url, client_name="web-1") as labelled:
        assert labelled.client_name == "web-1"
        async with labelled.lock(name, ttl=10) as lock:
            info = await async_store.inspect(name)  # a store without a client name reads it from the server
            assert info is not None
            (holder,) = info.holders
            assert holder.fence == lock.fence and holder.client_name == "web-1"
            assert holder.owner.count(":") >= 2 and "@" not in holder.owner  # the owner id stays host:pid:thread
            assert info.to_json()["holders"][0]["client_name"] == "web-1"  # type: ignore[index]
            listed = [h.client_name for i in await async_store.list(name) for h in i.holders]
            assert listed == ["web-1"]
        if labelled.capabilities.elections:
            election = labelled.election(name + "-e", ttl=10)
            assert await election.campaign("v1", timeout=30)
            leader = await async_store.leader(name + "-e")
            assert leader is not None and leader.value == "v1"
            # etcd and ZooKeeper elections keep only the value (Go's and Curator's layouts): no owner, no name
            assert leader.client_name == (None if leader.owner is None else "web-1")
            await election.resign()
    async with async_store.lock(name, ttl=10):  # a store without one: none
        info = await async_store.inspect(name)
        assert info is not None and info.holders[0].client_name is None
        assert "client_name" not in info.to_json()["holders"][0]  # type: ignore[index]


@pytest.mark.parametrize(
    "bad",
    [
        {"name": ""},
        {"name": "a\x00b"},
        {"name": 42},
        {"ttl": 0},
        {"ttl": -1},
        {"ttl": math.nan},
        {"ttl": math.inf},
        {"timeout": -1},
        {"timeout": math.nan},
    ],
)
async def test_bad_input_is_a_config_error_and_changes_nothing(
    async_store: distlock.AsyncStore, name: str, bad: dict[str, object]
) -> None:
    args: dict[str, object] = {"name": name, "ttl": 10.0, "timeout": None, **bad}
    with pytest.raises(ConfigError) as err:
        async_store.lock(**args)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)
    assert await async_store.list(name) == []


async def test_bad_permits_and_acquire_timeout(async_store: distlock.AsyncStore, name: str) -> None:
    for permits in (0, -3):
        with pytest.raises(ConfigError):
            async_store.semaphore(name, permits=permits)
    lock = async_store.lock(name)
    with pytest.raises(ConfigError):
        await lock.acquire(timeout=-1)
    assert await async_store.inspect(name) is None


async def test_long_and_unicode_names_do_not_collide(async_store: distlock.AsyncStore, name: str) -> None:
    long_a = name + "a" * 900 + "1"
    long_b = name + "a" * 900 + "2"
    la, lb = async_store.lock(long_a, ttl=10), async_store.lock(long_b, ttl=10)
    assert await la.acquire(blocking=False)
    assert await lb.acquire(blocking=False)  # mapped, never truncated into one key
    uni = async_store.lock(name + "/ключ/鍵/🔒", ttl=10)
    assert await uni.acquire(blocking=False)
    for lock in (la, lb, uni):
        await lock.release()


async def test_fair_option_is_checked_at_construction(async_store: distlock.AsyncStore, name: str) -> None:
    caps = async_store.capabilities
    if caps.fair or caps.always_fair:
        lock = async_store.lock(name, fair=True)
        assert await lock.acquire(timeout=5)
        await lock.release()
    else:
        with pytest.raises(UnsupportedFeature):
            async_store.lock(name, fair=True)


async def test_synchronized_decorator_excludes_and_exposes_its_lock(
    async_store: distlock.AsyncStore, name: str
) -> None:
    inside = 0
    peak = 0

    @async_store.synchronized(name, ttl=10, timeout=30)
    async def critical() -> int:
        nonlocal inside, peak
        inside += 1
        peak = max(peak, inside)
        await sleep(0.01)
        inside -= 1
        return 7

    assert await run_all(*[critical] * 4) == [7, 7, 7, 7]
    assert peak == 1
    assert not await critical.lock.locked()  # type: ignore[attr-defined]
    with pytest.raises(ConfigError):
        async_store.synchronized(name, kind="semaphore")


async def _inspect_held(store: distlock.AsyncStore, name: str) -> distlock.LockInfo:
    """``inspect`` of a name this task holds. Redlock's may miss the holder while too few of the masters
    that hold it answer in time (a loaded machine): it is asked again, within a bound."""
    for _ in range(50):
        info = await store.inspect(name)
        if info is not None:
            return info
        await sleep(0.1)
    raise AssertionError(f"{name!r} is held but inspect() does not see it")


async def test_synchronized_template_locks_the_name_of_each_call(async_store: distlock.AsyncStore, name: str) -> None:
    inside: dict[str, int] = {}
    peak: dict[str, int] = {}
    seen: list[str] = []

    @async_store.synchronized(name + "/order/{order_id}/{part}", ttl=10, timeout=30)
    async def handle(order_id: int, part: str = "all") -> str:
        key = f"{order_id}/{part}"
        inside[key] = inside.get(key, 0) + 1
        peak[key] = max(peak.get(key, 0), inside[key])
        info = await _inspect_held(async_store, f"{name}/order/{key}")
        assert len(info.holders) == 1
        seen.extend(i.name for i in await async_store.list(name + "/order/"))
        await sleep(0.01)
        inside[key] -= 1
        return key

    calls = [lambda: handle(1), lambda: handle(order_id=1), lambda: handle(2, part="x"), lambda: handle(2, "x")]
    assert await run_all(*calls) == ["1/all", "1/all", "2/x", "2/x"]
    assert peak == {"1/all": 1, "2/x": 1}  # calls of one name exclude each other
    assert set(seen) <= {f"{name}/order/1/all", f"{name}/order/2/x"}
    assert handle.lock is None  # type: ignore[attr-defined]
    assert handle.lock_for(7).name == f"{name}/order/7/all"  # type: ignore[attr-defined]

    @async_store.synchronized(name + "/r/{n}", kind="rlock", ttl=10)
    async def countdown(n: int, depth: int = 0) -> int:  # re-enters its own name: one holding, counted
        return depth if depth == 2 else await countdown(n, depth + 1)

    assert await countdown(5) == 2
    assert await async_store.inspect(name + "/r/5") is None

    async def f(order_id: int) -> None: ...

    with pytest.raises(ConfigError, match="'order' is not a parameter of"):
        async_store.synchronized(name + "/{order}")(f)
    with pytest.raises(ConfigError, match="positional field"):
        async_store.synchronized(name + "/{}")(f)



async def test_max_hold_caps_a_holding_however_renewals_go_and_frees_it_for_the_next_owner(
    async_store: distlock.AsyncStore, name: str
) -> None:
    with pytest.raises(ConfigError):
        async_store.lock(name, max_hold=0)
    capped = async_store.lock(name, ttl=10, max_hold=1.0)
    waiter = async_store.lock(name, ttl=10)
    assert await capped.acquire()
    # renewed every ttl/3 as always, but lost at the cap and released there: without the cap the waiter would
    # wait for ever, without the release for the 10 s TTL after the last renewal
    assert await waiter.acquire(timeout=8)
    assert capped.lost.is_set()  # told before the next owner got it
    with pytest.raises(LockLost, match="max_hold"):
        await capped.release()
    await waiter.release()
    assert capped.hold_count == 0

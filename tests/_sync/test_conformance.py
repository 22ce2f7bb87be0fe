# GENERATED from tests/_async/test_conformance.py by scripts/gen_sync.py: edit that file, not this one.
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
from tests.concurrency_sync import other_owner, run_all, sleep


def test_acquire_release_and_fences_increase(sync_store: distlock.Store, name: str) -> None:
    lock = sync_store.lock(name, ttl=10)
    fences = []
    for _ in range(3):
        assert lock.acquire()
        assert lock.owned()
        assert lock.locked()
        fences.append(lock.fence)
        lock.release()
        assert lock.fence is None
    assert all(isinstance(f, int) for f in fences)
    assert fences == sorted(fences) and len(set(fences)) == 3
    assert not lock.locked()


def test_two_lock_objects_exclude_each_other(sync_store: distlock.Store, name: str) -> None:
    a = sync_store.lock(name, ttl=10)
    b = sync_store.lock(name, ttl=10)
    assert a.acquire()
    assert not b.acquire(blocking=False)
    started = monotonic()
    assert not b.acquire(timeout=0.3)
    assert monotonic() - started >= 0.29
    a.release()
    assert b.acquire(timeout=5)
    assert b.fence is not None and a.fence is None
    b.release()


def test_shared_object_excludes_other_owner(sync_store: distlock.Store, name: str) -> None:
    lock = sync_store.lock(name, ttl=10)
    assert lock.acquire()

    def other() -> bool:
        return lock.acquire(timeout=0.2)

    assert not other_owner(other)

    def other_release() -> None:
        lock.release()

    with pytest.raises(NotHeld):
        other_owner(other_release)
    assert lock.owned()
    lock.release()


def test_reacquire_by_holder_raises_for_lock_but_counts_for_rlock(
    sync_store: distlock.Store, name: str
) -> None:
    lock = sync_store.lock(name, ttl=10)
    with lock:
        with pytest.raises(LockError):
            lock.acquire()
    rlock = sync_store.rlock(name + "-r", ttl=10)
    assert rlock.acquire()
    fence = rlock.fence
    assert rlock.acquire()
    assert rlock.fence == fence  # re-entry keeps the fence
    rlock.release()
    assert rlock.owned()  # still held once
    assert not other_owner(lambda: sync_store.lock(name + "-r").acquire(blocking=False))
    rlock.release()
    assert not rlock.locked()
    with pytest.raises(NotHeld):
        rlock.release()


def test_context_manager_raises_on_timeout(sync_store: distlock.Store, name: str) -> None:
    holder = sync_store.lock(name, ttl=10)
    holder.acquire()
    ran = False
    with pytest.raises(distlock.AcquireTimeout):
        with sync_store.lock(name, timeout=0.2):
            ran = True
    assert not ran  # the body never runs without the lock
    holder.release()


def test_release_without_holding_raises_not_held(sync_store: distlock.Store, name: str) -> None:
    with pytest.raises(NotHeld):
        sync_store.lock(name).release()
    with pytest.raises(NotHeld):
        sync_store.lock(name).extend()


def test_lease_expires_without_renewal_and_loser_cannot_release_winner(
    sync_store: distlock.Store, name: str
) -> None:
    if not sync_store.capabilities.needs_renewal:
        pytest.skip("locks hang off a session: its timeout, not the lock's ttl, frees them (backend fault tests)")
    calls: list[object] = []
    first = sync_store.lock(name, ttl=0.5, auto_renew=False, on_lost=calls.append)
    assert first.acquire()
    old_fence = first.fence
    second = sync_store.lock(name, ttl=10)
    assert second.acquire(timeout=5)  # frees itself within the TTL
    assert second.fence is not None and old_fence is not None and second.fence > old_fence
    with pytest.raises(LockLost):
        first.release()
    assert first.lost.is_set()
    assert second.owned()  # the loser's release did not touch the winner
    second.release()
    for _ in range(50):
        if calls:
            break
        sleep(0.02)
    assert calls == [first]


def test_renewal_keeps_lock_for_three_ttls(sync_store: distlock.Store, name: str) -> None:
    lock = sync_store.lock(name, ttl=0.6)
    assert lock.acquire()
    sleep(1.8)  # without renewal the lease would have ended at 0.6 s
    assert not lock.lost.is_set()
    assert lock.owned()
    assert not sync_store.lock(name).acquire(blocking=False)
    lock.release()


def test_extend_sets_a_new_ttl(sync_store: distlock.Store, name: str) -> None:
    lock = sync_store.lock(name, ttl=0.5, auto_renew=False)
    assert lock.acquire()
    lock.extend(5)
    sleep(0.8)
    assert lock.owned()
    lock.release()


def test_waiter_is_handed_the_lock_on_release(sync_store: distlock.Store, name: str) -> None:
    got: list[float] = []

    def holder() -> None:
        lock = sync_store.lock(name, ttl=30)
        assert lock.acquire()
        sleep(0.4)
        got.append(monotonic())
        lock.release()

    def waiter() -> None:
        sleep(0.1)
        lock = sync_store.lock(name, ttl=30)
        assert lock.acquire(timeout=20)
        got.append(monotonic())
        lock.release()

    run_all(holder, waiter)
    released_at, acquired_at = got
    assert acquired_at >= released_at
    assert acquired_at - released_at < 10  # long before the 30 s lease: woken, not expired


def test_timed_out_acquire_leaves_nothing_behind(sync_store: distlock.Store, name: str) -> None:
    holder = sync_store.lock(name, ttl=10)
    holder.acquire()
    for kind in ("lock", "write"):
        other = sync_store.rwlock(name).write if kind == "write" else sync_store.lock(name)
        assert not other_owner(lambda o=other: o.acquire(timeout=0.2))  # type: ignore[misc]
    info = sync_store.inspect(name)
    assert info is not None and len(info.holders) == 1
    assert info.waiters in (0, None)
    holder.release()
    assert sync_store.inspect(name) is None


def test_rwlock_readers_share_writers_exclude(sync_store: distlock.Store, name: str) -> None:
    rw1 = sync_store.rwlock(name, ttl=10)
    rw2 = sync_store.rwlock(name, ttl=10)
    assert rw1.read.acquire()
    assert rw2.read.acquire(blocking=False)
    assert not sync_store.rwlock(name, ttl=10).write.acquire(timeout=0.2)  # (rw2's own: an upgrade)
    rw1.read.release()
    rw2.read.release()
    assert rw1.write.acquire(timeout=5)
    assert not rw2.read.acquire(timeout=0.2)
    assert not rw2.write.acquire(blocking=False)
    rw1.write.release()


def test_rwlock_waiting_writer_is_not_starved(sync_store: distlock.Store, name: str) -> None:
    order: list[str] = []

    def first_reader() -> None:
        reader = sync_store.rwlock(name, ttl=10).read
        assert reader.acquire()
        sleep(0.7)
        reader.release()

    def writer() -> None:
        sleep(0.1)
        write = sync_store.rwlock(name, ttl=10).write
        assert write.acquire(timeout=20)
        order.append("writer")
        sleep(0.2)
        write.release()

    def late_reader() -> None:
        sleep(0.4)  # the writer is waiting by now
        late = sync_store.rwlock(name, ttl=10).read
        assert not late.acquire(blocking=False)  # a queued writer blocks new readers
        assert late.acquire(timeout=20)
        order.append("reader")
        late.release()

    run_all(first_reader, writer, late_reader)
    assert order == ["writer", "reader"]


def test_rwlock_is_reentrant_refuses_an_upgrade_and_downgrades_without_letting_a_writer_in(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    rw = sync_store.rwlock(name, ttl=10)
    assert rw.read.acquire()
    assert rw.read.acquire(blocking=False) and rw.read.hold_count == 2  # reentrant per owner
    with pytest.raises(LockError, match="upgrade"):
        rw.write.acquire(blocking=False)  # two readers upgrading would wait for each other for ever
    rw.read.release()
    rw.read.release()
    if not sync_store.capabilities.downgrade:
        with rw.write:
            with pytest.raises(UnsupportedFeature, match="downgrade"):
                rw.read.acquire(blocking=False)
        return
    events: list[str] = []

    def downgrader() -> None:
        assert rw.write.acquire()
        assert rw.write.acquire(blocking=False) and rw.write.hold_count == 2
        events.append("write")
        sleep(0.4)  # the other writer queues meanwhile
        end = monotonic() + 20  # (where the backend counts its waiters, until it has, on a busy machine too)
        while (info := sync_store.inspect(name)) is not None and info.waiters == 0 and monotonic() < end:
            sleep(0.05)
        assert rw.read.acquire(blocking=False)  # granted at once, the queued writer notwithstanding
        fence = rw.read.fence
        rw.write.release()
        rw.write.release()  # downgraded: the read lock alone is held now
        assert rw.write.hold_count == 0 and rw.read.fence == fence
        sleep(0.5)
        assert events == ["write"], events  # the writer is still kept out by the read lock
        if "mode=session" not in backend_url:  # session mode: only while the writer's server-side wait runs
            late = sync_store.rwlock(name, ttl=10).read
            assert not late.acquire(blocking=False)  # and a queued writer blocks new readers, as always
        events.append("read released")
        rw.read.release()

    def writer() -> None:
        sleep(0.2)
        other = sync_store.rwlock(name, ttl=10).write
        assert other.acquire(timeout=30)
        events.append("other writer")
        other.release()

    run_all(downgrader, writer)
    assert events == ["write", "read released", "other writer"]


def refuses_semaphores(store: distlock.Store, name: str) -> bool:
    """True if the backend declares no semaphores; then asking for one must fail at construction."""
    if Mode.SEMAPHORE in store.capabilities.modes:
        return False
    with pytest.raises(UnsupportedFeature):
        store.semaphore(name, permits=2)
    return True


def test_semaphore_never_exceeds_permits(sync_store: distlock.Store, name: str) -> None:
    if refuses_semaphores(sync_store, name):  # a backend without them refuses (Redlock: UnsupportedFeature)
        return
    sems = [sync_store.semaphore(name, permits=2, ttl=10) for _ in range(3)]
    assert sems[0].acquire(blocking=False)
    assert sems[1].acquire(blocking=False)
    assert not sems[2].acquire(timeout=0.2)
    info = sync_store.inspect(name)
    assert info is not None and len(info.holders) == 2 and info.kind == "semaphore"
    sems[0].release()
    assert sems[2].acquire(timeout=5)
    sems[1].release()
    sems[2].release()


def test_semaphore_contention_holds_at_most_n(sync_store: distlock.Store, name: str) -> None:
    if refuses_semaphores(sync_store, name):  # a backend without them refuses (Redlock: UnsupportedFeature)
        return
    inside = 0
    peak = 0

    def worker() -> None:
        nonlocal inside, peak
        sem = sync_store.semaphore(name, permits=2, ttl=10)
        for _ in range(3):
            assert sem.acquire(timeout=30)
            inside += 1
            peak = max(peak, inside)
            sleep(0.02)
            inside -= 1
            sem.release()

    run_all(*[worker] * 5)
    assert peak <= 2
    assert peak >= 1


def test_multilock_all_or_nothing(sync_store: distlock.Store, name: str) -> None:
    names = [name + "-b", name + "-a", name + "-c"]
    blocker = sync_store.lock(name + "-c", ttl=10)
    blocker.acquire()
    multi = sync_store.multilock(names, ttl=10)
    assert not multi.acquire(timeout=0.3)
    for n in names[:2]:
        assert sync_store.inspect(n) is None  # nothing half-taken is left behind
    blocker.release()
    with multi:
        assert set(multi.fences) == set(names)
        assert multi.fence == max(f for f in multi.fences.values() if f is not None)
        for n in names:
            assert sync_store.inspect(n) is not None
    for n in names:
        assert sync_store.inspect(n) is None


def test_multilocks_in_opposite_orders_do_not_deadlock(sync_store: distlock.Store, name: str) -> None:
    a, b = name + "-a", name + "-b"

    def worker(names: list[str]) -> int:
        done = 0
        for _ in range(5):
            with sync_store.multilock(names, ttl=10, timeout=30):
                done += 1
        return done

    assert run_all(lambda: worker([a, b]), lambda: worker([b, a])) == [5, 5]


def test_inspect_list_and_break(sync_store: distlock.Store, name: str) -> None:
    lock = sync_store.lock(name + "/x", ttl=10)
    lock.acquire()
    info = sync_store.inspect(name + "/x")
    assert info is not None
    (holder,) = info.holders
    assert holder.fence == lock.fence
    assert holder.owner.count(":") >= 2  # host:pid:thread-or-task
    assert holder.ttl_left is None or 0 < holder.ttl_left <= 10
    listed = [i.name for i in sync_store.list(name)]
    assert listed == [name + "/x"]
    assert sync_store.break_lock(name + "/x")
    assert sync_store.inspect(name + "/x") is None
    assert not lock.owned()
    assert lock.lost.is_set()
    with pytest.raises(LockLost):
        lock.release()
    assert not sync_store.break_lock(name + "/x")


def test_client_name_is_stored_with_the_holding_for_every_reader(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    with distlock.connect(backend_url, client_name="web-1") as labelled:
        assert labelled.client_name == "web-1"
        with labelled.lock(name, ttl=10) as lock:
            info = sync_store.inspect(name)  # a store without a client name reads it from the server
            assert info is not None
            (holder,) = info.holders
            assert holder.fence == lock.fence and holder.client_name == "web-1"
            assert holder.owner.count(":") >= 2 and "@" not in holder.owner  # the owner id stays host:pid:thread
            assert info.to_json()["holders"][0]["client_name"] == "web-1"  # type: ignore[index]
            listed = [h.client_name for i in sync_store.list(name) for h in i.holders]
            assert listed == ["web-1"]
        if labelled.capabilities.elections:
            election = labelled.election(name + "-e", ttl=10)
            assert election.campaign("v1", timeout=30)
            leader = sync_store.leader(name + "-e")
            assert leader is not None and leader.value == "v1"
            # etcd and ZooKeeper elections keep only the value (Go's and Curator's layouts): no owner, no name
            assert leader.client_name == (None if leader.owner is None else "web-1")
            election.resign()
    with sync_store.lock(name, ttl=10):  # a store without one: none
        info = sync_store.inspect(name)
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
def test_bad_input_is_a_config_error_and_changes_nothing(
    sync_store: distlock.Store, name: str, bad: dict[str, object]
) -> None:
    args: dict[str, object] = {"name": name, "ttl": 10.0, "timeout": None, **bad}
    with pytest.raises(ConfigError) as err:
        sync_store.lock(**args)  # type: ignore[arg-type]
    assert "\n" not in str(err.value)
    assert sync_store.list(name) == []


def test_bad_permits_and_acquire_timeout(sync_store: distlock.Store, name: str) -> None:
    for permits in (0, -3):
        with pytest.raises(ConfigError):
            sync_store.semaphore(name, permits=permits)
    lock = sync_store.lock(name)
    with pytest.raises(ConfigError):
        lock.acquire(timeout=-1)
    assert sync_store.inspect(name) is None


def test_long_and_unicode_names_do_not_collide(sync_store: distlock.Store, name: str) -> None:
    long_a = name + "a" * 900 + "1"
    long_b = name + "a" * 900 + "2"
    la, lb = sync_store.lock(long_a, ttl=10), sync_store.lock(long_b, ttl=10)
    assert la.acquire(blocking=False)
    assert lb.acquire(blocking=False)  # mapped, never truncated into one key
    uni = sync_store.lock(name + "/ключ/鍵/🔒", ttl=10)
    assert uni.acquire(blocking=False)
    for lock in (la, lb, uni):
        lock.release()


def test_fair_option_is_checked_at_construction(sync_store: distlock.Store, name: str) -> None:
    caps = sync_store.capabilities
    if caps.fair or caps.always_fair:
        lock = sync_store.lock(name, fair=True)
        assert lock.acquire(timeout=5)
        lock.release()
    else:
        with pytest.raises(UnsupportedFeature):
            sync_store.lock(name, fair=True)


def test_synchronized_decorator_excludes_and_exposes_its_lock(
    sync_store: distlock.Store, name: str
) -> None:
    inside = 0
    peak = 0

    @sync_store.synchronized(name, ttl=10, timeout=30)
    def critical() -> int:
        nonlocal inside, peak
        inside += 1
        peak = max(peak, inside)
        sleep(0.01)
        inside -= 1
        return 7

    assert run_all(*[critical] * 4) == [7, 7, 7, 7]
    assert peak == 1
    assert not critical.lock.locked()  # type: ignore[attr-defined]
    with pytest.raises(ConfigError):
        sync_store.synchronized(name, kind="semaphore")


def _inspect_held(store: distlock.Store, name: str) -> distlock.LockInfo:
    """``inspect`` of a name this task holds. Redlock's may miss the holder while too few of the masters
    that hold it answer in time (a loaded machine): it is asked again, within a bound."""
    for _ in range(50):
        info = store.inspect(name)
        if info is not None:
            return info
        sleep(0.1)
    raise AssertionError(f"{name!r} is held but inspect() does not see it")


def test_synchronized_template_locks_the_name_of_each_call(sync_store: distlock.Store, name: str) -> None:
    inside: dict[str, int] = {}
    peak: dict[str, int] = {}
    seen: list[str] = []

    @sync_store.synchronized(name + "/order/{order_id}/{part}", ttl=10, timeout=30)
    def handle(order_id: int, part: str = "all") -> str:
        key = f"{order_id}/{part}"
        inside[key] = inside.get(key, 0) + 1
        peak[key] = max(peak.get(key, 0), inside[key])
        info = _inspect_held(sync_store, f"{name}/order/{key}")
        assert len(info.holders) == 1
        seen.extend(i.name for i in sync_store.list(name + "/order/"))
        sleep(0.01)
        inside[key] -= 1
        return key

    calls = [lambda: handle(1), lambda: handle(order_id=1), lambda: handle(2, part="x"), lambda: handle(2, "x")]
    assert run_all(*calls) == ["1/all", "1/all", "2/x", "2/x"]
    assert peak == {"1/all": 1, "2/x": 1}  # calls of one name exclude each other
    assert set(seen) <= {f"{name}/order/1/all", f"{name}/order/2/x"}
    assert handle.lock is None  # type: ignore[attr-defined]
    assert handle.lock_for(7).name == f"{name}/order/7/all"  # type: ignore[attr-defined]

    @sync_store.synchronized(name + "/r/{n}", kind="rlock", ttl=10)
    def countdown(n: int, depth: int = 0) -> int:  # re-enters its own name: one holding, counted
        return depth if depth == 2 else countdown(n, depth + 1)

    assert countdown(5) == 2
    assert sync_store.inspect(name + "/r/5") is None

    def f(order_id: int) -> None: ...

    with pytest.raises(ConfigError, match="'order' is not a parameter of"):
        sync_store.synchronized(name + "/{order}")(f)
    with pytest.raises(ConfigError, match="positional field"):
        sync_store.synchronized(name + "/{}")(f)



def test_max_hold_caps_a_holding_however_renewals_go_and_frees_it_for_the_next_owner(
    sync_store: distlock.Store, name: str
) -> None:
    with pytest.raises(ConfigError):
        sync_store.lock(name, max_hold=0)
    capped = sync_store.lock(name, ttl=10, max_hold=1.0)
    waiter = sync_store.lock(name, ttl=10)
    assert capped.acquire()
    # renewed every ttl/3 as always, but lost at the cap and released there: without the cap the waiter would
    # wait for ever, without the release for the 10 s TTL after the last renewal
    assert waiter.acquire(timeout=8)
    assert capped.lost.is_set()  # told before the next owner got it
    with pytest.raises(LockLost, match="max_hold"):
        capped.release()
    waiter.release()
    assert capped.hold_count == 0

# GENERATED from tests/_async/test_semaphore.py by scripts/gen_sync.py: edit that file, not this one.
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
from tests._sync.test_conformance import refuses_semaphores
from tests.concurrency_sync import run_all, sleep
from tests.latch_raw import left_of
from tests.test_processes import read_line, spawn


def test_semaphore_permits_are_taken_all_or_nothing_as_one_holding(
    sync_store: distlock.Store, name: str
) -> None:
    if refuses_semaphores(sync_store, name):
        return
    a = sync_store.semaphore(name, permits=3, ttl=10)
    b = sync_store.semaphore(name, permits=3, ttl=10)
    fences: list[int] = []
    looked: list[bool] = []  # the other owner has looked: the holder may release (no timing between the two)

    def until(flag: list[int] | list[bool]) -> None:
        end = monotonic() + 30
        while not flag and monotonic() < end:
            sleep(0.02)
        assert flag

    def holder() -> None:
        assert a.acquire(permits=2)
        assert a.hold_count == 2 and a.fence is not None
        fences.append(a.fence)
        until(looked)
        a.release()  # both permits go with one release

    def other() -> None:
        until(fences)
        assert not b.acquire(timeout=0.3, permits=2)  # one is free: nothing of it is taken
        info = sync_store.inspect(name)
        assert info is not None and info.kind == "semaphore"
        assert (info.permits, info.taken) == (3, 2)
        assert [h.permits for h in info.holders] == [2] and [h.fence for h in info.holders] == fences
        assert b.hold_count == 0
        assert b.acquire(blocking=False)  # the one free permit
        b.release()
        looked.append(True)
        assert b.acquire(timeout=30, permits=2)  # granted once the holder releases
        assert b.hold_count == 2 and b.fence is not None and b.fence > fences[0]
        b.release()

    run_all(holder, other)
    assert sync_store.inspect(name) is None


def test_semaphore_take_is_the_with_form_of_a_weighted_acquire(
    sync_store: distlock.Store, name: str
) -> None:
    if refuses_semaphores(sync_store, name):
        return
    sem = sync_store.semaphore(name, permits=3, ttl=10)
    with sem.take(2, timeout=5) as held:
        assert held is sem and sem.hold_count == 2 and isinstance(held.fence, int)
        with pytest.raises(AcquireTimeout):
            with sync_store.semaphore(name, permits=3).take(2, timeout=0.2):
                pytest.fail("granted beyond the capacity")
        with sem.take():  # one more holding of this owner: the last free permit
            assert sem.hold_count == 3
        assert sem.hold_count == 2
    assert sem.hold_count == 0 and sync_store.inspect(name) is None


def test_semaphore_a_big_request_is_not_starved_by_single_permits(
    sync_store: distlock.Store, name: str
) -> None:
    if refuses_semaphores(sync_store, name):
        return
    done = [False]
    granted: list[float] = []

    def small() -> None:
        sem = sync_store.semaphore(name, permits=3, ttl=10)
        while not done[0]:
            if sem.acquire(timeout=30):
                sleep(0.05)
                sem.release()

    def big() -> None:
        sleep(0.5)  # the small ones keep the semaphore busy by now
        sem = sync_store.semaphore(name, permits=3, ttl=10)
        began = monotonic()
        try:
            assert sem.acquire(timeout=60, permits=3)
            granted.append(monotonic() - began)
            info = sync_store.inspect(name)
            assert info is not None and info.taken == 3 and len(info.holders) == 1
            sem.release()
        finally:
            done[0] = True

    run_all(small, small, small, small, big)  # four on three permits: one always waits
    assert granted and granted[0] < 30.0


def test_semaphore_declared_size_mismatch_and_bad_permits_are_config_errors(
    sync_store: distlock.Store, name: str
) -> None:
    if refuses_semaphores(sync_store, name):
        return
    with pytest.raises(ConfigError, match="no stored capacity yet: pass permits=N"):
        sync_store.semaphore(name, permits=None).acquire(timeout=5)  # free: nothing to follow, no wait
    sem = sync_store.semaphore(name, permits=3, ttl=10)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError):
            sem.acquire(permits=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="could never be granted"):
        sem.acquire(permits=4)
    assert sem.acquire()
    with pytest.raises(ConfigError) as err:
        sync_store.semaphore(name, permits=4).acquire(timeout=5)
    assert "declared with permits=3" in str(err.value) and "\n" not in str(err.value)
    follower = sync_store.semaphore(name, permits=None, ttl=10)
    with pytest.raises(ConfigError, match="could never be granted"):
        follower.acquire(timeout=5, permits=4)
    info = sync_store.inspect(name)
    assert info is not None and info.taken == 1  # none of the refused ones took anything
    assert follower.acquire(timeout=5, permits=2)  # permits=None follows the stored capacity
    follower.release()
    sem.release()
    assert sync_store.inspect(name) is None


def test_semaphore_set_permits_resizes_for_everyone(sync_store: distlock.Store, name: str) -> None:
    if refuses_semaphores(sync_store, name):
        return
    sems = [sync_store.semaphore(name, permits=2, ttl=10) for _ in range(5)]
    assert not sems[0].set_permits(4)  # free: nothing stored, the next first user decides
    assert sems[0].acquire() and sems[1].acquire()
    assert not sems[2].acquire(blocking=False)

    def grow() -> None:
        sleep(0.3)
        assert sems[4].set_permits(4)

    def waiter() -> None:
        assert sems[2].acquire(timeout=30)  # woken by the resize, not only by a release
        sems[2].release()

    run_all(grow, waiter)
    # the first users' permits=2 still fits (declared, not in force), and two more are in
    assert sems[2].acquire(blocking=False) and sems[3].acquire(blocking=False)
    assert not sems[4].acquire(blocking=False)
    assert sems[4].set_permits(1)  # four held, capacity 1: nobody is revoked
    info = sync_store.inspect(name)
    assert info is not None and (info.permits, info.taken) == (1, 4)
    for sem in sems[:3]:
        sem.release()
    assert not sems[4].acquire(timeout=0.3)  # one still held: used 1 + 1 > 1
    sems[3].release()
    assert sems[4].acquire(timeout=10)
    sems[4].release()


def test_semaphore_leaves_nothing_on_the_server_once_nobody_uses_it(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    if refuses_semaphores(sync_store, name):
        return
    sem = sync_store.semaphore(name, permits=2, ttl=10)
    assert sem.acquire(permits=2)
    assert sem.set_permits(3)
    assert not sync_store.semaphore(name, permits=2).acquire(timeout=0.3, permits=2)  # a big one queued
    sem.release()
    after = [a for a in left_of(sync_store, backend_url, name) if "fence" not in a]  # counters of fences stay
    assert after == [], after
    # the next first user declares anew
    again = sync_store.semaphore(name, permits=5, ttl=10)
    assert again.acquire(permits=5)
    again.release()


def test_semaphore_a_killed_holder_frees_all_its_permits(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    if refuses_semaphores(sync_store, name):
        return
    if sync_store.scheme == "memory":
        pytest.skip("memory:// lives in one process")
    child = spawn("semaphore", backend_url, name, "3", "2", "2")
    try:
        fence = int(read_line(child, "ACQUIRED"))
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    sem = sync_store.semaphore(name, permits=3, ttl=10)
    assert sem.acquire(timeout=30, permits=3)  # its lease (2 s) or session ends: both permits come back
    assert sem.fence is not None and sem.fence > fence
    sem.release()

"""``lock.lost.is_set()`` is true to the lease clock: True as soon as the local lease end has passed, even when
the clock's worker has not run yet.

The worker that sets ``lost`` needs the GIL (a thread) or a turn of the event loop (a task). A thread that kept
the CPU, a process resumed after a pause, or a handler that blocked its event loop past the lease read False
there before -- for a GIL switch interval or a few loop turns after the lease was over, long enough to write as
a holder whose lock another process may already hold. Every backend whose locks have a lease (the session
backends' holdings end with their session, not with a lease of their own).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator

import pytest

import distlock
from distlock import LockLost, UnsupportedFeature

TTL = 1.0
PAST_THE_LEASE = 1.5 * TTL  # the local lease end is a little before TTL (the drift margin)


@pytest.fixture
def gil_kept() -> Iterator[None]:
    """While a test runs, this thread keeps the GIL unless it blocks: no other thread (the lease clock's, the
    renewer's) runs while it spins."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_thread_that_kept_the_cpu_past_the_lease_reads_lost(
    sync_store: distlock.Store, name: str, gil_kept: None
) -> None:
    if not sync_store.capabilities.needs_renewal:
        pytest.skip("a session, not a lease of its own, backs these holdings")
    lock = sync_store.lock(name, ttl=TTL)
    assert lock.acquire(timeout=10)
    lost = lock.lost
    _spin(PAST_THE_LEASE)  # neither the renewer nor the clock gets the GIL meanwhile
    seen = lost.is_set()
    sys.setswitchinterval(0.005)
    assert seen, "lost read False after the lease end"
    with pytest.raises(LockLost):
        lock.release()


async def test_a_handler_that_blocked_the_loop_past_the_lease_reads_lost(
    async_store: distlock.AsyncStore, name: str
) -> None:
    if not async_store.capabilities.needs_renewal:
        pytest.skip("a session, not a lease of its own, backs these holdings")
    lock = async_store.lock(name, ttl=TTL)
    assert await lock.acquire(timeout=10)
    time.sleep(PAST_THE_LEASE)  # a blocking call in a handler: no renewal, no clock task runs meanwhile
    assert lock.lost.is_set(), "lost read False after the lease end"
    with pytest.raises(LockLost):
        await lock.release()


def test_a_released_lock_is_not_read_as_lost_after_its_lease_end(sync_store: distlock.Store, name: str) -> None:
    lock = sync_store.lock(name, ttl=TTL)
    assert lock.acquire(timeout=10)
    lost = lock.lost
    lock.release()
    time.sleep(PAST_THE_LEASE)
    assert not lost.is_set() and not lock.lost.is_set()


def test_a_leader_that_kept_the_cpu_past_its_lease_reads_lost(
    sync_store: distlock.Store, name: str, gil_kept: None
) -> None:
    if not sync_store.capabilities.needs_renewal:
        pytest.skip("a session, not a lease of its own, backs these holdings")
    try:
        election = sync_store.election(name, ttl=TTL)
    except UnsupportedFeature:
        pytest.skip("no elections on this backend")
    assert election.campaign(value="a", timeout=10)
    lost = election.lost
    _spin(PAST_THE_LEASE)
    seen = lost.is_set()
    sys.setswitchinterval(0.005)
    assert seen, "an election's lost read False after the lease end"

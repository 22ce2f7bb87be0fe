# GENERATED from tests/_async/test_revoke.py by scripts/gen_sync.py: edit that file, not this one.
"""Revocation on every backend (async API; ``tests/_sync/`` is generated from this file): ``request_release``
asks the holder(s) of a name to let go, the holder hears of it through ``revoke_requested``, ``revoke_reason``
and ``on_revoke``, and the request goes with the holding.

Parametrized over the conformance table (tests/backends.py). A request reaches a holder pushed (ZooKeeper) or
with its next renewal (the others, every ttl/3): the bounds below are a generous multiple of that.
"""

from __future__ import annotations

from time import monotonic

import pytest

import distlock
from distlock import UnsupportedFeature
from tests.concurrency_sync import sleep

TTL = 1.5
#: docs/usage.md's bound is one renewal interval (ttl/3) or less; a busy 2-core machine gets several ttls
BOUND = 4 * TTL
#: a request that is there reaches its holder within one renewal interval (ttl/3): waiting a whole TTL (three
#: renewals) for one that must not come is enough to see it if it were there


def _asker(store: distlock.Store, backend_url: str) -> distlock.Store:
    """Another store on the same backend (a request comes from another process, as a rule); the memory
    backend lives in one store only."""
    if backend_url.startswith("memory"):
        return store
    return distlock.connect(backend_url)


def _close(asker: distlock.Store, store: distlock.Store) -> None:
    if asker is not store:
        asker.close()


def _wait(event: object, bound: float = BOUND) -> bool:
    end = monotonic() + bound
    while monotonic() < end:
        if event.is_set():  # type: ignore[attr-defined]
            return True
        sleep(0.02)
    return bool(event.is_set())  # type: ignore[attr-defined]


def test_revoke_the_holder_gets_the_request_and_its_reason_once(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    lock = sync_store.lock(name, ttl=TTL)
    told: list[str] = []
    lock.on_revoke(told.append)
    assert lock.acquire(timeout=10)
    assert not lock.revoke_requested.is_set() and lock.revoke_reason is None
    asker = _asker(sync_store, backend_url)
    try:
        assert asker.request_release(name, "nightly migration") is True
        assert _wait(lock.revoke_requested)
        assert lock.revoke_reason == "nightly migration"
        sleep(TTL)  # more renewals carry the same request back: it is told once
        assert told == ["nightly migration"]
        assert lock.owned()  # a request releases nothing
        lock.release()
        assert asker.request_release(name, "again") is False  # nobody holds it now
        assert sync_store.list(name) == []
    finally:
        _close(asker, sync_store)


def test_revoke_a_request_for_a_free_name_is_false_and_leaves_nothing(
    sync_store: distlock.Store, name: str
) -> None:
    assert sync_store.request_release(name, "anyone?") is False
    assert sync_store.inspect(name) is None
    assert sync_store.list(name) == []
    lock = sync_store.lock(name, ttl=TTL)
    assert lock.acquire(timeout=10)
    assert _wait(lock.revoke_requested, TTL) is False  # nothing was left for the next holder either
    lock.release()


def test_revoke_the_next_holder_does_not_see_the_previous_holder_s_request(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    first = sync_store.lock(name, ttl=TTL)
    assert first.acquire(timeout=10)
    asker = _asker(sync_store, backend_url)
    try:
        assert asker.request_release(name, "make room") is True
        assert _wait(first.revoke_requested)
        first.release()
        second = sync_store.lock(name, ttl=TTL)
        assert second.acquire(timeout=10)
        assert _wait(second.revoke_requested, TTL) is False
        assert second.revoke_reason is None
        # the same object, holding again: a new holding starts clear
        second.release()
        assert first.acquire(timeout=10)
        assert _wait(first.revoke_requested, TTL) is False
        first.release()
    finally:
        _close(asker, sync_store)


def test_revoke_every_holder_of_a_shared_lock_is_asked(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    try:
        a = sync_store.semaphore(name, permits=3, ttl=TTL)
        b = sync_store.semaphore(name, permits=3, ttl=TTL)
    except UnsupportedFeature:
        pytest.skip("no semaphores on this backend")
    try:
        assert a.acquire(timeout=10)
    except UnsupportedFeature:
        pytest.skip("no semaphores on this backend")
    assert b.acquire(timeout=10)
    asker = _asker(sync_store, backend_url)
    try:
        assert asker.request_release(name, "scale down") is True
        assert _wait(a.revoke_requested) and _wait(b.revoke_requested)
        assert a.revoke_reason == b.revoke_reason == "scale down"
        a.release()
        b.release()
        assert asker.request_release(name) is False
    finally:
        _close(asker, sync_store)


def test_revoke_an_election_leader_is_asked(sync_store: distlock.Store, backend_url: str, name: str) -> None:
    if not sync_store.capabilities.elections:
        pytest.skip("no elections on this backend")
    election = sync_store.election(name, ttl=TTL)
    told: list[str] = []
    election.on_revoke(told.append)
    assert election.campaign("v1", timeout=10)
    asker = _asker(sync_store, backend_url)
    try:
        election.proclaim("v2")  # the leader's own change of value is no request
        assert _wait(election.revoke_requested, TTL) is False
        assert asker.request_release(name, "hand over") is True
        assert _wait(election.revoke_requested)
        # a reason rides along where the backend's layout has room for it (not on a ZooKeeper LeaderLatch node)
        assert election.revoke_reason in ("hand over", "")
        leader = asker.leader(name)
        assert leader is not None and leader.value == "v2"  # the request left the value alone
        election.resign()
        assert asker.request_release(name) is False
        end = monotonic() + BOUND  # the callbacks run after the event is set, off the renewal's path
        while not told and monotonic() < end:
            sleep(0.02)
        assert len(told) == 1
    finally:
        _close(asker, sync_store)


def test_revoke_a_multilock_hears_a_request_to_any_of_its_names(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    multi = sync_store.multilock([name + "-a", name + "-b"], ttl=TTL)
    told: list[str] = []
    multi.on_revoke(told.append)
    assert multi.acquire(timeout=10)
    asker = _asker(sync_store, backend_url)
    try:
        assert not multi.revoke_requested.is_set() and multi.revoke_reason is None
        assert asker.request_release(name + "-b", "b please") is True
        end = monotonic() + BOUND
        while not multi.revoke_requested.is_set() and monotonic() < end:
            sleep(0.02)
        assert multi.revoke_reason == "b please"
        end = monotonic() + BOUND
        while not told and monotonic() < end:
            sleep(0.02)
        assert told == ["b please"]
        multi.release()
    finally:
        _close(asker, sync_store)


def test_revoke_a_holder_that_does_not_auto_renew_hears_at_its_extend(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    lock = sync_store.lock(name, ttl=30, auto_renew=False)
    assert lock.acquire(timeout=10)
    asker = _asker(sync_store, backend_url)
    try:
        assert asker.request_release(name, "extend me not") is True
        lock.extend()
        assert _wait(lock.revoke_requested)
        assert lock.revoke_reason == "extend me not"
        lock.release()
    finally:
        _close(asker, sync_store)

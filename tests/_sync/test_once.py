# GENERATED from tests/_async/test_once.py by scripts/gen_sync.py: edit that file, not this one.
"""At-most-once jobs (``store.once``, ``@store.at_most_once``) on every backend, on the async API;
``tests/_sync/`` is generated from this file.

Parametrized over the conformance table (tests/backends.py). ``at_least`` is short (0.5 s) and what it promises
is measured where it matters: the moment another try first runs the job again, which must never come before
the start plus ``at_least`` (and must come soon after, or the lock was not shortened at all).
"""

from __future__ import annotations

from time import monotonic

import pytest

import distlock
from distlock import ConfigError, LockLost, UnsupportedFeature
from distlock import _rt_sync as rt
from tests.concurrency_sync import sleep

AT_LEAST = 0.5


class Boom(Exception):
    pass


def _lease_slack(store: distlock.Store) -> float:
    """How late after start + at_least the name may come free: etcd leases are whole seconds (rounded up, and
    raised to the server's minimum) and expire on the leader's next check (every 0.5 s); elsewhere a loaded
    machine's poll."""
    return 3.0 if store.scheme.startswith("etcd") else 1.5


def _runs_again_at(store: distlock.Store, name: str, within: float = 10.0) -> float:
    """The moment (monotonic) a fresh try of ``name`` first runs the job, trying every 10 ms."""
    began = monotonic()
    while True:
        with store.once(name, at_most=10) as ran:
            if ran:
                return monotonic()
        assert monotonic() - began < within, f"{name!r} was not freed within {within}s"
        sleep(0.01)


def _wait_set(event: rt.Event, within: float) -> bool:
    deadline = monotonic() + within
    while not event.is_set() and monotonic() < deadline:
        sleep(0.01)
    return event.is_set()


def test_once_skips_when_held_keeps_the_name_until_at_least_even_after_an_error_and_at_least_0_frees_at_once(
    sync_store: distlock.Store, name: str
) -> None:
    began = monotonic()
    with pytest.raises(Boom):  # the job's error comes through, and at_least still applies (ShedLock's rule)
        with sync_store.once(name, at_most=10, at_least=AT_LEAST) as ran:
            assert ran and isinstance(ran.fence, int) and not ran.lost.is_set()
            info = sync_store.inspect(name)
            assert info is not None and [h.fence for h in info.holders] == [ran.fence]
            with sync_store.once(name, at_most=10) as other:  # held: skipped at once, never waits
                assert not other and other.fence is None
            raise Boom
    assert not ran.lost.is_set()
    freed = _runs_again_at(sync_store, name)
    assert freed - began >= AT_LEAST - 0.01  # never before start + at_least, on any backend
    assert freed - began <= AT_LEAST + _lease_slack(sync_store)  # and shortened: at_most was 10 s
    with sync_store.once(name, at_most=10, at_least=0) as first:
        assert first
    with sync_store.once(name, at_most=10) as second:  # at_least=0: released on exit
        assert second and second.fence is not None and first.fence is not None and second.fence > first.fence


def test_once_at_most_runs_out_while_the_job_runs(sync_store: distlock.Store, name: str) -> None:
    if not sync_store.capabilities.needs_renewal:
        pytest.skip("a ZooKeeper lock lives with its session: the session timeout, not at_most, frees it")
    with pytest.raises(LockLost):
        with sync_store.once(name, at_most=0.4) as ran:
            assert ran
            other = sync_store.lock(name, ttl=10)
            assert other.acquire(timeout=5)  # at_most, not renewed, freed the name under the running job
            assert _wait_set(ran.lost, 5)  # and the job was told
            other.release()


def test_once_never_shortens_another_owners_holding(sync_store: distlock.Store, name: str) -> None:
    theirs = sync_store.lock(name, ttl=10)
    with pytest.raises(LockLost):
        with sync_store.once(name, at_most=10, at_least=AT_LEAST) as ran:
            assert ran
            (holding,) = [h for h in sync_store._acquirer.holdings() if h.claim.name == name]
            assert sync_store.break_lock(name)  # lost, and taken by another owner
            assert theirs.acquire(timeout=5)
    # the backend's own step, given our stale claim: refused, and their lease is untouched
    try:
        assert not sync_store._backend.shorten(holding.claim, 0.05)
    except UnsupportedFeature:
        assert not sync_store.capabilities.needs_renewal or "mode=session" in repr(sync_store)
    sleep(0.1)
    assert theirs.owned()
    info = sync_store.inspect(name)
    assert info is not None and [h.fence for h in info.holders] == [theirs.fence]
    assert info.holders[0].ttl_left is None or info.holders[0].ttl_left > 5
    theirs.release()


def test_at_most_once_decorator_keep_alive_and_bad_arguments(name: str) -> None:
    store = distlock.connect("memory://")
    try:
        calls: list[int] = []

        @store.at_most_once(name, at_most=5, at_least=0.3)
        def job(x: int) -> int:
            calls.append(x)
            return x * 2

        assert job(21) == 42
        assert job(1) is None  # within at_least: skipped
        assert calls == [21]
        assert job.once.name == name  # type: ignore[attr-defined]

        # keep_alive: the lease (at_most) is renewed while the job runs
        with store.once(name + "-k", at_most=0.3, keep_alive=True) as ran:
            assert ran
            sleep(0.6)
            assert not ran.lost.is_set()

        for bad in (
            {"at_most": 5, "at_least": 6},
            {"at_most": 5, "at_least": -1},
            {"at_most": 5, "at_least": float("nan")},
            {"at_most": 0, "at_least": 0},
        ):
            with pytest.raises(ConfigError) as err:
                store.once(name, **bad)
            assert "\n" not in str(err.value)
        if rt.IS_ASYNC:

            def plain() -> None:
                return None

            with pytest.raises(ConfigError):
                store.at_most_once(name)(plain)
    finally:
        store.close()

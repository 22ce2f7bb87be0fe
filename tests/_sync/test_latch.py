# GENERATED from tests/_async/test_latch.py by scripts/gen_sync.py: edit that file, not this one.
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
from tests.concurrency_sync import run_all, sleep
from tests.latch_raw import left_of
from tests.test_processes import read_line, spawn


def test_latch_counts_down_from_many_owners_and_releases_every_waiter(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    other = distlock.connect(backend_url)
    try:
        latch = sync_store.latch(name, count=3)
        assert latch.count() == 3
        woke: list[float] = []

        def waiter(store: distlock.Store) -> None:
            assert store.latch(name).wait(timeout=30)
            woke.append(monotonic())

        def counters() -> None:
            sleep(0.5)  # the waiters wait by now
            assert other.latch(name, count=3).count_down() == 2
            assert sync_store.latch(name).count_down() == 1
            assert woke == []
            global_end[0] = monotonic()
            assert other.latch(name).count_down() == 0

        global_end = [0.0]
        run_all(lambda: waiter(sync_store), lambda: waiter(other), lambda: waiter(sync_store), counters)
        assert len(woke) == 3 and max(woke) - global_end[0] < 5.0  # woken at zero, not at their timeout
        assert latch.count() == 0 and latch.count_down() == 0  # never below 0
        assert other.latch(name).wait(timeout=0)  # a waiter that comes later returns at once
    finally:
        other.close()


def test_latch_wait_times_out_false_then_returns_true(sync_store: distlock.Store, name: str) -> None:
    latch = sync_store.latch(name, count=1)
    began = monotonic()
    assert not latch.wait(timeout=0.3)
    assert 0.25 <= monotonic() - began < 3.5  # max(T, 2 s) + 1 s at most
    assert not latch.wait(timeout=0)
    assert latch.count_down() == 0
    assert latch.wait(timeout=0.3)
    assert latch.wait()


def test_latch_count_never_goes_below_zero(sync_store: distlock.Store, name: str) -> None:
    latch = sync_store.latch(name, count=2)
    results = run_all(*[latch.count_down for _ in range(6)])
    assert sorted(results) == [0, 0, 0, 0, 0, 1]
    assert latch.count() == 0
    assert sync_store.latch(name).count() == 0


def test_latch_with_another_count_is_a_config_error(sync_store: distlock.Store, name: str) -> None:
    with pytest.raises(ConfigError):
        sync_store.latch(name, count=0)
    latch = sync_store.latch(name, count=3)
    assert latch.count_down() == 2
    with pytest.raises(ConfigError) as err:
        sync_store.latch(name, count=4).count()
    assert "count=3" in str(err.value) and "\n" not in str(err.value)
    joined = sync_store.latch(name)
    assert joined.count() == 2  # count=None joins whatever round exists
    assert sync_store.latch(name, count=3).count_down() == 1  # the same count joins too
    assert latch.count() == 1


def test_latch_a_creator_after_zero_sees_it_done_and_the_name_is_fresh_after_the_linger(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    latch = sync_store.latch(name, count=1, linger=1.0)
    assert latch.count_down() == 0
    late = sync_store.latch(name, count=1, linger=1.0)
    assert late.count() == 0 and late.wait(timeout=0)  # the marker: done, not a new round
    assert late.count_down() == 0
    sleep(1.5)
    fresh = sync_store.latch(name, count=2)
    assert fresh.count() == 2  # after the linger: a new round of the name
    assert latch.count() == 0 and latch.wait(timeout=0)  # the old object's round stays done
    assert fresh.count_down() == 1
    assert fresh.count_down() == 0


def test_latch_leaves_nothing_on_the_server_after_its_linger(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    latch = sync_store.latch(name, count=2, linger=0.5)
    assert left_of(sync_store, backend_url, name) == []  # made at the first call, not by the object
    assert latch.count() == 2
    assert left_of(sync_store, backend_url, name)  # the reader sees the live latch
    latch.count_down()
    latch.count_down()
    assert latch.wait(timeout=0)
    sleep(1.0)
    # the stores without server-side expiry remove the marker at their next latch call
    other = name[::-1]  # a name whose keys do not contain this one
    assert sync_store.latch(other, count=1, linger=0.5).count() == 1
    sync_store.latch(other, linger=0.5).count_down()
    assert latch.count() == 0
    deadline = monotonic() + 10
    while left_of(sync_store, backend_url, name) and monotonic() < deadline:
        sleep(0.2)
    assert left_of(sync_store, backend_url, name) == []


def test_latch_keeps_its_count_when_its_creator_is_killed(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    if sync_store.scheme == "memory":
        pytest.skip("memory:// lives in one process")
    child = spawn("latch", backend_url, name, "3")
    try:
        assert read_line(child, "COUNTED") == "2"
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)  # reaps it and closes its pipes
    sleep(0.5)
    latch = sync_store.latch(name, count=3)
    assert latch.count() == 2  # no lease on the count: the dead creator's round goes on
    assert not latch.wait(timeout=0.2)
    assert latch.count_down() == 1
    assert latch.count_down() == 0
    assert latch.wait(timeout=5)


def test_latch_counted_down_by_other_processes_releases_the_waiters(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    if sync_store.scheme == "memory":
        pytest.skip("memory:// lives in one process")
    latch = sync_store.latch(name, count=3)
    assert latch.count() == 3
    children = [spawn("latch", backend_url, name, "3") for _ in range(3)]
    try:
        counted = sorted(int(read_line(child, "COUNTED")) for child in children)
    finally:
        for child in children:
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=30)
    assert counted == [0, 1, 2]  # each process took one off, none twice, none below 0
    assert latch.wait(timeout=5) and sync_store.latch(name).wait(timeout=5)


def test_latch_a_waiter_is_woken_promptly_at_zero(sync_store: distlock.Store, name: str) -> None:
    latch = sync_store.latch(name, count=1)
    zero_at = [0.0]

    def waiter() -> float:
        assert sync_store.latch(name).wait(timeout=60)
        return monotonic()

    def counter() -> float:
        sleep(1.0)
        zero_at[0] = monotonic()
        assert latch.count_down() == 0
        return 0.0

    woke, _ = run_all(waiter, counter)
    assert woke - zero_at[0] < 5.0


def test_latch_a_count_down_sent_again_after_a_lost_reply_counts_once(
    sync_store: distlock.Store, name: str
) -> None:
    latch = sync_store.latch(name, count=3)
    assert latch.count() == 3
    backend = sync_store._backend
    round_id = latch._round
    assert round_id is not None
    # what a driver's resend of one count-down looks like to the server: the same step id twice
    assert backend.latch_count_down(name, round_id, "a" * 32, 60.0) == 2
    assert backend.latch_count_down(name, round_id, "a" * 32, 60.0) == 2
    assert backend.latch_count_down(name, round_id, "b" * 32, 60.0) == 1
    assert backend.latch_count_down(name, "another-round", "c" * 32, 60.0) == 0  # not its round
    assert latch.count() == 1

# GENERATED from tests/_async/test_barrier.py by scripts/gen_sync.py: edit that file, not this one.
"""Barriers and double barriers on every backend, on the async API; ``tests/_sync/`` is generated from this file.

Parametrized over the conformance table (tests/backends.py): rows without barriers refuse these tests by name
(``test_barrier``, ``test_double_barrier``). Timing bounds are generous: what is checked is that the waiters are
released together, within seconds of the last arrival rather than at their timeout.
"""

from __future__ import annotations

import signal
from time import monotonic

import pytest

import distlock
from distlock import ConfigError
from distlock._core import barrier as rules
from tests.concurrency_sync import run_all, sleep
from tests.latch_raw import left_of
from tests.test_processes import read_line, spawn


def _gone(store: distlock.Store, url: str, name: str) -> list[str]:
    """What is left of ``name`` on the server once it settles (a few seconds at most)."""
    deadline = monotonic() + 10
    while (left := left_of(store, url, name)) and monotonic() < deadline:
        sleep(0.2)
    return left


def test_barrier_releases_every_party_of_two_stores_together(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    other = distlock.connect(backend_url)
    try:
        woke: list[float] = []
        last = [0.0]

        def party(store: distlock.Store, delay: float) -> None:
            sleep(delay)
            if delay:
                last[0] = monotonic()
            assert store.barrier(name, 3).wait(timeout=30)
            woke.append(monotonic())

        run_all(lambda: party(sync_store, 0), lambda: party(other, 0.3), lambda: party(sync_store, 1.0))
        assert len(woke) == 3 and min(woke) >= last[0] and max(woke) - last[0] < 5.0
        assert _gone(sync_store, backend_url, name) == []  # every member saw the trip: nothing stays
        # the name is reusable at once: the next generation trips on its own arrivals
        results = run_all(
            lambda: other.barrier(name, 2).wait(timeout=30), lambda: sync_store.barrier(name, 2).wait(timeout=30)
        )
        assert results == [True, True]
    finally:
        other.close()


def test_barrier_wait_times_out_false_withdrawn_then_the_next_generation_trips(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    began = monotonic()
    assert not sync_store.barrier(name, 2).wait(timeout=0.5)
    assert 0.45 <= monotonic() - began < 3.5  # max(T, 2 s) + 1 s at most
    assert left_of(sync_store, backend_url, name) == []  # the arrival was withdrawn: nothing left
    # the timed-out arrival does not count: one more arrival alone does not trip it
    assert not sync_store.barrier(name, 2).wait(timeout=0.3)
    results = run_all(
        lambda: sync_store.barrier(name, 2).wait(timeout=30), lambda: sync_store.barrier(name, 2).wait(timeout=30)
    )
    assert results == [True, True]
    assert _gone(sync_store, backend_url, name) == []


def test_barrier_a_killed_participant_does_not_count(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    if sync_store.scheme == "memory":
        pytest.skip("memory:// lives in one process")
    child = spawn("barrier", backend_url, name, "2", "1.5")
    try:
        read_line(child, "ARRIVING")
        deadline = monotonic() + 10
        while not left_of(sync_store, backend_url, name) and monotonic() < deadline:
            sleep(0.1)
        assert left_of(sync_store, backend_url, name)  # the child's arrival is on the server
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=30)
    sleep(2.5)  # its lease (1.5 s) ran out with no renewal
    assert not sync_store.barrier(name, 2, ttl=1.5).wait(timeout=0.5)  # alone: the dead one is not a party
    results = run_all(
        lambda: sync_store.barrier(name, 2, ttl=1.5).wait(timeout=30),
        lambda: sync_store.barrier(name, 2, ttl=1.5).wait(timeout=30),
    )
    assert results == [True, True]
    assert _gone(sync_store, backend_url, name) == []


def test_barrier_a_slow_member_is_released_and_a_newcomer_waits_for_its_own_generation(
    sync_store: distlock.Store, name: str
) -> None:
    backend = sync_store._backend

    def step(kind: str, member: str, gen: str = "") -> rules.Reply:
        return backend.barrier_step(
            "barrier", name, rules.Op(kind, member, gen, 2, 10.0, 60.0, True, member + "-next")
        )

    a = step(rules.ARRIVE, "a")
    b = step(rules.ARRIVE, "b")
    assert a.outcome == rules.WAITING and b.outcome == rules.TRIPPED and b.gen == a.gen
    c = step(rules.ARRIVE, "c")  # after the trip, before "a" looked: the next generation
    assert c.outcome == rules.WAITING and c.gen != a.gen
    assert (step(rules.LOOK, "a", a.gen)).outcome == rules.TRIPPED  # "a" is released all the same
    assert (step(rules.LOOK, "c", c.gen)).outcome == rules.WAITING  # "c" is not
    assert (step(rules.WITHDRAW, "c", c.gen)).outcome == rules.WITHDRAWN
    assert (step(rules.LOOK, "b", b.gen)).outcome == rules.TRIPPED


def test_double_barrier_enter_waits_for_all_and_leave_for_all_to_leave(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    other = distlock.connect(backend_url)
    try:
        events: list[tuple[str, str, float]] = []

        def member(store: distlock.Store, who: str, enter_after: float, leave_after: float) -> None:
            b = store.double_barrier(name, 2)
            sleep(enter_after)
            events.append(("enter", who, monotonic()))
            assert b.enter(timeout=30)
            events.append(("entered", who, monotonic()))
            sleep(leave_after)
            events.append(("leave", who, monotonic()))
            assert b.leave(timeout=30)
            events.append(("left", who, monotonic()))

        run_all(lambda: member(sync_store, "a", 0, 0), lambda: member(other, "b", 0.8, 1.0))
        at = {(kind, who): t for kind, who, t in events}
        assert at["entered", "a"] >= at["enter", "b"]  # a entered only once b came
        assert at["left", "a"] >= at["leave", "b"]  # a's leave waited for b's
        assert _gone(sync_store, backend_url, name) == []
    finally:
        other.close()


def test_double_barrier_enter_times_out_false_and_leaves_nothing(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    b = sync_store.double_barrier(name, 2)
    began = monotonic()
    assert not b.enter(timeout=0.5)
    assert 0.45 <= monotonic() - began < 3.5
    assert left_of(sync_store, backend_url, name) == []
    with pytest.raises(ConfigError):
        b.leave(timeout=1)  # not entered
    with pytest.raises(ConfigError):
        sync_store.barrier(name, 0)

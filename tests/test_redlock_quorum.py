"""Redlock on five real masters: minority failures, majority failures, wiped masters and fences, slow masters,
split votes, push wake-ups. Each test gets its own five redis-server processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

import distlock
from distlock import ConfigError, QuorumError, UnsupportedFeature
from tools.servers.proc import ServerProc
from tools.servers.redis import redis_masters, redlock_url, restart


@pytest.fixture
def masters() -> Iterator[list[ServerProc]]:
    with redis_masters(5) as servers:
        yield servers


def raw(srv: ServerProc) -> redis.Redis:
    return redis.Redis.from_url(srv.url, socket_timeout=5)


def keys_left(servers: list[ServerProc], name: str) -> list[str]:
    """Lock state (holder key, readers, details, queue) left on the live masters; fence counters excluded."""
    found = []
    for s in servers:
        if not s.alive():
            continue
        r = raw(s)
        for key in (name, "{" + name + "}:r", "{" + name + "}:i", "{" + name + "}:q"):
            if r.exists(key):
                found.append(f"{s.name}:{key}")
        r.close()
    return found


def test_two_of_five_down_still_works(masters: list[ServerProc], name: str) -> None:
    with distlock.connect(redlock_url(masters)) as store:
        lock = store.lock(name, ttl=10)
        assert lock.acquire()
        first = lock.fence
        lock.release()
        masters[0].kill()
        masters[3].kill()
        assert lock.acquire(timeout=5)
        assert lock.fence is not None and first is not None and lock.fence > first
        assert not store.lock(name).acquire(blocking=False)
        assert lock.owned()
        lock.release()


def test_three_of_five_down_is_a_quorum_error_and_leaves_nothing(masters: list[ServerProc], name: str) -> None:
    with distlock.connect(redlock_url(masters)) as store:
        for s in masters[:3]:
            s.kill()
        lock = store.lock(name, ttl=10)
        started = time.monotonic()
        with pytest.raises(QuorumError):
            lock.acquire(timeout=5)
        assert time.monotonic() - started < 5
        assert keys_left(masters, name) == []  # nothing left behind on the two live masters


def test_quorum_error_when_majority_unreachable_at_connect(masters: list[ServerProc]) -> None:
    for s in masters[:3]:
        s.kill()
    with pytest.raises(QuorumError):
        distlock.connect(redlock_url(masters, "connect_timeout=0.5"))


def test_held_lock_survives_a_minority_failure_and_is_lost_on_a_majority(masters: list[ServerProc], name: str) -> None:
    with distlock.connect(redlock_url(masters)) as store:
        lock = store.lock(name, ttl=1.5)
        assert lock.acquire()
        masters[1].kill()
        masters[2].kill()
        time.sleep(2.0)  # renewals continue on the three that are left
        assert not lock.lost.is_set()
        assert lock.owned()
        masters[4].kill()
        assert lock.lost.wait(10)


def test_wiped_masters_come_back_and_fences_still_increase(masters: list[ServerProc], name: str) -> None:
    with distlock.connect(redlock_url(masters)) as store:
        lock = store.lock(name, ttl=10)
        fences = []
        for _ in range(3):
            assert lock.acquire()
            fences.append(lock.fence)
            lock.release()
        # two masters lose everything (kill -9, restart empty on the same port)
        restart(masters[0])
        restart(masters[1])
        for _ in range(3):
            assert lock.acquire(timeout=5)
            fences.append(lock.fence)
            lock.release()
        assert all(isinstance(f, int) for f in fences)
        assert fences == sorted(fences) and len(set(fences)) == len(fences), fences
        for s in masters[:2]:  # the restarted masters were re-seeded under their new run id
            r = raw(s)
            assert r.hget("distlock:fences", "e") == str(r.info("server")["run_id"]).encode()
            r.close()


def test_fences_increase_when_master_counters_are_out_of_step(masters: list[ServerProc], name: str) -> None:
    """One master's counter far ahead (a replaced master, or one that was written alone): the holder takes
    the majority's maximum and writes it back, so a later majority WITHOUT that master still counts above."""
    r0 = raw(masters[0])
    r0.set("{" + name + "}:fence", 1000)
    r0.close()
    with distlock.connect(redlock_url(masters)) as store:
        lock = store.lock(name, ttl=10)
        assert lock.acquire()
        first = lock.fence
        assert first is not None and first > 1000
        lock.release()
        masters[0].kill()  # the master that was ahead is gone
        assert lock.acquire(timeout=5)
        assert lock.fence is not None and lock.fence > first
        info = store.inspect(name)
        assert info is not None and info.holders[0].fence == lock.fence
        lock.release()


def test_slow_master_is_a_failed_vote_not_an_abort(masters: list[ServerProc], name: str) -> None:
    """A master that does not answer (SIGSTOP) costs at most the per-node timeout, far below the TTL."""
    url = redlock_url(masters, "node_timeout=0.2")
    with distlock.connect(url) as store:
        with store.lock(name, ttl=10):  # the first acquire on new masters seeds their fence counters (needs all)
            pass
        masters[2].pause()
        masters[4].pause()
        try:
            lock = store.lock(name, ttl=10)
            started = time.monotonic()
            assert lock.acquire(timeout=5)
            assert time.monotonic() - started < 3
            lock.release()
        finally:
            masters[2].resume()
            masters[4].resume()


def test_split_vote_releases_partial_holds(masters: list[ServerProc], name: str) -> None:
    """Foreign holders on two masters, we win three: granted. Foreign on three: refused, and nothing of
    ours stays on the two masters that said yes."""
    for s in masters[:2]:
        r = raw(s)
        r.set(name, "someone-else", px=30000)
        r.close()
    with distlock.connect(redlock_url(masters)) as store:
        lock = store.lock(name, ttl=10)
        assert lock.acquire(blocking=False)
        lock.release()
        r = raw(masters[2])
        r.set(name, "someone-else", px=30000)
        r.close()
        assert not lock.acquire(timeout=0.3)
        for s in masters[3:]:
            r = raw(s)
            assert r.get(name) is None
            r.close()


def test_a_won_round_leaves_the_queues_of_the_masters_that_refused(masters: list[ServerProc], name: str) -> None:
    """A try refused on two masters queues the claim there. Winning the three others must take those entries
    back: a release on a master wakes only the head of its queue, and a stale head (a claim that already
    holds the lock) swallowed every wake-up until its deadline, so the real waiters slept out their wait
    slice (hand-over gaps of exactly 2 s, and starvation, under contention)."""
    foreign = [distlock.connect(s.url) for s in masters[:2]]  # single-node stores on two of the masters
    try:
        held = [f.lock(name, ttl=30) for f in foreign]
        assert all(h.acquire(blocking=False) for h in held)
        with distlock.connect(redlock_url(masters)) as store:
            lock = store.lock(name, ttl=10)
            assert lock.acquire(blocking=False)  # three of five: granted
            for s in masters[:2]:
                r = raw(s)
                assert r.zcard("{" + name + "}:q") == 0, f"{s.name} still queues the claim that holds the lock"
                r.close()
            waiter = store.lock(name, ttl=10)
            woken = threading.Event()

            def wait_for_it() -> None:
                assert waiter.acquire(timeout=30)
                woken.set()
                waiter.release()

            t = threading.Thread(target=wait_for_it)
            t.start()
            time.sleep(0.3)  # the waiter is queued on every master now
            lock.release()
            for h in held:  # the two foreign holders go too: every master's release now wakes the waiter
                h.release()
            assert woken.wait(1.5), "the release's wake-up reached a stale queue head, not the waiter"
            t.join(5)
    finally:
        for f in foreign:
            f.close()


def test_waiter_is_pushed_on_release(masters: list[ServerProc], name: str) -> None:
    with distlock.connect(redlock_url(masters)) as store:
        holder = store.lock(name, ttl=30)
        assert holder.acquire()
        got: list[float] = []

        def waiter() -> None:
            lock = store.lock(name, ttl=30)
            assert lock.acquire(timeout=30)
            got.append(time.monotonic())
            lock.release()

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.5)
        released = time.monotonic()
        holder.release()
        t.join(30)
        assert got and got[0] - released < 5  # woken, not waiting out the 30 s lease


def test_capabilities_refuse_semaphores_and_fairness(masters: list[ServerProc], name: str) -> None:
    with distlock.connect(redlock_url(masters)) as store:
        with pytest.raises(UnsupportedFeature):
            store.semaphore(name, permits=2)
        with pytest.raises(UnsupportedFeature):
            store.lock(name, fair=True)
        rw = store.rwlock(name, ttl=10)
        assert rw.read.acquire()
        assert not store.rwlock(name).write.acquire(blocking=False)
        rw.read.release()


def test_even_number_of_masters_is_a_config_error(masters: list[ServerProc]) -> None:
    with pytest.raises(ConfigError):
        distlock.connect(redlock_url(masters[:4]))


# -- the fence rule alone (pure: no servers) ---------------------------------------------------------------
def test_fence_rule_seeds_a_new_fleet_and_hands_out_the_next_fence() -> None:
    from distlock._backends.redis._async.fences import Vote, plan

    votes = [Vote(True, -1, None, False, c) for c in (0, 3, 1)]
    p = plan(votes, 2)
    assert (p.fence, p.floor, p.todo, p.at) == (4, 4, [0, 1, 2], set())


def test_fence_rule_writes_the_largest_seeded_fence_back_and_reseeds_a_wiped_master() -> None:
    from distlock._backends.redis._async.fences import Vote, plan

    votes = [Vote(True, 7, None, True, 7), Vote(True, 5, None, True, 5), Vote(True, -1, None, False, 0)]
    p = plan(votes, 2)
    assert (p.fence, p.floor, p.todo, p.at) == (7, 7, [1, 2], {0})


def test_fence_rule_seeds_from_the_clock_when_too_few_answering_masters_are_seeded() -> None:
    """A majority answered but only one of them kept its counter (the other lost it: its counter part is its
    clock in microseconds): the round is not refused (locking would stop until every master answers); the
    fence is above both, written back to both."""
    from distlock._backends.redis._async.fences import Vote, plan

    clock = 1_780_000_000_000_000
    p = plan([Vote(True, 3, None, True, 3), None, Vote(True, -1, None, False, clock)], 2)
    assert (p.fence, p.floor, p.todo, p.at) == (clock + 1, clock + 1, [0, 2], set())
    lost = plan([Vote(False, -1, 0.1, True, 3), None, Vote(False, -1, 0.1, False, clock)], 2)
    assert lost.fence is None and lost.todo == [2] and lost.floor == clock + 1  # nothing won: re-seed only
    alone = plan([Vote(True, 3, None, True, 3), None, None], 2)
    assert alone.fence is None and alone.todo == []  # one master answered: nothing to hand out


def test_fence_rule_reseeds_a_wiped_master_after_a_lost_round() -> None:
    from distlock._backends.redis._async.fences import Vote, plan

    votes = [Vote(False, -1, 0.2, True, 9), Vote(True, 8, None, True, 8), Vote(False, -1, 0.2, False, 0)]
    p = plan(votes, 2)
    assert (p.fence, p.floor, p.todo) == (None, 9, [2])


def test_inspect_says_it_cannot_tell_when_the_silent_masters_may_hold_the_majority(
    masters: list[ServerProc], name: str
) -> None:
    with distlock.connect(redlock_url(masters)) as store:
        lock = store.lock(name, ttl=30)
        assert lock.acquire()
        for s in masters[:2]:  # the holding now lives on masters 2, 3, 4 only: still a majority
            r = raw(s)
            r.delete(name, "{" + name + "}:i")
            r.close()
        assert store.inspect(name) is not None  # every master answers: 3 of 5 list it
        masters[2].kill()
        masters[3].kill()
        # 0, 1 and 4 answer, and only 4 lists the holder: with 2 and 3 it may still hold a majority
        with pytest.raises(QuorumError, match="cannot tell"):
            store.inspect(name)

"""Elections on Redis and Redlock beyond the conformance table: a leader killed with SIGKILL, observers woken by
the election NOTICE (push, not polling), the listener's routing of that NOTICE, and Redlock's proclaim under
master failures (majority of rewrites, QuorumError, a majority that no longer holds)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import distlock
from distlock import QuorumError
from distlock._backends.redis import keys as rk
from distlock._backends.redis._sync.listener import Listener
from distlock._backends.redis._sync.watch import RedisWatch
from distlock._core import ids
from distlock._core.types import Claim, Mode
from tools.servers import redis as redis_srv
from tools.servers.proc import ServerProc

ROOT = Path(__file__).resolve().parent.parent

#: a candidate in a child process: leads, says so, then sleeps until it is killed
CHILD = """
import sys, time, distlock
url, name, ttl = sys.argv[1], sys.argv[2], float(sys.argv[3])
with distlock.connect(url) as store:
    el = store.election(name, ttl=ttl)
    assert el.campaign("child", timeout=30)
    print("LEADER", el.term, flush=True)
    time.sleep(600)
"""


def test_a_killed_leader_is_followed_within_its_ttl_with_a_higher_term(redis_url: str, name: str) -> None:
    ttl = 2.0
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, redis_url, name, str(ttl)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.startswith("LEADER"), child.stderr.read() if child.stderr else ""
        child_term = int(line.split()[1])
        with distlock.connect(redis_url) as store:
            info = store.leader(name)
            assert info is not None and (info.value, info.term) == ("child", child_term)
            el = store.election(name, ttl=10)
            assert not el.campaign("parent", timeout=0.2)  # the child leads
            child.kill()
            child.wait(10)
            killed = time.monotonic()
            assert el.campaign("parent", timeout=ttl + 5)
            took = time.monotonic() - killed
            assert took <= ttl + 1.0, f"led {took:.2f}s after the kill (ttl {ttl}s)"
            assert el.term is not None and el.term > child_term
            info = store.leader(name)
            assert info is not None and (info.value, info.term) == ("parent", el.term)
            el.resign()
    finally:
        child.kill()
        child.communicate()


def _proclaim_later(el: distlock.Election, value: str, delay: float, at: list[float]) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        at.append(time.monotonic())
        el.proclaim(value)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_an_observer_is_woken_by_the_proclaim_itself(redis_url: str, name: str) -> None:
    with distlock.connect(redis_url) as store:
        watch = store._acquirer.backend.watch(name)
        assert isinstance(watch, RedisWatch) and watch.armed()
        try:
            el = store.election(name, ttl=10)
            assert el.campaign("a", timeout=5)
            watch.wait(2.0)
            assert watch.pushed  # the grant's NOTICE
            at: list[float] = []
            t = _proclaim_later(el, "b", 0.3, at)
            watch.wait(5.0)
            woke = time.monotonic()
            t.join()
            # a message, not the end of a slice (1 s) or a poll (0.25 s): it came with the proclaim
            assert watch.pushed and woke - at[0] < 0.2
            info = store.leader(name)
            assert info is not None and info.value == "b"
            el.resign()
            watch.wait(2.0)
            assert watch.pushed  # the release's NOTICE (nobody waits, so no waiter token was published)
        finally:
            watch.close()


def test_observe_sees_a_proclaim_well_within_a_poll(redis_url: str, name: str) -> None:
    with distlock.connect(redis_url) as store:
        el = store.election(name, ttl=10)
        assert el.campaign("a", timeout=5)
        at: list[float] = []
        seen: list[tuple[str | None, float]] = []
        t = _proclaim_later(el, "b", 0.5, at)
        for info in store.observe(name, timeout=3.0):
            seen.append((None if info is None else info.value, time.monotonic()))
            if info is not None and info.value == "b":
                break
        t.join()
        assert [v for v, _ in seen] == ["a", "b"]
        assert seen[1][1] - at[0] < 0.2
        el.resign()


def test_a_notice_wakes_observers_only_and_a_token_its_waiter_and_the_observers() -> None:
    listener = Listener(redis.Redis())  # routing only: no connection is made
    channel = rk.channel("n")
    calls: list[str] = []
    listener.add(channel, "tok1", lambda: calls.append("waiter1"))
    listener.add(channel, "tok2", lambda: calls.append("waiter2"))
    listener.add(channel, "observer-x", lambda: calls.append("observer"), observer=True)

    def publish(data: str) -> list[str]:
        calls.clear()
        listener._dispatch({"type": "message", "channel": channel.encode(), "data": data.encode()})
        return sorted(calls)

    assert publish(rk.NOTICE) == ["observer"]
    assert publish("tok1") == ["observer", "waiter1"]
    assert publish("*") == ["observer", "waiter1", "waiter2"]
    assert publish("observer-x") == ["observer"]  # an observer's key is no waiter's token
    assert publish("someone-else") == ["observer"]


# -- Redlock: the backend's calls on a candidate's claim (the majority rule of proclaim) ---------------------
@pytest.fixture
def masters() -> Iterator[list[ServerProc]]:
    with redis_srv.redis_masters(5) as servers:
        yield servers


def _claim(name: str, value: str) -> Claim:
    return Claim(name, Mode.EXCLUSIVE, ids.new_token(), ids.owner_id("test"), ttl=10, fair=True, value=value)


def test_redlock_proclaim_needs_a_majority_of_rewrites(masters: list[ServerProc], name: str) -> None:
    with distlock.connect(redis_srv.redlock_url(masters, "connect_timeout=0.5")) as store:
        backend = store._acquirer.backend
        claim = _claim(name, "v1")
        grant = backend.attempt(claim).try_acquire()
        assert grant.acquired
        info = store.leader(name)
        assert info is not None and (info.value, info.term) == ("v1", grant.fence)
        watch = backend.watch(name)
        try:
            assert backend.proclaim(claim, "v2")
            watch.wait(2.0)
            assert watch.pushed
            masters[0].kill()
            masters[1].kill()
            assert backend.proclaim(claim, "v3")  # three of five still rewrite it
            info = store.leader(name)
            assert info is not None and (info.value, info.term) == ("v3", grant.fence)
            # two of the three live masters now have another holder: one rewrite is no majority
            for s in masters[2:4]:
                r = redis.Redis.from_url(s.url)
                r.set(name, "someone-else", px=10_000)
                r.close()
            assert not backend.proclaim(claim, "v4")
            masters[2].kill()
            with pytest.raises(QuorumError):  # two answers of five: nobody can tell
                backend.proclaim(claim, "v5")
        finally:
            watch.close()


def test_redlock_observer_is_woken_by_a_proclaim(redlock_url: str, name: str) -> None:
    with distlock.connect(redlock_url) as store:
        backend = store._acquirer.backend
        watch = backend.watch(name)
        assert isinstance(watch, RedisWatch) and watch.armed()
        claim = _claim(name, "a")
        try:
            assert backend.attempt(claim).try_acquire().acquired
            watch.wait(2.0)
            assert watch.pushed
            while watch.pushed:  # one NOTICE per master: take them all
                watch.wait(0.1)
            started = time.monotonic()
            assert backend.proclaim(claim, "b")
            watch.wait(5.0)
            assert watch.pushed and time.monotonic() - started < 0.2
            assert backend.release(claim)
        finally:
            watch.close()

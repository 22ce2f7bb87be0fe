"""ZooKeeper on gray links (silent, half-open or slow): every member of the 3-node ensemble behind its own FaultProxy, frozen
for a full partition of one client (kazoo would otherwise move to another member).

* a holder that keeps sending requests into a frozen link is told ``lost`` before another client is
  granted the lock (kazoo counts every request it sends as a heartbeat and never goes SUSPENDED);
* ``acquire(timeout=...)`` on a frozen link comes back within the documented bound (sync and asyncio);
* ``lost_on=suspended`` (Curator's standard policy) reports loss as soon as kazoo suspends the connection;
* churn over fresh names leaves nothing once the container reaper ran; fences of a reused name go up.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import distlock
from distlock._backends.zookeeper import layout
from distlock.checker.proxy import FaultProxy
from tools.servers.zookeeper import ZkEnsemble, available

pytestmark = pytest.mark.skipif(not available(), reason="ZooKeeper is not installed")

SESSION = 4.0  # seconds; operation_timeout defaults to half of it (2 s), the clean-up budget to 2 s


@pytest.fixture
def proxies(zookeeper_ensemble_3: ZkEnsemble) -> Iterator[list[FaultProxy]]:
    ps = [FaultProxy(n.host, n.client_port).start() for n in zookeeper_ensemble_3.nodes]
    try:
        yield ps
    finally:
        for p in ps:
            p.heal()
            p.close()


def proxied_url(proxies: list[FaultProxy], **options: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"session_timeout": SESSION, **options}.items())
    return "zookeeper://" + ",".join(f"127.0.0.1:{p.port}" for p in proxies) + "?" + query


@pytest.fixture
def name() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


def freeze(proxies: list[FaultProxy]) -> None:
    for p in proxies:
        p.freeze()


def heal(proxies: list[FaultProxy]) -> None:
    for p in proxies:
        p.heal()


def stamp_when(event: Any, out: dict[str, float], key: str, timeout: float) -> threading.Thread:
    def run() -> None:
        if event.wait(timeout):
            out[key] = time.monotonic()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def keep_sending(store: distlock.Store, stop: threading.Event) -> threading.Thread:
    """Issue a request every 0.3 s through ``store`` (each in its own thread: a request into a frozen link
    blocks for operation_timeout): what a busy process does, and what keeps kazoo from suspending."""

    def one() -> None:
        try:
            store.inspect(f"busy-{uuid.uuid4().hex[:6]}")
        except distlock.LockError:
            pass

    def run() -> None:
        while not stop.wait(0.3):
            threading.Thread(target=one, daemon=True).start()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_frozen_link_while_sending_is_lost_before_another_client_is_granted(
    proxies: list[FaultProxy], zookeeper_url: str, name: str
) -> None:
    """The holder keeps sending into a silent partition; ``lost`` must fire before the
    server expires its session and hands the lock to the next client."""
    stamps: dict[str, float] = {}
    stop = threading.Event()
    with distlock.connect(proxied_url(proxies)) as holder_store, distlock.connect(zookeeper_url) as other_store:
        held = holder_store.lock(name)
        assert held.acquire(timeout=10)
        stamp_when(held.lost, stamps, "lost", 30)
        waiter = other_store.lock(name)
        granted = threading.Event()

        def wait_for_it() -> None:
            if waiter.acquire(timeout=30):
                stamps["granted"] = time.monotonic()
                granted.set()
                waiter.release()

        freeze(proxies)
        stamps["frozen"] = time.monotonic()
        sender = keep_sending(holder_store, stop)
        other = threading.Thread(target=wait_for_it, daemon=True)
        other.start()
        try:
            assert granted.wait(30), "the server never expired the holder's session"
            time.sleep(0.2)
        finally:
            stop.set()
            sender.join()
            heal(proxies)
        other.join(5)
        after = stamps["granted"] - stamps["frozen"]
        assert "lost" in stamps, f"lost never fired; the other client was granted {after:.1f}s after the freeze"
        told_late = stamps["lost"] - stamps["granted"]
        assert told_late < 0, f"lost fired {told_late:.2f}s after the other client was granted"
        # and no earlier than the session allows: a third of it at least (no false alarms on a healthy link)
        assert stamps["lost"] - stamps["frozen"] > SESSION / 3


def test_acquire_with_timeout_on_a_frozen_link_returns_within_the_bound(
    proxies: list[FaultProxy], zookeeper_url: str, name: str
) -> None:
    """acquire(timeout=2) comes back within 2 s + operation_timeout + the clean-up budget (docs/zookeeper.md),
    whether the link froze while it waited (the wait learned the deadline) or before its first try."""
    bound = 2.0 + SESSION / 2 + 2.0 + 1.0  # + 1 s of slack for a loaded machine
    direct = zookeeper_url.replace(f"session_timeout={SESSION:g}", "session_timeout=30")
    with distlock.connect(direct) as other_store, distlock.connect(proxied_url(proxies)) as store:
        blocker = other_store.lock(name)
        assert blocker.acquire(timeout=10)
        # the link freezes while the acquire waits in the queue
        lock = store.lock(name)
        threading.Timer(0.5, freeze, (proxies,)).start()
        started = time.monotonic()
        assert lock.acquire(timeout=2) is False
        assert time.monotonic() - started < bound
        # frozen before the first try: the first request waits operation_timeout at most
        started = time.monotonic()
        try:
            assert store.lock(name + "-2").acquire(timeout=2) is False
        except distlock.BackendError:
            pass
        took = time.monotonic() - started
        heal(proxies)
        assert took < bound, f"acquire(timeout=2) took {took:.1f}s on a frozen link"
        blocker.release()
        # the clean-up deferred on the frozen link is done once the server answers again: nothing stalls
        assert lock.acquire(timeout=10)
        lock.release()


def test_asyncio_timeout_on_a_frozen_link_returns_within_the_bound(
    proxies: list[FaultProxy], zookeeper_url: str, name: str
) -> None:
    async def main() -> float:
        async with await distlock.connect_async(proxied_url(proxies)) as store:
            freeze(proxies)
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(2):
                    await store.lock(name).acquire()
            took = time.monotonic() - started
            heal(proxies)
            return took

    took = asyncio.run(main())
    # cancelled at 2 s; the step stops within ABORT_SLICE; the clean-up has 2 s
    assert took < 2.0 + 2.0 + 1.0, f"took {took:.1f}s"


def test_lost_on_suspended_reports_loss_when_kazoo_suspends(proxies: list[FaultProxy], name: str) -> None:
    """Curator's standard policy: a suspended connection is a lost lock (kazoo suspends after two thirds of
    the session without an answer when nothing is being sent)."""
    with distlock.connect(proxied_url(proxies, lost_on="suspended")) as store:
        lock = store.lock(name)
        assert lock.acquire(timeout=10)
        freeze(proxies)
        try:
            assert lock.lost.wait(SESSION * 2)
        finally:
            heal(proxies)
        with pytest.raises(distlock.LockLost, match="suspended"):
            lock.release()


def test_churn_leaves_nothing_once_containers_are_reaped_and_fences_go_up(zookeeper_url: str, name: str) -> None:
    """Fresh names taken and released leave no znode once the server's container reaper ran (every
    second on the test servers); a reused name's fence (czxid) is above every fence before."""
    with distlock.connect(zookeeper_url) as store:
        fences = []
        names = [f"{name}/n{i}" for i in range(40)]
        for n in names:
            lock = store.lock(n)
            assert lock.acquire(timeout=10)
            fences.append(lock.fence)
            lock.release()
        sem = store.semaphore(f"{name}/sem", 2)
        assert sem.acquire(timeout=10)
        sem.release()
        client = store._backend.wire.client  # type: ignore[attr-defined]
        top = layout.lock_path(name)

        def left() -> list[str]:
            if client.exists(top) is None:
                return []
            return [top, *client.get_children(top)]

        deadline = time.monotonic() + 20
        while left() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left() == []  # the containers of every name, and the parent of them all, were reaped
        again = store.lock(names[0])
        assert again.acquire(timeout=10)
        assert again.fence is not None and all(again.fence > f for f in fences if f is not None)
        again.release()


def test_a_slow_on_lost_callback_does_not_delay_another_waiters_wake_up(zookeeper_url: str, name: str) -> None:
    """kazoo runs every watch callback on one thread. The backend's own callbacks there
    only signal, and user callbacks run on the store's callback thread: a holder whose lock is broken (its
    deletion watch fires) and whose on_lost sleeps must not hold up the wake-up of another waiter."""
    slow_started = threading.Event()

    def slow(lock: object) -> None:
        slow_started.set()
        time.sleep(3.0)

    with distlock.connect(zookeeper_url) as store, distlock.connect(zookeeper_url) as other:
        victim = store.lock(name + "-victim", on_lost=slow)
        assert victim.acquire(timeout=10)
        time.sleep(0.5)  # the holder's deletion watch is armed
        blocker = other.lock(name + "-busy")
        assert blocker.acquire(timeout=10)
        woke: dict[str, float] = {}

        def wait_for_busy() -> None:
            lock = store.lock(name + "-busy")
            if lock.acquire(timeout=20):
                woke["at"] = time.monotonic()
                lock.release()

        waiter = threading.Thread(target=wait_for_busy, daemon=True)
        waiter.start()
        time.sleep(0.5)  # queued, watching the blocker's node
        assert other.break_lock(name + "-victim")
        assert slow_started.wait(10)
        released = time.monotonic()
        blocker.release()
        waiter.join(20)
        assert "at" in woke
        assert woke["at"] - released < 1.5, f"the waiter woke {woke['at'] - released:.1f}s after the release"


def test_a_holding_on_a_healthy_link_outlives_the_session_timeout(zookeeper_url: str, name: str) -> None:
    """The session's end moves with every answer (the liveness thread asks when nothing else was answered):
    a lock held for longer than the session timeout on a healthy link is not lost."""
    with distlock.connect(zookeeper_url) as store:
        lock = store.lock(name)
        assert lock.acquire(timeout=10)
        time.sleep(SESSION * 1.5)
        assert not lock.lost.is_set()
        assert lock.owned()
        lock.release()

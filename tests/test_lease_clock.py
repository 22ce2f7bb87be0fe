"""The lease clock (``distlock/_async/clock.py``) against real servers through a gray link.

The promise under test: when a holder may have lost its lock, ``lost`` fires before the backend can grant the
lock to anyone else -- on a silent link too, where the renewal round trip never returns. Each test puts one
client behind :class:`~distlock.checker.proxy.FaultProxy` and a second client on the direct link, and
compares two moments on this host's monotonic clock: when the first client's ``lost`` was set, and when the
second client's acquire returned. Callbacks are tested without a server (``memory://``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import distlock
from distlock.checker.proxy import FaultProxy

LEASE_BACKENDS = ["redis", "postgres", "mysql"]


@contextmanager
def proxied(url: str) -> Iterator[tuple[FaultProxy, str]]:
    """A proxy in front of a one-host URL, and the URL that goes through it."""
    parts = urlsplit(url)
    assert parts.hostname and parts.port, url
    with FaultProxy(parts.hostname, parts.port) as proxy:
        auth = parts.netloc.rpartition("@")[0]
        netloc = f"{auth}@{proxy.address}" if auth else proxy.address
        yield proxy, urlunsplit(parts._replace(netloc=netloc))


def watch(event: threading.Event) -> list[float]:
    """The moment ``event`` is set, recorded by a thread that waits on it (independent of callbacks)."""
    seen: list[float] = []

    def run() -> None:
        if event.wait(30):
            seen.append(time.monotonic())

    threading.Thread(target=run, daemon=True).start()
    return seen


@pytest.mark.parametrize("backend", LEASE_BACKENDS)
def test_frozen_link_lost_fires_before_another_client_is_granted(
    backend: str, name: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{backend}_url")
    with proxied(url) as (proxy, through), distlock.connect(url) as direct:
        gray = distlock.connect(through)
        try:
            held = gray.lock(name, ttl=3.0)
            assert held.acquire(timeout=5)
            lost_at = watch(held.lost)
            proxy.freeze()  # the renewals go out and never come back; no FIN, no RST
            other = direct.lock(name, ttl=5.0)
            assert other.acquire(timeout=10)
            granted_at = time.monotonic()
            assert held.lost.wait(1), "the frozen holder was never told"
            time.sleep(0.05)  # let the watcher record
            assert lost_at and lost_at[0] < granted_at, f"told {lost_at[0] - granted_at:+.3f}s after the grant"
            other.release()
        finally:
            proxy.heal()
            gray.close()


@pytest.mark.parametrize("backend", ["redis", "postgres"])
async def test_frozen_link_lost_fires_before_another_client_is_granted_async(
    backend: str, name: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue(f"{backend}_url")
    with proxied(url) as (proxy, through):
        direct = await distlock.connect_async(url)
        gray = await distlock.connect_async(through)
        try:
            held = gray.lock(name, ttl=3.0)
            assert await held.acquire(timeout=5)
            lost_at: list[float] = []

            async def watcher() -> None:
                await held.lost.wait()
                lost_at.append(time.monotonic())

            task = asyncio.create_task(watcher())
            proxy.freeze()
            other = direct.lock(name, ttl=5.0)
            assert await other.acquire(timeout=10)
            granted_at = time.monotonic()
            await asyncio.wait_for(task, 1)
            assert lost_at[0] < granted_at, f"told {lost_at[0] - granted_at:+.3f}s after the grant"
            await other.release()
        finally:
            proxy.heal()
            await gray.aclose()
            await direct.aclose()


@pytest.mark.parametrize("backend", ["redis", "postgres"])
def test_grant_whose_reply_comes_after_its_lease_end_is_no_success(
    backend: str, name: str, request: pytest.FixtureRequest
) -> None:
    """F3 on every backend, not only Redlock: the answer takes longer than the lease, so the server may have
    handed the lock to someone else before we heard of it. acquire() must not report success (False, or a
    BackendError where the backend bounds each try below the TTL), and must leave nothing behind."""
    url = request.getfixturevalue(f"{backend}_url")
    with proxied(url) as (proxy, through), distlock.connect(through) as slow:
        proxy.delay(0.35)  # each way: every answer comes 0.7 s after its request, the lease is 0.5 s
        lock = slow.lock(name, ttl=0.5)
        try:
            got: bool | None = lock.acquire(timeout=2.0)
        except distlock.BackendError:
            got = None
        assert got is not True, "a grant answered after its lease end was reported as a success"
        assert not lock.lost.is_set()
        proxy.heal()
        with distlock.connect(url) as direct:
            assert direct.lock(name).acquire(timeout=2.0)  # nothing of ours is left beyond its lease
            info = direct.inspect(name)
            assert info is not None and len(info.holders) == 1


async def test_extend_in_flight_is_not_overwritten_by_a_renewal(redis_url: str, name: str) -> None:
    """extend(ttl=30) is on its way when the renewer sends its own renewal with the old TTL (1.5 s),
    which the server applies last. A renewer that records the new TTL for the request that carried the old
    one believes in a lease far longer than the server's, and another client takes the lock while the holder
    is not told. Serialised, the renewal waits for extend() and then carries the new TTL."""
    with proxied(redis_url) as (proxy, through):
        direct = await distlock.connect_async(redis_url)
        gray = await distlock.connect_async(through)
        try:
            held = gray.lock(name, ttl=1.5)
            assert await held.acquire(timeout=5)
            t0 = time.monotonic()  # the renewer sends its first renewal ttl/3 = 0.5 s after this
            proxy.delay(0.5)  # each way
            await asyncio.sleep(max(0.0, t0 + 0.3 - time.monotonic()))
            await held.extend(30.0)  # on its way from t0+0.3; the server applies it at t0+0.8
            got = await direct.lock(name, ttl=5.0).acquire(timeout=6.0)
            if got:
                assert held.lost.is_set(), "another client holds the lock; the holder was not told"
            else:
                assert not held.lost.is_set()
        finally:
            proxy.heal()
            await gray.aclose()
            await direct.aclose()


def test_extend_whose_answer_comes_after_the_lease_end_is_no_success(redis_url: str, name: str) -> None:
    """An extend() that cannot be confirmed before the lease it was meant to extend ran out confirms nothing:
    the lock may have been someone else's in between. It raises (LockLost, or BackendError where the backend
    gives up the try first) instead of returning, and lost fires at the lease end."""
    with proxied(redis_url) as (proxy, through), distlock.connect(through) as gray:
        held = gray.lock(name, ttl=1.0, auto_renew=False)
        assert held.acquire(timeout=5)
        proxy.delay(0.6)  # each way: the answer would come 1.2 s after the request, past the 1 s lease
        with pytest.raises((distlock.LockLost, distlock.BackendError)):
            held.extend()
        assert held.lost.wait(2)
        with pytest.raises(distlock.LockLost):
            held.extend()
        proxy.heal()


def test_slow_or_failing_callback_delays_no_renewal_and_no_other_lost() -> None:
    """A sync on_lost callback used to run on the renewer's thread. A slow one delayed every other
    lock's renewal and lost signal; one raising SystemExit killed the renewer silently."""
    with distlock.connect("memory://") as store:
        slow = store.lock("slow", ttl=0.3, auto_renew=False, on_lost=lambda _lock: time.sleep(3))
        dying = store.lock("dying", ttl=0.3, auto_renew=False, on_lost=lambda _lock: (_ for _ in ()).throw(SystemExit))
        short = store.lock("short", ttl=0.8, auto_renew=False, on_lost=lambda _lock: None)
        renewed = store.lock("renewed", ttl=0.6)
        assert slow.acquire() and dying.acquire() and renewed.acquire()
        start = time.monotonic()
        assert short.acquire()
        short_lost_at = watch(short.lost)
        time.sleep(2.0)  # the slow callback is still sleeping; the SystemExit was raised long ago
        assert short_lost_at, "a slow callback delayed another lock's lost"
        assert short_lost_at[0] - start < 1.2
        assert renewed.owned() and not renewed.lost.is_set(), "renewals stopped behind a callback"
        renewed.release()


async def test_async_callback_raising_systemexit_stops_nothing() -> None:
    store = await distlock.connect_async("memory://")
    try:
        dying = store.lock("dying", ttl=0.3, auto_renew=False, on_lost=lambda _lock: (_ for _ in ()).throw(SystemExit))

        async def failing(_lock: object) -> None:
            raise SystemExit

        dying_async = store.lock("dying-async", ttl=0.3, auto_renew=False, on_lost=failing)
        renewed = store.lock("renewed", ttl=0.6)
        assert await dying.acquire() and await dying_async.acquire() and await renewed.acquire()
        await asyncio.sleep(1.5)
        assert dying.lost.is_set() and dying_async.lost.is_set()
        assert await renewed.owned()
        await renewed.release()
    finally:
        await store.aclose()


def test_lost_callbacks_run_once_when_many_find_the_loss_at_once(name: str) -> None:
    """The clock, the renewer, a backend's own liveness thread and the caller may all find one loss at the
    same moment; the callbacks still run once."""
    with distlock.connect("memory://") as store:
        calls: list[object] = []
        lock = store.lock(name, ttl=5.0, on_lost=calls.append)
        assert lock.acquire()
        holding = store._acquirer.holdings()[0]
        start = threading.Barrier(8)

        def lose() -> None:
            start.wait()
            store._acquirer.lose(holding, "found by many")

        threads = [threading.Thread(target=lose) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.2)  # the callback thread
        assert calls == [lock]


def test_a_failing_renewal_waits_its_retry_delay() -> None:
    """A backend that refuses every renewal at once (a server that refuses connections, no master known during
    a failover): the renewer tries again after ``min(RETRY_AFTER_FAILURE, ttl / 10)``, not at once. The window
    that batches renewals due within a sixth of the TTL is wider than that delay, and alone it made a failing
    renewal go again as soon as it failed: hundreds of round trips (and warnings) a second."""
    from distlock import BackendError

    with distlock.connect("memory://") as store:
        backend = store._backend  # type: ignore[attr-defined]
        calls: list[float] = []

        def refuse(claims: object) -> object:
            calls.append(time.monotonic())
            raise BackendError("refused (injected)")

        lock = store.lock("refused-renewals", ttl=3.0)
        assert lock.acquire()
        backend.renew = refuse
        lock.lost.wait(5)  # the first renewal is due after about a third of the TTL; it fails until the end
    assert calls, "the renewal was tried"
    span = calls[-1] - calls[0]
    # retries every 0.3 s (a tenth of the TTL) from the first failure until the lease ends
    assert len(calls) <= span / 0.3 + 2, (len(calls), span)


def test_the_lost_event_is_made_on_demand_and_set_whichever_comes_first() -> None:
    """A holding makes its ``lost`` event only when someone asks for it (``held.Lost``): asked for before the
    loss, after it, or while another thread sets it, the event the caller gets is set once the loss is."""
    from distlock._sync.held import Lost

    before, after = Lost(), Lost()
    early = before.event(_not_expired)
    assert not early.is_set() and not before.is_set()
    before.set()
    after.set()
    assert early.is_set() and before.event(_not_expired) is early
    assert after.is_set() and after.event(_not_expired).is_set()
    for _ in range(300):  # the race: one thread sets it while others ask for the event
        got = _race_for_the_lost_event(Lost())
        assert len({id(e) for e in got}) == 1 and got[0].is_set()


def _not_expired() -> None:
    """The event's look at the lease clock (``held.Clocked``): here the lease never ends."""


def _race_for_the_lost_event(lost: Any) -> list[threading.Event]:
    """Three threads ask ``lost`` for its event while a fourth sets it, all released at once."""
    got: list[threading.Event] = []
    go = threading.Barrier(4)

    def ask() -> None:
        go.wait()
        got.append(lost.event(_not_expired))

    def lose() -> None:
        go.wait()
        lost.set()

    threads = [threading.Thread(target=ask) for _ in range(3)] + [threading.Thread(target=lose)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def test_a_lock_lost_while_nobody_waited_on_it_shows_lost_when_asked(name: str) -> None:
    """The event a caller asks for after the loss is already set (the loss itself made none)."""
    with distlock.connect("memory://") as store:
        lock = store.lock(name, ttl=0.3, auto_renew=False)
        assert lock.acquire()
        deadline = time.monotonic() + 5
        while store._acquirer.holdings() and time.monotonic() < deadline:  # until the clock loses it
            time.sleep(0.02)
        assert lock.lost.is_set()
        with pytest.raises(distlock.LockLost):
            lock.release()

"""The lease, known locally: ``deadline``, ``ttl_left`` and ``check(margin)`` read the lease clock with no I/O,
and ``at_risk`` comes before ``lost``.

On SQLite (no server) with ``auto_renew=False``, so the lease runs down on its own and every figure is known;
then on every networked backend with the link frozen under the holder (a loopback proxy per server): the
renewals go unanswered, ``at_risk`` is set, and it comes well before ``lost``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import distlock
from distlock._async.held import AT_RISK_SHARE
from distlock.checker.proxy import FaultProxy
from tests.test_deadline import through

TTL = 3.0


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/locks.db"


def test_deadline_ttl_left_and_check_follow_the_lease(url: str) -> None:
    with distlock.connect(url) as store:
        lock = store.lock("view/a", ttl=TTL, auto_renew=False)
        assert lock.deadline is None and lock.ttl_left is None
        with pytest.raises(distlock.NotHeld):
            lock.check()
        before = time.monotonic()
        assert lock.acquire(timeout=5)
        deadline = lock.deadline
        assert deadline is not None and before < deadline <= before + TTL + 1.0
        left = lock.ttl_left
        assert left is not None and 0 < left <= TTL
        assert 0 < lock.check(margin=0.1) <= TTL  # returns what is left
        with pytest.raises(distlock.LockLost, match="margin"):
            lock.check(margin=TTL + 1.0)  # an effect longer than the lease: refused, not lost
        assert not lock.lost.is_set()
        time.sleep(TTL + 0.5)  # never renewed: the lease ran out
        assert lock.ttl_left == 0.0
        with pytest.raises(distlock.LockLost, match="lost"):
            lock.check()
        assert lock.lost.is_set()
        with pytest.raises(distlock.LockLost):
            lock.release()
        assert lock.deadline is None


def test_check_refuses_a_margin_that_is_not_seconds(url: str) -> None:
    with distlock.connect(url) as store, store.lock("view/m", ttl=TTL) as lock:
        for bad in (-1, float("nan"), float("inf"), True, "2"):
            with pytest.raises(distlock.ConfigError, match="margin"):
                lock.check(bad)  # type: ignore[arg-type]
        assert lock.check(0.5) > 0.5


def test_at_risk_comes_half_a_lease_before_lost_and_a_renewal_clears_it(url: str) -> None:
    with distlock.connect(url) as store:
        lock = store.lock("view/risk", ttl=TTL, auto_renew=False)
        warned: list[float] = []
        lock.on_at_risk(lambda _lock: warned.append(time.monotonic()))
        assert lock.acquire(timeout=5)
        granted = time.monotonic()
        assert not lock.at_risk.is_set()
        assert lock.at_risk.wait(TTL * 2), "at_risk never came"
        came = time.monotonic()
        assert not lock.lost.is_set()
        # half the lease left, give or take the clock's wake-up: never in the first third of the lease
        assert came - granted > TTL * (1 - AT_RISK_SHARE) * 0.6, came - granted
        lock.extend()  # a confirmed renewal: safe again
        deadline = time.monotonic() + 5
        while lock.at_risk.is_set() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not lock.at_risk.is_set(), "a confirmed renewal did not clear at_risk"
        assert lock.at_risk.wait(TTL * 2)  # and again, before this lease runs out
        assert lock.lost.wait(TTL * 2)
        for _ in range(200):
            if len(warned) >= 2:
                break
            time.sleep(0.01)
        assert len(warned) == 2, warned  # once per time it became at risk


def test_an_election_knows_its_lease_too(url: str) -> None:
    with distlock.connect(url) as store:
        election = store.election("view/elect", ttl=TTL)
        assert election.ttl_left is None
        assert election.campaign(value="a", timeout=5)
        assert election.check(0.1) > 0 and election.deadline is not None
        assert not election.at_risk.is_set()
        election.resign()
        assert election.deadline is None


def test_async_lock_knows_its_lease(url: str) -> None:
    async def main() -> None:
        async with distlock.connect_async(url) as store:
            lock = store.lock("view/async", ttl=TTL, auto_renew=False)
            async with lock:
                assert 0 < lock.check(0.1) <= TTL
                assert lock.ttl_left is not None and lock.deadline is not None
                await asyncio.wait_for(lock.at_risk.wait(), TTL * 2)
                assert not lock.lost.is_set()

    asyncio.run(main())


# -- on a frozen link, on every networked backend ---------------------------------------------------------
NETWORKED = ["redis", "redlock", "zookeeper", "etcd", "mysql", "postgres"]


@pytest.fixture(params=NETWORKED)
def net_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def proxies(net_url: str) -> Iterator[list[FaultProxy]]:
    ps = [FaultProxy(host, port).start() for host, port in distlock._url.parse_url(net_url).hosts]
    try:
        yield ps
    finally:
        for p in ps:
            p.heal()
            p.close()


def test_at_risk_comes_before_lost_when_the_link_freezes(net_url: str, proxies: list[FaultProxy]) -> None:
    stamps: dict[str, float] = {}
    with distlock.connect(through(net_url, proxies)) as store:
        lock = store.lock(f"view-{uuid.uuid4().hex[:10]}", ttl=TTL)
        lock.on_at_risk(lambda _lock: stamps.setdefault("risk", time.monotonic()))
        lock.on_lost(lambda _lock: stamps.setdefault("lost", time.monotonic()))
        assert lock.acquire(timeout=10)
        span = lock.ttl_left
        assert span is not None and span > 0
        for p in proxies:
            p.freeze()
        stamps["frozen"] = time.monotonic()
        assert lock.lost.wait(60), "never lost on a frozen link"
        for _ in range(300):  # callbacks run off the critical path
            if "risk" in stamps and "lost" in stamps:
                break
            time.sleep(0.01)
        for p in proxies:
            p.heal()
        with pytest.raises(distlock.LockError):
            lock.release()
    assert "risk" in stamps, f"lost with no at_risk first: {stamps}"
    warned_for = stamps["lost"] - stamps["risk"]
    # half the lease (the session's timeout on ZooKeeper) before lost; a third of it allows for the wake-ups
    assert warned_for > 0.3 * AT_RISK_SHARE * min(span, TTL), stamps


# -- asyncio: a block that stops at the lease end -----------------------------------------------------------
def test_lease_timeout_cancels_the_block_when_the_lease_runs_out(url: str) -> None:
    async def main() -> tuple[float, float]:
        async with distlock.connect_async(url) as store:
            lock = store.lock("view/scope", ttl=TTL, auto_renew=False)
            assert await lock.acquire(timeout=5)
            began = time.monotonic()
            deadline = lock.deadline
            assert deadline is not None
            with pytest.raises(distlock.LockLost, match="lease_timeout"):
                async with lock.lease_timeout():
                    await asyncio.sleep(TTL * 10)  # an effect that would outlive the lease
            ended = time.monotonic()
            assert lock.lost.is_set()
            with pytest.raises(distlock.LockLost):
                await lock.release()
            return ended - began, deadline - began

    took, lease = asyncio.run(main())
    assert lease - 0.5 < took < lease + 2.0, (took, lease)  # at the lease end, not before, not long after


def test_lease_timeout_lets_a_renewed_block_run_past_its_ttl(url: str) -> None:
    async def main() -> None:
        async with distlock.connect_async(url) as store:
            lock = store.lock("view/renewed", ttl=1.5)
            async with lock, lock.lease_timeout():
                await asyncio.sleep(4.0)  # renewals move the end: never cancelled
            assert not lock.lost.is_set()

    asyncio.run(main())


def test_lease_timeout_is_for_asyncio_and_needs_the_lock_held(url: str) -> None:
    with distlock.connect(url) as store:
        lock = store.lock("view/sync-scope", ttl=TTL)
        with pytest.raises(distlock.NotHeld):
            lock.lease_timeout()
        with lock, pytest.raises(TypeError, match="check"):
            lock.lease_timeout()


async def _take(
    store: distlock.AsyncStore, kind: str, name: str, value: str
) -> distlock.AsyncLock | distlock.AsyncElection:
    """A lock taken, or an election won, on ``store``."""
    if kind == "lock":
        lock = store.lock(name, ttl=TTL)
        assert await lock.acquire(timeout=30)
        return lock
    election = store.election(name, ttl=TTL)
    assert await election.campaign(value, timeout=30)
    return election


@pytest.mark.parametrize("kind", ["lock", "election"])
def test_lease_timeout_stops_the_block_before_another_client_is_granted(redis_url: str, kind: str) -> None:
    """A holder (or leader) behind a frozen link: its block is cancelled at the local lease end (LockLost),
    before another client (straight to the server) can take the lock or lead. The block's last step is
    stamped, so is the other's grant."""
    host, port = distlock._url.parse_url(redis_url).hosts[0]
    name = f"view-{kind}-{uuid.uuid4().hex[:10]}"

    async def main() -> tuple[float, float]:
        with FaultProxy(host, port) as proxy:
            async with distlock.connect_async(through(redis_url, [proxy])) as store, distlock.connect_async(
                redis_url
            ) as other:
                held = await _take(store, kind, name, "a")
                last_step = 0.0
                proxy.freeze()
                with pytest.raises(distlock.LockLost):
                    async with held.lease_timeout():
                        while True:
                            last_step = time.monotonic()  # a side effect, as often as the loop allows
                            await asyncio.sleep(0.01)
                proxy.heal()
                taker = await _take(other, kind, name, "b")
                granted = time.monotonic()
                if isinstance(taker, distlock.AsyncElection):
                    await taker.resign()
                else:
                    await taker.release()
                    assert isinstance(held, distlock.AsyncLock)
                    with pytest.raises(distlock.LockError):
                        await held.release()
                return last_step, granted

    last_step, granted = asyncio.run(main())
    assert last_step < granted

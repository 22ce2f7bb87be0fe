"""etcd on gray links (silent, half-open or slow): every member of the 3-member cluster behind its own FaultProxy.

* a holder cut off by a silent partition is told ``lost`` before another client is granted the lock;
* every keepalive delayed past the lease: ``lost`` at the local lease end, before the other client is granted;
* ``acquire(timeout=...)`` on a frozen link comes back within the documented bound (sync and asyncio);
* half-open pooled connections do not wedge other requests: a new acquire and the renewals go on;
* ``lease_end`` of a holding on a pooled lease counts from that lease's last confirmation;
* churn over fresh names leaves no key behind; fences of a reused name go up.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

import distlock
from distlock.checker.proxy import FaultProxy
from tools.servers.etcd import EtcdCluster, client_ports, post

pytestmark = pytest.mark.skipif(not __import__("shutil").which("etcd"), reason="etcd is not installed")

TTL = 3.0
OP = 2.0  # the URL's timeout= (one try's budget)


@pytest.fixture
def proxies(etcd_cluster_3: EtcdCluster) -> Iterator[list[FaultProxy]]:
    ps = [FaultProxy("127.0.0.1", port).start() for port in client_ports(etcd_cluster_3.url)]
    try:
        yield ps
    finally:
        for p in ps:
            p.heal()
            p.close()


def proxied_url(proxies: list[FaultProxy]) -> str:
    return "etcd://" + ",".join(f"127.0.0.1:{p.port}" for p in proxies) + f"?timeout={OP:g}"


@pytest.fixture
def name() -> str:
    return f"g-{uuid.uuid4().hex[:12]}"


def heal(proxies: list[FaultProxy]) -> None:
    for p in proxies:
        p.heal()


def stamp_when(event: object, out: dict[str, float], key: str, timeout: float) -> None:
    def run() -> None:
        if event.wait(timeout):  # type: ignore[attr-defined]
            out[key] = time.monotonic()

    threading.Thread(target=run, daemon=True).start()


def contend(store: distlock.Store, name: str, out: dict[str, float]) -> threading.Thread:
    def run() -> None:
        lock = store.lock(name, ttl=TTL)
        if lock.acquire(timeout=30):
            out["granted"] = time.monotonic()
            lock.release()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def told_before_granted(proxies: list[FaultProxy], etcd_url: str, name: str, fault: object) -> dict[str, float]:
    stamps: dict[str, float] = {}
    with distlock.connect(proxied_url(proxies)) as holder_store, distlock.connect(etcd_url) as other_store:
        held = holder_store.lock(name, ttl=TTL)
        assert held.acquire(timeout=10)
        time.sleep(TTL / 2)  # a renewal or two went through
        stamp_when(held.lost, stamps, "lost", 30)
        stamps["fault"] = time.monotonic()
        stop = fault()  # type: ignore[operator]
        other = contend(other_store, name, stamps)
        try:
            other.join(30)
        finally:
            stop.set()
            heal(proxies)
        assert "granted" in stamps, "the other client was never granted the lock"
        time.sleep(0.1)
        assert "lost" in stamps, f"lost never fired; granted {stamps['granted'] - stamps['fault']:.1f}s after the fault"
        assert stamps["lost"] < stamps["granted"], f"told {stamps['lost'] - stamps['granted']:.2f}s late"
    return stamps


def test_frozen_link_holder_is_lost_before_another_client_is_granted(
    proxies: list[FaultProxy], etcd_url: str, name: str
) -> None:
    def fault() -> threading.Event:
        for p in proxies:
            p.freeze()
        return threading.Event()

    told_before_granted(proxies, etcd_url, name, fault)


def test_keepalives_delayed_past_the_lease_are_lost_at_lease_end(
    proxies: list[FaultProxy], etcd_url: str, name: str
) -> None:
    """Every keepalive of the holder is held by the proxy until after the lease (delay_next on the keepalive
    path, re-armed as soon as it matched); everything else passes. ``lost`` fires at the local lease end,
    within a TTL of the fault, and before the server's lease expires and the other client gets the lock."""

    def fault() -> threading.Event:
        stop = threading.Event()

        def hold_keepalives(p: FaultProxy) -> None:
            while not stop.is_set():
                hit = p.delay_next(b"/v3/lease/keepalive", TTL + 2)
                while not stop.is_set() and not hit.wait(0.02):
                    pass

        for p in proxies:
            threading.Thread(target=hold_keepalives, args=(p,), daemon=True).start()
        return stop

    stamps = told_before_granted(proxies, etcd_url, name, fault)
    assert stamps["lost"] - stamps["fault"] < TTL + 0.5


def test_acquire_with_timeout_on_a_frozen_link_returns_within_the_bound(
    proxies: list[FaultProxy], etcd_url: str, name: str
) -> None:
    """acquire(timeout=2) comes back within 2 s + one try (timeout=) + the clean-up budget (2 s)."""
    bound = 2.0 + OP + 2.0 + 1.0  # + 1 s of slack for a loaded machine
    with distlock.connect(etcd_url) as other_store, distlock.connect(proxied_url(proxies)) as store:
        blocker = other_store.lock(name, ttl=30)
        assert blocker.acquire(timeout=10)
        lock = store.lock(name, ttl=TTL)
        threading.Timer(0.5, lambda: [p.freeze() for p in proxies]).start()  # while it waits in the queue
        started = time.monotonic()
        assert lock.acquire(timeout=2) is False
        assert time.monotonic() - started < bound
        started = time.monotonic()  # frozen before the first try
        try:
            assert store.lock(name + "-2", ttl=TTL).acquire(timeout=2) is False
        except distlock.BackendError:
            pass
        took = time.monotonic() - started
        heal(proxies)
        assert took < bound, f"acquire(timeout=2) took {took:.1f}s on a frozen link"
        blocker.release()
        assert lock.acquire(timeout=10)  # what the clean-up could not delete went with its lease
        lock.release()


def test_asyncio_timeout_on_a_frozen_link_returns_within_the_bound(proxies: list[FaultProxy], name: str) -> None:
    async def main() -> float:
        async with await distlock.connect_async(proxied_url(proxies)) as store:
            for p in proxies:
                p.freeze()
            started = time.monotonic()
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(2):
                    await store.lock(name, ttl=TTL).acquire()
            took = time.monotonic() - started
            heal(proxies)
            return took

    took = asyncio.run(main())
    assert took < 2.0 + 2.0 + 1.0, f"took {took:.1f}s"  # cancelled at 2 s, then the clean-up budget


def test_half_open_pooled_connections_do_not_wedge_other_requests(proxies: list[FaultProxy], name: str) -> None:
    with distlock.connect(proxied_url(proxies)) as store:
        held = store.lock(name, ttl=TTL)
        assert held.acquire(timeout=10)
        for i in range(5):  # fill the pools
            other = store.lock(f"{name}-{i}", ttl=TTL)
            assert other.acquire(timeout=10)
            other.release()
        dead = sum(p.half_open() for p in proxies)
        assert dead > 0
        started = time.monotonic()
        fresh = store.lock(name + "-fresh", ttl=TTL)
        assert fresh.acquire(timeout=10)
        took = time.monotonic() - started
        time.sleep(TTL)  # renewals of both holdings go on over new connections
        assert not held.lost.is_set() and not fresh.lost.is_set()
        assert held.owned() and fresh.owned()
        fresh.release()
        held.release()
    # one dead pooled connection costs one try (at most timeout=) and takes the member's other idle ones with it
    assert took < OP + 1.0, f"an acquire took {took:.1f}s over half-open pooled connections"


def test_lease_end_of_a_pooled_lease_counts_from_its_last_confirmation(etcd_url: str, name: str) -> None:
    with distlock.connect(etcd_url) as store:
        first = store.lock(name, ttl=6)
        assert first.acquire(timeout=10)
        first.release()  # its lease goes to the pool, last confirmed now
        confirmed = time.monotonic()
        time.sleep(1.0)
        again = store.lock(name, ttl=6)
        assert again.acquire(timeout=10)
        backend = store._backend  # type: ignore[attr-defined]
        holding = again._last  # type: ignore[attr-defined]
        end = backend.lease_end(holding.claim)
        assert end is not None and end <= confirmed + 6 - 0.06 + 0.05  # not acquire time + 6
        again.release()


def test_churn_leaves_no_key_and_fences_of_a_reused_name_go_up(etcd_url: str, name: str) -> None:
    """Fresh names taken and released leave no key (the fence is the key's create revision); a
    reused name's fence is above every fence handed out before."""
    port = client_ports(etcd_url)[0]
    fences: list[int] = []
    with distlock.connect(etcd_url) as store:
        names = [f"{name}/n{i}" for i in range(40)]
        for n in names:
            lock = store.lock(n)
            assert lock.acquire(timeout=10)
            assert lock.fence is not None
            fences.append(lock.fence)
            lock.release()
        rw = store.rwlock(f"{name}/rw")
        assert rw.read.acquire(timeout=10)
        rw.read.release()
        sem = store.semaphore(f"{name}/pool", 2)  # a name ending in /sem is refused on etcd
        assert sem.acquire(timeout=10)
        sem.release()
        prefix = name.encode()
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        b64 = base64.b64encode
        data = post(port, "/v3/kv/range", {"key": b64(prefix).decode(), "range_end": b64(end).decode()})
        assert not data.get("kvs"), data.get("kvs")
        again = store.lock(names[0])
        assert again.acquire(timeout=10)
        assert again.fence is not None and again.fence > max(fences)
        again.release()

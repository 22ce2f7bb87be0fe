"""Redis behind Sentinel (``redis+sentinel://``): real ``redis-sentinel`` processes (three sentinels, a master, a
replica; ``tools/servers/redis_sentinel.py``). The URL and its errors, every lock kind, a caller's
``Sentinel.master_for`` client, and failovers under contention: ``SENTINEL FAILOVER`` (the old master stays
writable for seconds: only following ``+switch-master`` keeps two holders apart) and a SIGKILLed master
(waiters ride it out and are woken on the new master; ``wait_replicas=1`` keeps the lock and the fence), and
a TLS-only deployment. A frozen (SIGSTOPped) master, sync and async: ``tests/_async/test_redis_sentinel_failover.py``."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field

import pytest
import redis

import distlock
from distlock import BackendError, ConfigError
from tests.tls_servers import PASSWORD as TLS_PASSWORD
from tests.tls_servers import tls_workdir
from tools.servers.proc import free_port
from tools.servers.redis_sentinel import SentinelDeployment, redis_sentinel

#: what a store logs when it follows a switch
FOLLOWED = "Sentinel announced a new master"


@pytest.fixture
def dep(redis_sentinel_servers: SentinelDeployment) -> SentinelDeployment:
    return redis_sentinel_servers  # the conformance row's deployment (tests that fail over start their own)


def test_url_errors_are_one_line_config_errors_without_the_password() -> None:
    for url, part in [
        ("redis+sentinel://127.0.0.1:26379", "service"),
        ("redis+sentinel://127.0.0.1:26379/svc/0/extra", "service"),
        ("redis+sentinel://127.0.0.1:26379/svc/x", "not a number"),
        ("redis+sentinel://127.0.0.1:26379/svc?cluster=true", "not a Redis Cluster"),
        ("redis+sentinel://127.0.0.1:26379/svc?nope=1", "unknown URL option"),
        ("redis+sentinel://u:s3cr3t@127.0.0.1:26379/svc?ssl_cert_reqs=none", "need TLS"),
        ("redis+sentinel://u:s3cr3t@127.0.0.1:26379/svc?cafile=/etc/hostname", "need TLS"),
        ("rediss+sentinel://u:s3cr3t@127.0.0.1:26379/svc?cafile=/nonexistent/ca.pem", "cafile=/nonexistent"),
        ("rediss+sentinel://u:s3cr3t@127.0.0.1:26379/svc?tls=false", "contradicts"),
    ]:
        with pytest.raises(ConfigError) as info:
            distlock.connect(url)
        text = str(info.value)
        assert part in text and "\n" not in text and "s3cr3t" not in text, text


def test_no_sentinel_answers_is_a_backend_error_in_bounded_time() -> None:
    url = f"redis+sentinel://u:s3cr3t@127.0.0.1:{free_port()}/svc?connect_timeout=1&sentinel_password=t0ps3cr3t"
    began = time.monotonic()
    with pytest.raises(BackendError) as info:
        distlock.connect(url)
    assert time.monotonic() - began < 5
    assert "s3cr3t" not in str(info.value) and "t0ps3cr3t" not in str(info.value)
    assert "No master found" in str(info.value)


def test_every_kind_with_wait_replicas(dep: SentinelDeployment) -> None:
    with distlock.connect(dep.url + "?wait_replicas=1") as store:
        assert "redis+sentinel://" in repr(store)
        fences = []
        for lock in (
            store.lock("k-lock"),
            store.rlock("k-rlock"),
            store.rwlock("k-rw").write,
            store.rwlock("k-rw").read,
        ):
            assert lock.acquire(timeout=5)
            fences.append(lock.fence)
            lock.release()
        assert fences == sorted(fences) and len(set(fences)) == len(fences)
        sem = store.semaphore("k-sem", permits=2)
        a, b, c = (store.semaphore("k-sem", permits=2) for _ in range(3))
        assert a.acquire(timeout=5) and b.acquire(timeout=5) and not c.acquire(blocking=False)
        a.release(), b.release()
        del sem
        with store.multilock(["k-m1", "k-m2"]):
            assert store.inspect("k-m1") is not None
        el = store.election("k-el", ttl=5)
        assert el.campaign("me", timeout=5)
        leader = store.leader("k-el")
        assert leader is not None and leader.value == "me"
        el.resign()
    # the written keys reached the replica (wait_replicas=1 waited for it)
    with redis.Redis(port=dep.replica.port) as r:
        assert r.exists("distlock:fences") == 1


def test_a_callers_master_for_client_is_taken_and_left_open(dep: SentinelDeployment) -> None:
    sentinel = redis.sentinel.Sentinel([("127.0.0.1", s.port) for s in dep.sentinels], socket_timeout=2)
    client = sentinel.master_for(dep.service, socket_timeout=2)
    with distlock.connect(client=client) as store:
        assert "redis+sentinel://" in repr(store) and dep.service in repr(store)
        with store.lock("given") as lock:
            assert lock.fence is not None
    assert client.ping()  # the store closed only its own connections
    replica = sentinel.slave_for(dep.service)
    with pytest.raises(ConfigError, match="replica"):
        distlock.connect(client=replica)
    client.close()
    sentinel.close()


@dataclass
class Ledger:
    """The protected resource: who is inside now (two at once: exclusion broken), the highest fence seen
    (a write with a lower one is a stale writer the fence would reject)."""

    inside: set[int] = field(default_factory=set)
    overlaps: int = 0
    stale: int = 0
    top: int = 0
    grants: list[tuple[float, int]] = field(default_factory=list)  # (when, worker)
    errors: list[str] = field(default_factory=list)
    guard: threading.Lock = field(default_factory=threading.Lock)

    def enter(self, who: int, fence: int) -> None:
        with self.guard:
            self.grants.append((time.monotonic(), who))
            if self.inside:
                self.overlaps += 1
            self.inside.add(who)
            if fence <= self.top:
                self.stale += 1
            self.top = max(self.top, fence)

    def leave(self, who: int) -> None:
        with self.guard:
            self.inside.discard(who)


def _contend(url: str, ledger: Ledger, stop: threading.Event, workers: int = 4) -> list[threading.Thread]:
    def work(who: int) -> None:
        with distlock.connect(url) as store:
            while not stop.is_set():
                lock = store.lock("contended", ttl=4)
                try:
                    if not lock.acquire(timeout=10):
                        continue
                except distlock.LockError as err:
                    ledger.errors.append(f"acquire: {err}")
                    time.sleep(0.05)
                    continue
                assert lock.fence is not None
                ledger.enter(who, lock.fence)
                time.sleep(0.02)
                ledger.leave(who)
                try:
                    lock.release()
                except distlock.LockError as err:
                    ledger.errors.append(f"release: {err}")

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    for t in threads:
        t.start()
    return threads


def _after(ledger: Ledger, moment: float) -> list[tuple[float, int]]:
    with ledger.guard:
        return [g for g in ledger.grants if g[0] > moment]


def test_manual_failover_under_contention() -> None:
    """``SENTINEL FAILOVER`` while four workers take turns: the old master stays a writable master for
    seconds after the switch, so a store that kept its connections would grant the lock there while the
    others take it on the new master. Following ``+switch-master``: no two holders at once, every worker
    gets the lock again on the new master, hand-overs stay push-fast."""
    with redis_sentinel() as d:
        ledger, stop = Ledger(), threading.Event()
        threads = _contend(d.url, ledger, stop)
        try:
            deadline = time.monotonic() + 10
            while len(ledger.grants) < 20 and time.monotonic() < deadline:
                time.sleep(0.05)
            old = d.master_port()
            with d.sentinel() as s:
                s.execute_command("SENTINEL", "FAILOVER", d.service)
            d.wait_master(old)
            switched = time.monotonic()
            # the window in which the old master still takes writes (it is reconfigured ~8 s later)
            deadline = switched + 10
            while time.monotonic() < deadline and len({w for _, w in _after(ledger, switched + 0.5)}) < 4:
                time.sleep(0.05)
            time.sleep(1.0)
        finally:
            stop.set()
            for t in threads:
                t.join(15)
        late = _after(ledger, switched + 1.0)
        assert {w for _, w in late} == {0, 1, 2, 3}, ledger.errors
        assert ledger.overlaps == 0, (ledger.overlaps, ledger.errors)
        # push wake-ups on the new master: a hand-over is far below the 2 s polling slice
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(late)]
        assert max(gaps) < 1.0, max(gaps)
        # grants the old master made between the promotion and the announcement are lost with it (docs/redis.md,
        # F5), and the new master's counter is behind by as many: its fences start from its clock instead, so
        # none goes back
        assert ledger.stale == 0, (ledger.stale, len(ledger.grants), len(late))


# redis-py can leave a socket open when a connect to the new master is cut short mid-handshake during the
# failover (``SentinelManagedConnection.connect_to``; seen once in CI, at this test's teardown): not distlock's
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_killed_master_waiters_ride_out_the_failover_and_the_lock_survives_with_wait_replicas() -> None:
    """kill -9 of the master while a holder holds (``wait_replicas=1``: the key and the fence counter are on
    the replica before the grant) and two waiters wait: the holder keeps the lock through the failover
    (renewals reach the new master), the waiters do not fail while no master is known, and the release on
    the new master wakes one of them at once with a higher fence. (The waiters do not ask for
    ``wait_replicas``: the new master has no replica left, so such an acquire fails until one joins.)"""
    with redis_sentinel() as d:
        url = d.url
        with distlock.connect(url + "?wait_replicas=1") as store:
            holder = store.lock("survivor", ttl=8)
            assert holder.acquire(timeout=5)
            first = holder.fence
            assert first is not None
            got: list[tuple[float, int | None]] = []
            errors: list[BaseException] = []

            def wait() -> None:
                try:
                    with distlock.connect(url) as s2:
                        lk = s2.lock("survivor", ttl=8)
                        if lk.acquire(timeout=30):
                            got.append((time.monotonic(), lk.fence))
                            lk.release()
                except BaseException as err:  # noqa: BLE001 - reported by the assertion below
                    errors.append(err)

            waiters = [threading.Thread(target=wait, daemon=True) for _ in range(2)]
            for t in waiters:
                t.start()
            time.sleep(0.5)
            old = d.master_port()
            d.by_port(old).kill()
            d.wait_master(old)
            deadline = time.monotonic() + 10
            while not holder.owned() and time.monotonic() < deadline:  # owned() asks the (new) master
                time.sleep(0.1)
            assert holder.owned() and not holder.lost.is_set()
            assert not got and not errors
            released = time.monotonic()
            holder.release()
            release_took = time.monotonic() - released
            for t in waiters:
                t.join(30)
        assert not errors, errors
        assert len(got) == 2
        # push-fast on the new master (measured 1-10 ms, at most 0.12 s in 30 runs under load): a waiter that
        # was waiting for its subscription's confirmation when the listener moved re-checks at once, and the
        # scripts the new master lacks are loaded on the waiter's own connection. (Two CI runs saw 1.99 s and
        # 2.23 s: the waiter the release handed the name to sat 5 s in a script load through redis-py's pool
        # while its grant ran out, and the other one took the name at its 2 s re-check.)
        waited = got[0][0] - released
        assert waited < 0.5, (waited, release_took)
        fences = [f for _, f in got]
        assert all(f is not None and f > first for f in fences) and fences[0] != fences[1]


def test_tls_only_deployment_sync_async_wrong_ca_and_a_failover(caplog: pytest.LogCaptureFixture) -> None:
    """Every process speaks TLS only and wants a client certificate (``tests/tls_servers.py``'s): the sentinels'
    connections and the master's carry the common TLS options, on ``tls=true`` and on ``rediss+sentinel://``
    with redis-py's own names; the waiter is pushed over the TLS pub/sub; a wrong CA fails at once with one
    line; ``SENTINEL FAILOVER`` is followed (the ``+switch-master`` subscription is on a TLS sentinel
    connection too)."""
    caplog.set_level(logging.INFO, logger="distlock")
    with tls_workdir() as (_, certs), redis_sentinel(tls=(certs.server_cert, certs.server_key, certs.ca)) as d:
        url = d.url + "?tls=true&" + certs.client_query()
        with distlock.connect(url) as store:
            holder = store.lock("tls", ttl=10)
            assert holder.acquire(timeout=5)
            first = holder.fence
            assert first is not None
            got: list[float] = []

            def wait() -> None:
                with distlock.connect(url) as other:
                    lock = other.lock("tls", ttl=10)
                    assert lock.acquire(timeout=10)
                    got.append(time.monotonic())
                    assert lock.fence is not None and lock.fence > first
                    lock.release()

            waiter = threading.Thread(target=wait, daemon=True)
            waiter.start()
            _until_queued(store, "tls")
            released = time.monotonic()
            holder.release()
            waiter.join(15)
            assert got and got[0] - released < 0.5, [g - released for g in got]

            # a failover over TLS: the store follows it and locks on the new master
            old = d.master_port()
            with d.sentinel() as s:
                s.execute_command("SENTINEL", "FAILOVER", d.service)
            new = d.wait_master(old)
            deadline = time.monotonic() + 3  # the store has seen the switch (what is tested is that it does)
            while time.monotonic() < deadline and not any(FOLLOWED in r.getMessage() for r in caplog.records):
                time.sleep(0.02)
            with store.lock("tls-after", ttl=10):
                with d.data(new) as r:
                    assert r.exists("tls-after") == 1

        # a caller's TLS master_for client: the store's own connections take its TLS settings
        tls = {"ssl": True, "ssl_ca_certs": str(certs.ca), "ssl_certfile": str(certs.client_cert),
               "ssl_keyfile": str(certs.client_key)}  # fmt: skip
        sentinel = redis.sentinel.Sentinel(
            [("127.0.0.1", s.port) for s in d.sentinels], sentinel_kwargs={**tls, "socket_timeout": 2}
        )
        with distlock.connect(client=sentinel.master_for(d.service, socket_timeout=2, **tls)) as given:
            assert "rediss+sentinel://" in repr(given)
            with given.lock("tls-given") as lock:
                assert lock.fence is not None
        sentinel.close()

        # the TLS scheme with redis-py's own option names, on the asyncio side
        names = f"ssl_ca_certs={certs.ca}&ssl_certfile={certs.client_cert}&ssl_keyfile={certs.client_key}"
        asyncio.run(_async_tls_lock(d.url.replace("redis+sentinel", "rediss+sentinel") + "?" + names))

        # a CA that signed nothing of the deployment: one line at once, no password
        began = time.monotonic()
        wrong = f"rediss+sentinel://u:{TLS_PASSWORD}@" + d.url.split("://", 1)[1]
        with pytest.raises(BackendError) as info:
            distlock.connect(wrong + f"?sentinel_password={TLS_PASSWORD}&" + certs.client_query(certs.wrong_ca))
        text = str(info.value)
        assert "\n" not in text and TLS_PASSWORD not in text, text
        assert "certificate verify failed" in text or "not trusted" in text, text
        assert time.monotonic() - began < 4


def _until_queued(store: distlock.Store, name: str, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        info = store.inspect(name)
        if info is not None and info.waiters:
            return
        time.sleep(0.02)
    raise AssertionError(f"no waiter queued on {name!r} within {within} s")


async def _async_tls_lock(url: str) -> None:
    async with await distlock.connect_async(url) as store:
        lock = store.lock("tls-async", ttl=5)
        assert await lock.acquire(timeout=5)
        assert isinstance(lock.fence, int)
        assert not await store.lock("tls-async").acquire(timeout=0.2)  # the waiter path over TLS
        await lock.release()

"""``?remap=``: the addresses a Redis Cluster or the sentinels announce, mapped to the ones this client reaches.

The real deployments sit behind loopback proxies (the checker's ``FaultProxy``), one per server; the store is
given the proxies' addresses for the announced ones. Freezing the proxies must then stop the store's locks,
which proves every data connection goes through them; a store without ``remap`` on the same deployment keeps
locking through the freeze (its data connections go to the announced addresses), so the test can fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator

import pytest

import distlock
from distlock._backends.redis.remap import remap_option, remapper
from distlock._url import parse_url
from distlock.checker.proxy import FaultProxy
from tools.servers.proc import LOOPBACK
from tools.servers.redis_cluster import RedisCluster
from tools.servers.redis_sentinel import SentinelDeployment


def _remap(url: str) -> dict[tuple[str, int], tuple[str, int]]:
    return remap_option(parse_url(url))


def test_remap_pairs_parse_and_unknown_addresses_pass_through() -> None:
    got = _remap("redis://h:1?remap=10.0.0.5:7000=127.0.0.1:17000, [fe80::1]:7001=[::1]:17001")
    assert got == {("10.0.0.5", 7000): ("127.0.0.1", 17000), ("fe80::1", 7001): ("::1", 17001)}
    remap = remapper(got)
    assert remap(("10.0.0.5", 7000)) == ("127.0.0.1", 17000)
    assert remap(("127.0.0.1", 17000)) == ("127.0.0.1", 17000)  # redis-py may remap a remapped address again
    assert remapper({}) is None and _remap("redis://h:1") == {}


@pytest.mark.parametrize(
    "value", ["10.0.0.5:7000", "10.0.0.5=127.0.0.1:1", "10.0.0.5:x=127.0.0.1:1", ":7000=127.0.0.1:1", "a:1=b:70000"]
)
def test_a_bad_remap_is_one_line_naming_the_form(value: str) -> None:
    with pytest.raises(distlock.ConfigError) as err:
        _remap(f"redis://h:1?remap={value}")
    assert "remap=HOST:PORT=HOST:PORT" in str(err.value) and "\n" not in str(err.value)


@contextlib.contextmanager
def _proxies(ports: list[int]) -> Iterator[dict[int, FaultProxy]]:
    proxies = {port: FaultProxy(LOOPBACK, port).start() for port in ports}
    try:
        yield proxies
    finally:
        for p in proxies.values():
            p.close()


def _remap_option(proxies: dict[int, FaultProxy]) -> str:
    return ",".join(f"{LOOPBACK}:{port}={LOOPBACK}:{p.port}" for port, p in proxies.items())


def _locks_while_frozen(store: distlock.Store, frozen: list[FaultProxy]) -> bool:
    """Freeze ``frozen``; can the store take a lock (one second at most)? The proxies are healed after."""
    for p in frozen:
        p.freeze()
    try:
        lock = store.lock(f"remap/{uuid.uuid4().hex}", ttl=5)
        try:
            got = lock.acquire(timeout=1.0)
        except distlock.LockError:
            return False
        if got:
            with contextlib.suppress(distlock.LockError):
                lock.release()
        return bool(got)
    finally:
        for p in frozen:
            p.heal()


def test_a_cluster_reached_through_proxies_sends_every_lock_through_them(
    redis_cluster_servers: RedisCluster,
) -> None:
    ports = [n.port for n in redis_cluster_servers.nodes]
    with _proxies(ports) as proxies:
        seed = proxies[ports[0]].port
        url = f"redis://{LOOPBACK}:{seed}/0?socket_timeout=1&connect_timeout=1"
        with distlock.connect(f"{url}&remap={_remap_option(proxies)}") as store:
            for i in range(12):  # names on every master's slots
                with store.lock(f"remap/{i}", ttl=5) as held:
                    assert held.fence > 0
            assert not _locks_while_frozen(store, list(proxies.values()))
            with store.lock("remap/after", ttl=5):
                pass  # healed: it locks again
        with distlock.connect(url) as direct:  # the control: announced addresses, no proxy in between
            direct.lock("remap/warm", ttl=5).acquire(timeout=5)
            assert _locks_while_frozen(direct, list(proxies.values()))


def test_a_sentinel_master_reached_through_a_proxy_sends_every_lock_through_it(
    redis_sentinel_servers: SentinelDeployment,
) -> None:
    deployment = redis_sentinel_servers
    with _proxies([deployment.master.port, deployment.replica.port]) as proxies:
        url = deployment.url + "?socket_timeout=1&connect_timeout=1"
        with distlock.connect(f"{url}&remap={_remap_option(proxies)}") as store:
            with store.lock("remap/s", ttl=5) as held:
                assert held.fence > 0
            assert not _locks_while_frozen(store, list(proxies.values()))
            with store.lock("remap/after", ttl=5):
                pass
        with distlock.connect(url) as direct:
            direct.lock("remap/warm", ttl=5).acquire(timeout=5)
            assert _locks_while_frozen(direct, list(proxies.values()))


def test_the_asyncio_cluster_client_follows_the_remap_and_fails_a_frozen_link_as_a_lock_error(
    redis_cluster_servers: RedisCluster,
) -> None:
    # asyncio: a silent link ends in BackendError too (before: the bound of a new connection's handshake left
    # as the builtin TimeoutError, and the cluster client's "cannot be connected" as redis-py's own exception)
    ports = [n.port for n in redis_cluster_servers.nodes]

    async def run(proxies: dict[int, FaultProxy]) -> None:
        seed = proxies[ports[0]].port
        url = f"redis://{LOOPBACK}:{seed}/0?socket_timeout=1&connect_timeout=1&remap={_remap_option(proxies)}"
        async with distlock.connect_async(url) as store:
            for i in range(12):
                async with store.lock(f"remap/a{i}", ttl=5):
                    pass
            for p in proxies.values():
                p.freeze()
            try:
                got = await store.lock(f"remap/{uuid.uuid4().hex}", ttl=5).acquire(timeout=1.0)
            except distlock.BackendError:
                got = False
            finally:
                for p in proxies.values():
                    p.heal()
            assert not got
            async with store.lock("remap/a-after", ttl=5):
                pass

    with _proxies(ports) as proxies:
        asyncio.run(run(proxies))

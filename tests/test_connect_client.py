"""connect(client=...): a store on a driver client or pool the caller already has.

Real servers. The store never closes a client it was given; Redis: the store's own connections are made
from the client's parameters with distlock's timeouts and are closed by the store; ZooKeeper: the store
uses the client's session and leaves it connected."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import distlock


def _clients(client: Any) -> int:
    return len(client.client_list(_type="normal")) + len(client.client_list(_type="pubsub"))


def test_redis_client_lock_release_fence_wakeup_and_left_open(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)  # no timeouts of its own
    try:
        before = _clients(client)
        with distlock.connect(client=client) as store:
            assert store.scheme == "redis"
            # distlock's own connections carry distlock's timeouts, not the client's (none)
            own = store._backend.node.client.connection_pool  # type: ignore[attr-defined]
            assert own is not client.connection_pool
            assert own.connection_kwargs["socket_timeout"] == 5.0
            assert own.connection_kwargs["socket_connect_timeout"] == 5.0
            a = store.lock("cc/redis", ttl=30)
            a.acquire()
            f1 = a.fence
            got: list[float] = []

            def waiter() -> None:
                b = store.lock("cc/redis", ttl=30, timeout=20)
                b.acquire()
                got.append(time.monotonic())
                assert b.fence is not None and f1 is not None and b.fence > f1
                b.release()

            t = threading.Thread(target=waiter)
            t.start()
            time.sleep(0.5)
            released = time.monotonic()
            a.release()
            t.join(20)
            assert got and got[0] - released < 10  # woken by the release, far before the 30 s lease ran out
            assert _clients(client) > before  # the store's own connections (short path, listener)
        assert client.ping()  # the store did not close a client it did not create
        deadline = time.monotonic() + 5
        while _clients(client) > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _clients(client) <= before  # ... but closed its own connections
    finally:
        client.close()


def test_redis_connection_pool_and_matching_url(redis_url: str) -> None:
    import redis

    pool = redis.ConnectionPool.from_url(redis_url)
    try:
        with distlock.connect(redis_url, client=pool, socket_timeout=2) as store, store.lock("cc/pool") as lock:
            assert lock.fence is not None
            assert store._backend.node.client.connection_pool.connection_kwargs["socket_timeout"] == 2.0  # type: ignore[attr-defined]
        assert redis.Redis(connection_pool=pool).ping()
    finally:
        pool.disconnect()


def test_redis_wrong_side_and_wrong_url_are_config_errors(redis_url: str) -> None:
    import redis
    import redis.asyncio

    aclient = redis.asyncio.Redis.from_url(redis_url)
    with pytest.raises(distlock.ConfigError, match=r"needs a redis\.Redis client") as err:
        distlock.connect(client=aclient)
    assert "\n" not in str(err.value)
    client = redis.Redis.from_url(redis_url)
    try:

        async def main() -> None:
            with pytest.raises(distlock.ConfigError, match=r"needs a redis\.asyncio\.Redis client"):
                await distlock.connect_async(client=client)
            await aclient.aclose()

        asyncio.run(main())
        with pytest.raises(distlock.ConfigError, match="drives the redis backend"):
            distlock.connect("zookeeper://127.0.0.1:2181", client=client)
        with pytest.raises(distlock.ConfigError, match=r"connect\(client=\.\.\.\) takes"):
            distlock.connect(client=object())
        assert client.ping()
    finally:
        client.close()


def test_redis_asyncio_client_on_the_async_store(redis_url: str) -> None:
    import redis.asyncio

    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            async with await distlock.connect_async(client=client) as store:
                async with store.lock("cc/async", ttl=5) as lock:
                    assert lock.fence is not None
                assert await store.lock("cc/async").acquire(blocking=False)
            assert await client.ping()
        finally:
            await client.aclose()

    asyncio.run(main())


def _kazoo(zookeeper_url: str) -> Any:
    from kazoo.client import KazooClient

    hosts = zookeeper_url.split("://", 1)[1].split("?", 1)[0]
    zk = KazooClient(hosts=hosts, timeout=4)
    zk.start(timeout=15)
    return zk


def test_kazoo_client_lock_release_fence_wakeup_and_left_connected(zookeeper_url: str) -> None:
    zk = _kazoo(zookeeper_url)
    try:
        listeners = len(zk.state_listeners)
        with distlock.connect(client=zk) as store:
            assert store.scheme == "zookeeper"
            a = store.lock("cc/zk", ttl=30)
            a.acquire()
            f1 = a.fence
            got: list[int] = []

            def waiter() -> None:
                b = store.lock("cc/zk", ttl=30, timeout=20)
                b.acquire()
                assert b.fence is not None
                got.append(b.fence)
                b.release()

            t = threading.Thread(target=waiter)
            t.start()
            time.sleep(0.5)
            a.release()
            t.join(20)
            assert got and f1 is not None and got[0] > f1
        assert zk.connected  # the store did not stop the caller's client
        assert zk.exists("/") is not None
        assert len(zk.state_listeners) == listeners  # its state listener went with the store
        with pytest.raises(distlock.ConfigError, match="session_timeout"):
            distlock.connect(client=zk, session_timeout=5)
    finally:
        zk.stop()
        zk.close()
    with pytest.raises(distlock.ConfigError, match=r"start\(\) it"):
        distlock.connect(client=zk)


def test_kazoo_client_on_the_async_store(zookeeper_url: str) -> None:
    zk = _kazoo(zookeeper_url)

    async def main() -> None:
        async with await distlock.connect_async(zookeeper_url.split("?")[0], client=zk) as store:
            async with store.lock("cc/zk-async") as lock:
                assert lock.fence is not None

    try:
        asyncio.run(main())
        assert zk.connected and zk.exists("/") is not None
    finally:
        zk.stop()
        zk.close()


def test_psycopg_pool_lends_its_parameters_and_is_left_open(postgres_url: str, name: str) -> None:
    """distlock opens connections of its own from the pool's conninfo (it discards one whose call timed out
    and pins one per holding in session mode, which must never happen to a pool's), and never closes the pool."""
    import psycopg
    from psycopg_pool import ConnectionPool

    params = distlock._url.parse_url(postgres_url)
    host, port = params.hosts[0]
    conninfo = f"host={host} port={port} dbname={params.path.lstrip('/')} user={params.username}"
    pool = ConnectionPool(conninfo, kwargs={"password": params.password}, min_size=1, max_size=2, open=True)
    try:
        with distlock.connect(client=pool) as store:
            assert "postgresql://" in repr(store) and str(params.password) not in repr(store)
            lock = store.lock(name)
            assert lock.acquire(timeout=5) and lock.fence is not None
            first = lock.fence
            lock.release()
            with distlock.connect(postgres_url) as other:
                assert other.lock(name).acquire(timeout=5)  # the same server and tables
                assert store.lock(name).acquire(timeout=0.2) is False
            assert lock.acquire(timeout=5) and lock.fence > first
            assert pool.get_stats().get("requests_num", 0) == 0  # none of the pool's connections was used
            lock.release()
        with pool.connection() as conn:  # the store left the pool open and working
            assert conn.execute("SELECT 1").fetchone() == (1,)
        single = psycopg.connect(postgres_url)
        try:
            with pytest.raises(distlock.ConfigError, match="takes a psycopg_pool pool") as err:
                distlock.connect(client=single)
            assert "\n" not in str(err.value)
            assert not single.closed
        finally:
            single.close()
    finally:
        pool.close()


async def test_psycopg_async_pool_on_the_async_store(postgres_url: str, name: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    params = distlock._url.parse_url(postgres_url)
    host, port = params.hosts[0]
    conninfo = f"host={host} port={port} dbname={params.path.lstrip('/')} user={params.username}"
    pool = AsyncConnectionPool(conninfo, kwargs={"password": params.password}, min_size=1, open=False)
    await pool.open()
    try:
        store = await distlock.connect_async(client=pool)
        try:
            lock = store.lock(name)
            assert await lock.acquire(timeout=5)
            await lock.release()
        finally:
            await store.aclose()
        async with pool.connection() as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
    finally:
        await pool.close()

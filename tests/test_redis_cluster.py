"""Redis Cluster (3 masters, ``tools/servers/redis_cluster.py``): every key of a lock is in the name's hash
slot (asked of the server: ``CLUSTER KEYSLOT``, and where the keys actually are after the scripts ran), names
that would split across slots are refused, renewal pipelines over several masters, wake-ups reach a waiter
whose pub/sub connection is on another master, and the ``cluster`` URL option."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis.exceptions import MovedError, ResponseError

import distlock
from distlock import BackendError, ConfigError
from distlock._backends.redis import keys as rk
from tools.servers.redis_cluster import RedisCluster, redis_cluster

#: names with no '}' (braces, unicode, separators): all keys must share the name's slot
GOOD = ["plain", "jobs/nightly", "x{y", "{", "{{a", "ünïcödé-名前", "a:b:c", "t" * 300]
#: names with '}' whose keys would fall in different slots
BAD = ["user:{42}", "a}b", "{tag}rest"]


@pytest.fixture
def cluster(redis_cluster_servers: RedisCluster) -> RedisCluster:
    return redis_cluster_servers


@pytest.fixture
def store(cluster: RedisCluster) -> Iterator[distlock.Store]:
    with distlock.connect(cluster.url) as s:
        yield s


def _slot(cluster: RedisCluster, key: str) -> int:
    return int(cluster.client(0).execute_command("CLUSTER", "KEYSLOT", key))


def _owner(cluster: RedisCluster, slot: int) -> int:
    """Index of the node that serves ``slot``."""
    for start, end, primary, *_ in cluster.client(0).execute_command("CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end):
            return next(i for i, n in enumerate(cluster.nodes) if n.port == int(primary[1]))
    raise AssertionError(f"slot {slot} is not served")


def _keys_on(cluster: RedisCluster, i: int, name: str) -> set[str]:
    found = set()
    with cluster.client(i) as c:
        for raw in c.scan_iter(count=1000):
            key = raw.decode()
            if key == name or key.startswith("{" + name + "}:"):
                found.add(key)
    return found


@pytest.mark.parametrize("lock_name", GOOD)
def test_every_key_of_a_name_is_in_the_slot_of_the_name(cluster: RedisCluster, lock_name: str) -> None:
    want = _slot(cluster, lock_name)
    keys = rk.keys(lock_name, cluster=True)  # the slot's fence counter included
    assert {k: _slot(cluster, k) for k in keys} == dict.fromkeys(keys, want)


@pytest.mark.parametrize("lock_name", BAD)
def test_the_refused_names_would_really_split_across_slots(cluster: RedisCluster, lock_name: str) -> None:
    assert len({_slot(cluster, k) for k in rk.keys(lock_name, cluster=True)}) > 1


def test_the_scripts_leave_every_key_on_the_master_of_the_name(cluster: RedisCluster, store: distlock.Store) -> None:
    """Holders of every kind plus a queued waiter write all seven kinds of keys; they must all be on the one
    master that serves the name's slot (a script touching another slot would have failed with CROSSSLOT)."""
    for base in ("kinds-a", "kinds-b", "kinds-c", "kinds-{x"):
        home = _owner(cluster, _slot(cluster, base))
        w = store.lock(base, ttl=30)
        assert w.acquire(timeout=5)
        blocked = store.lock(base, ttl=30)
        assert not blocked.acquire(timeout=0.2)  # the queue scripts ran on the name's master (no CROSSSLOT)
        rw = store.rwlock(base + "-rw", ttl=30)
        assert rw.read.acquire(timeout=5)
        sem = store.semaphore(base + "-sem", permits=2, ttl=30)
        assert sem.acquire(timeout=5)
        for n in (base, base + "-rw", base + "-sem"):
            where = {i: _keys_on(cluster, i, n) for i in range(len(cluster.nodes))}
            assert where[_owner(cluster, _slot(cluster, n))], n  # the holder's keys are there ...
            assert not any(keys for i, keys in where.items() if i != _owner(cluster, _slot(cluster, n))), where
        assert _owner(cluster, _slot(cluster, rk.counter_key(base, cluster=True))) == home
        w.release()
        rw.read.release()
        sem.release()


@pytest.mark.parametrize("lock_name", BAD)
def test_names_that_split_across_slots_are_refused_and_write_nothing(
    cluster: RedisCluster, store: distlock.Store, lock_name: str
) -> None:
    with pytest.raises(ConfigError, match="may not contain '}'"):
        store.lock(lock_name).acquire(timeout=1)
    with pytest.raises(ConfigError):
        store.inspect(lock_name)
    with pytest.raises(ConfigError):
        store.break_lock(lock_name)
    with pytest.raises(ConfigError):
        store.multilock(["fine-name", lock_name]).acquire(timeout=1)
    assert not any(_keys_on(cluster, i, lock_name) for i in range(len(cluster.nodes)))
    assert store.inspect("fine-name") is None  # the multilock took nothing


def test_brace_names_work_on_a_single_node_too(redis_url: str) -> None:
    """The refusal is cluster-only: a single node has no slots."""
    with distlock.connect(redis_url) as s, s.lock("user:{42}", ttl=5) as lk:
        assert lk.fence is not None


def test_renewal_pipeline_spans_every_master(cluster: RedisCluster, store: distlock.Store) -> None:
    names: dict[int, str] = {}
    i = 0
    while len(names) < len(cluster.nodes):
        n = f"renew-{i}"
        names.setdefault(_owner(cluster, _slot(cluster, n)), n)
        i += 1
    locks = [store.lock(n, ttl=1.0) for n in names.values()]
    for lk in locks:
        assert lk.acquire(timeout=5)
    time.sleep(3.0)  # three TTLs: only renewal (one pipeline over the three masters per tick) keeps them
    for lk in locks:
        assert not lk.lost.is_set()
        assert lk.owned()
        lk.release()


def test_waiter_is_woken_on_a_name_served_by_another_master(cluster: RedisCluster, store: distlock.Store) -> None:
    """The waiter's store listens on the master of its first channel; the names live on all three. Classic
    PUBLISH is broadcast over the cluster bus, so every release reaches it, and each waiter gets the lock."""
    names: dict[int, str] = {}
    i = 0
    while len(names) < len(cluster.nodes):
        n = f"wake-{i}"
        names.setdefault(_owner(cluster, _slot(cluster, n)), n)
        i += 1
    with distlock.connect(cluster.url) as other:
        for n in names.values():
            held = store.lock(n, ttl=30)
            assert held.acquire(timeout=5)
            got: list[int | None] = []
            waiter = other.lock(n, ttl=30)

            def wait(w: distlock.Lock = waiter, got: list[int | None] = got) -> None:
                if w.acquire(timeout=20):
                    got.append(w.fence)
                    w.release()  # the owner is this thread
                else:
                    got.append(None)

            t = threading.Thread(target=wait)
            t.start()
            deadline = time.monotonic() + 10
            while (info := store.inspect(n)) is None or info.waiters == 0:
                assert time.monotonic() < deadline, "the waiter never queued"
                time.sleep(0.02)
            fence = held.fence
            held.release()
            t.join(30)
            assert got and got[0] is not None and fence is not None and got[0] > fence


def test_cluster_option(cluster: RedisCluster, redis_url: str) -> None:
    # forced off against a cluster node: names served by the other masters answer MOVED -> BackendError
    with distlock.connect(cluster.url + "?cluster=false") as plain:
        assert not plain._backend.node.cluster  # type: ignore[attr-defined]
        elsewhere = next(f"moved-{i}" for i in range(1000) if _owner(cluster, _slot(cluster, f"moved-{i}")) != 0)
        with pytest.raises(BackendError) as moved:
            plain.lock(elsewhere).acquire(timeout=1)
        # MOVED, or CROSSSLOT: a single node's one fence counter is in a slot of its own
        assert isinstance(moved.value.__cause__, (MovedError, ResponseError))
    with distlock.connect(cluster.url + "?cluster=true") as forced, forced.lock("forced", ttl=5) as lk:
        assert lk.fence is not None
    with pytest.raises(BackendError):  # a single node is not a cluster
        distlock.connect(redis_url + "?cluster=true&connect_timeout=2")
    with pytest.raises(ConfigError, match="database 0"):
        distlock.connect(cluster.url.rsplit("/", 1)[0] + "/1?cluster=true")
    with pytest.raises(ConfigError):
        distlock.connect(cluster.url + "?cluster=maybe")


async def test_async_store_on_the_cluster(cluster: RedisCluster) -> None:
    store = await distlock.connect_async(cluster.url)
    try:
        async with store.lock("async-cl", ttl=5) as lk:
            assert lk.fence is not None
            infos = await store.list("async-cl")
            assert [i.name for i in infos] == ["async-cl"]
        with pytest.raises(ConfigError):
            await store.lock("a}b").acquire(timeout=1)
    finally:
        await store.aclose()


def test_list_finds_names_on_every_master(cluster: RedisCluster, store: distlock.Store) -> None:
    names = [f"listed-{i}" for i in range(12)]
    assert len({_owner(cluster, _slot(cluster, n)) for n in names}) == len(cluster.nodes)
    locks = [store.lock(n, ttl=30) for n in names]
    for lk in locks:
        assert lk.acquire(timeout=5)
    assert [i.name for i in store.list("listed-")] == sorted(names)
    for lk in locks:
        lk.release()


def _move_slot(cluster: RedisCluster, slot: int, dst: int) -> None:
    """Reshard: move ``slot`` (with its keys) to node ``dst``, the way ``redis-cli --cluster reshard`` does."""
    src = _owner(cluster, slot)
    ids = [cluster.client(i).execute_command("CLUSTER", "MYID").decode() for i in range(len(cluster.nodes))]
    a, b = cluster.client(src), cluster.client(dst)
    b.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
    a.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
    while keys := a.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
        a.execute_command("MIGRATE", "127.0.0.1", cluster.nodes[dst].port, "", 0, 5000, "KEYS", *keys)
    for i in range(len(cluster.nodes)):
        cluster.client(i).execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[dst])


@pytest.mark.parametrize("side", ["sync", "async"])
async def test_a_resharded_slot_is_followed_and_keeps_its_fence(cluster: RedisCluster, side: str) -> None:
    """distlock sends a name's scripts straight to the master it last knew for the slot; after the slot moved
    that master answers MOVED, and the call goes through redis-py's routing (which learns the new map)."""
    n = f"moving-{side}"
    slot = _slot(cluster, n)
    dst = (_owner(cluster, slot) + 1) % len(cluster.nodes)
    if side == "sync":

        def sync_side() -> tuple[int, int, int]:  # in a thread: a sync store must not block the event loop
            with distlock.connect(cluster.url) as store:
                with store.lock(n, ttl=30) as lk:
                    before = lk.fence
                _move_slot(cluster, slot, dst)
                with store.lock(n, ttl=30) as lk:
                    after = lk.fence
                    assert store.inspect(n) is not None
                with store.lock(n, ttl=30) as lk:
                    last = lk.fence
            return before, after, last

        before, after, last = await asyncio.to_thread(sync_side)
    else:
        astore = await distlock.connect_async(cluster.url)
        try:
            async with astore.lock(n, ttl=30) as alk:
                before = alk.fence
            _move_slot(cluster, slot, dst)
            async with astore.lock(n, ttl=30) as alk:
                after = alk.fence
                assert await astore.inspect(n) is not None
            async with astore.lock(n, ttl=30) as alk:
                last = alk.fence
        finally:
            await astore.aclose()
    assert _owner(cluster, slot) == dst
    assert _keys_on(cluster, dst, n) == set()  # released: nothing of the name stays
    assert cluster.client(dst).exists(rk.counter_key(n, cluster=True))  # the slot's counter moved with it
    assert before is not None and after is not None and last is not None
    assert before < after < last  # the fence counter moved with the slot


def test_wake_ups_follow_a_failover_of_the_listeners_node() -> None:
    """The store's one pub/sub connection sits on one master. When that master dies and its replica takes
    over, the listener moves to where the slot map now points and subscribes again: waiters are pushed
    again (not just re-checking every 2 s)."""
    with redis_cluster(3, replicas=True) as cl:
        by_master: dict[int, str] = {}
        i = 0
        while 0 not in by_master or 1 not in by_master:
            n = f"failover-{i}"
            by_master.setdefault(_owner(cl, _slot(cl, n)), n)
            i += 1
        first, second = by_master[0], by_master[1]
        with distlock.connect(cl.url) as holders, distlock.connect(cl.url) as waiters:
            listener = waiters._backend.node.listener  # type: ignore[attr-defined]
            for n in (first, second):
                held = holders.lock(n, ttl=30)
                assert held.acquire(timeout=5)
                got: list[bool] = []

                def wait(n: str = n, got: list[bool] = got) -> None:
                    lk = waiters.lock(n, ttl=30)
                    got.append(lk.acquire(timeout=30))
                    lk.release()

                t = threading.Thread(target=wait)
                t.start()
                deadline = time.monotonic() + 20
                while listener.live(rk.channel(n)) is None:  # the waiter is subscribed (pushed, not polling)
                    assert time.monotonic() < deadline, f"no live subscription for {n}"
                    time.sleep(0.05)
                held.release()
                t.join(40)
                assert got == [True]
                if n == first:  # the pub/sub connection is on master 0 (the slot of the first channel): kill it
                    cl.nodes[0].kill()
                    deadline = time.monotonic() + 30
                    while True:
                        with contextlib.suppress(redis.RedisError):
                            if (
                                cl.client(3).info("replication")["role"] == "master"
                                and cl.client(1).cluster("INFO").get("cluster_state") == "ok"
                            ):
                                break
                        assert time.monotonic() < deadline, "no failover"
                        time.sleep(0.2)


async def test_wake_ups_follow_a_failover_of_the_listeners_node_async() -> None:
    """The same on the asyncio side (the listener is a task there)."""
    import asyncio

    with redis_cluster(3, replicas=True) as cl:
        by_master: dict[int, str] = {}
        i = 0
        while 0 not in by_master or 1 not in by_master:
            n = f"afailover-{i}"
            by_master.setdefault(_owner(cl, _slot(cl, n)), n)
            i += 1
        holders = await distlock.connect_async(cl.url)
        waiters = await distlock.connect_async(cl.url)
        try:
            listener = waiters._backend.node.listener  # type: ignore[attr-defined]
            for n in (by_master[0], by_master[1]):
                held = holders.lock(n, ttl=30)
                assert await held.acquire(timeout=5)

                async def wait(n: str = n) -> bool:
                    lk = waiters.lock(n, ttl=30)
                    ok = await lk.acquire(timeout=30)
                    await lk.release()
                    return ok

                task = asyncio.ensure_future(wait())
                deadline = time.monotonic() + 20
                while listener.live(rk.channel(n)) is None:
                    assert time.monotonic() < deadline, f"no live subscription for {n}"
                    await asyncio.sleep(0.05)
                await held.release()
                assert await asyncio.wait_for(task, 40)
                if n == by_master[0]:
                    cl.nodes[0].kill()
                    deadline = time.monotonic() + 30
                    while True:
                        with contextlib.suppress(redis.RedisError):
                            if (
                                cl.client(3).info("replication")["role"] == "master"
                                and cl.client(1).cluster("INFO").get("cluster_state") == "ok"
                            ):
                                break
                        assert time.monotonic() < deadline, "no failover"
                        await asyncio.sleep(0.2)
        finally:
            await waiters.aclose()
            await holders.aclose()


def test_wait_replicas_on_a_cluster_waits_per_master_and_refuses_what_a_replica_never_saw() -> None:
    """``wait_replicas=1`` on Redis Cluster: the acquire and its ``WAIT`` go to the master of the name's slot on
    one connection (``WAIT`` counts that connection's writes), so names on every master are granted once their
    replica has them, and renewal batches over several masters wait on each. A master whose replica does not
    answer (SIGSTOP): its names are refused with a one-line error and left free (released), the others are
    not affected; a holding there is not renewed past what the replica acknowledged, so the holder's ``lost``
    fires at its local lease end although the master alone still holds the key."""
    with redis_cluster(3, replicas=True) as cl:
        by_master: dict[int, str] = {}
        i = 0
        while len(by_master) < 3:
            n = f"wr-{i}"
            by_master.setdefault(_owner(cl, _slot(cl, n)), n)
            i += 1
        with distlock.connect(cl.url + "?wait_replicas=1&wait_timeout=300") as store:
            held = [store.lock(by_master[m], ttl=2) for m in range(3)]
            for lk in held:
                assert lk.acquire(timeout=5) and lk.fence is not None
            for m in range(3):  # every replica has its master's lock key
                with cl.client(3 + m) as replica:
                    assert replica.execute_command("READONLY") and replica.get(by_master[m]) is not None
            time.sleep(2.5)  # renewals (one batch over the three masters, each with its WAIT) keep them all
            assert all(lk.owned() and not lk.lost.is_set() for lk in held)
            for lk in held:
                lk.release()
            cl.nodes[3].pause()  # master 0's replica stops acknowledging
            try:
                with pytest.raises(BackendError, match="replicas acknowledged") as err:
                    store.lock(by_master[0], ttl=5).acquire(timeout=2)
                assert "\n" not in str(err.value)
                assert store.inspect(by_master[0]) is None  # released: nobody holds it
                with store.lock(by_master[1], ttl=5) as other:  # another master's names are not affected
                    assert other.fence is not None
            finally:
                cl.nodes[3].resume()
            holder = store.lock(by_master[0], ttl=2)
            assert holder.acquire(timeout=5)
            cl.nodes[3].pause()
            try:
                assert holder.lost.wait(2 + 5)  # not renewed past the acknowledged expiry
            finally:
                cl.nodes[3].resume()

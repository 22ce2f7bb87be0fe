"""Every name isolated, on real servers: the names a layout cannot keep apart are refused when the lock object is
built, a longer name never stands in a shorter one's queue, and on Redis a script that meets a key of another type
refuses before it writes anything (tests/test_name_isolation.py checks the layouts themselves)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

import distlock
from distlock import BackendError, ConfigError
from distlock._backends.redis import keys as rk

#: every way a name reaches a backend: the lock kinds and the admin calls
BUILDERS: dict[str, Callable[[distlock.Store, str], object]] = {
    "lock": lambda s, n: s.lock(n),
    "rlock": lambda s, n: s.rlock(n),
    "rwlock": lambda s, n: s.rwlock(n),
    "semaphore": lambda s, n: s.semaphore(n, permits=2),
    "multilock": lambda s, n: s.multilock(["plain-" + uuid.uuid4().hex[:8], n]),
    "election": lambda s, n: s.election(n),
    "latch": lambda s, n: s.latch(n, count=1),
    "barrier": lambda s, n: s.barrier(n, 2),
    "double_barrier": lambda s, n: s.double_barrier(n, 2),
    "once": lambda s, n: s.once(n),
    "at_most_once": lambda s, n: s.at_most_once(n),
    "inspect": lambda s, n: s.inspect(n),
    "break_lock": lambda s, n: s.break_lock(n),
    "request_release": lambda s, n: s.request_release(n),
}


def assert_refused(store: distlock.Store, name: str) -> None:
    for kind, build in BUILDERS.items():
        with pytest.raises(ConfigError) as err:
            build(store, name)
        assert "\n" not in str(err.value), (kind, str(err.value))
        assert err.value.name == name, kind


@pytest.fixture
def base() -> str:
    return f"n-{uuid.uuid4().hex[:12]}"


# -- etcd ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("marker", ["write", "read", "sem"])
def test_etcd_a_name_ending_in_a_mode_marker_is_refused(etcd_url: str, base: str, marker: str) -> None:
    """``jobs/write`` would write ``jobs/write/<lease>``: the key of a writer of the read-write lock ``jobs``, so
    holding it blocked ``lock("jobs")``, ``rwlock("jobs")`` and ``semaphore("jobs")`` and inspect reported it."""
    with distlock.connect(etcd_url) as store:
        assert_refused(store, f"{base}/{marker}")
        # a longer name that is no marker is its own lock: nobody of the shorter name waits for it or sees it
        with store.lock(f"{base}/{marker}er", ttl=10):
            assert store.inspect(base) is None
            for lk in (store.lock(base), store.rwlock(base).write, store.semaphore(base, permits=1)):
                assert lk.acquire(timeout=5)
                lk.release()


# -- ZooKeeper -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("internal", ["locks", "leases"])
def test_zookeeper_a_semaphore_s_internal_node_is_refused_as_a_name(
    zookeeper_url: str, base: str, internal: str
) -> None:
    """``jobs/locks`` and ``jobs/leases`` are the nodes of the semaphore ``jobs`` (Curator's InterProcessSemaphoreV2
    layout): a lock there put its queue nodes among the semaphore's and blocked it."""
    with distlock.connect(zookeeper_url) as store:
        assert_refused(store, f"{base}/{internal}")
        assert_refused(store, f"{base}/_c_0b9b1a4e-7d5c-4c3e-9a7e-1d2c3b4a5f6e-lock-0000000001")  # a queue node
        assert_refused(store, "/distlock")  # the root, where every name lives


def test_zookeeper_longer_names_take_no_place_in_a_semaphore(zookeeper_url: str, base: str) -> None:
    """Locks below the semaphore's own nodes (``jobs/leases/x``, ``jobs/locks/0``) are paths of their own: the
    semaphore counted every child of ``leases`` as a permit and queued behind every child of ``locks``."""
    with distlock.connect(zookeeper_url) as a, distlock.connect(zookeeper_url) as b:
        with a.lock(f"{base}/leases/x", ttl=10), a.lock(f"{base}/locks/0", ttl=10):
            sem = b.semaphore(base, permits=1, ttl=10)
            assert sem.acquire(timeout=5)
            try:
                info = b.inspect(base)
                assert info is not None and info.kind == "semaphore" and len(info.holders) == 1
                listed = {i.name: i.kind for i in b.list(base)}
                assert listed == {base: "semaphore", f"{base}/leases/x": "lock", f"{base}/locks/0": "lock"}
            finally:
                sem.release()


def test_zookeeper_a_longer_name_is_not_in_the_shorter_one_s_queue(zookeeper_url: str, base: str) -> None:
    """The path of ``jobs/0`` is a child of ``jobs``'s path: the lock ``jobs`` counted it as a contender, sorted
    before every queue node ("0" < "0000000001"), and waited for it while it was held."""
    with distlock.connect(zookeeper_url) as a, distlock.connect(zookeeper_url) as b:
        with a.lock(f"{base}/0", ttl=10), a.lock(f"{base}/+", ttl=10):
            for lk in (b.lock(base, ttl=10), b.rwlock(base, ttl=10).write, b.rwlock(base, ttl=10).read):
                assert lk.acquire(timeout=5)
                assert b.inspect(base) is not None
                lk.release()
            assert b.inspect(base) is None
            el = b.election(base, ttl=10)
            assert el.campaign(timeout=5)
            assert b.leader(base) is not None
            el.resign()


# -- Redis -----------------------------------------------------------------------------------------------
def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5)


def keys_with(client: redis.Redis, text: str) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match="*" + text + "*", count=1000))


@pytest.fixture
def counter(redis_url: str) -> Iterator[str]:
    """A fence counter of the test's own (``?fence_counter=``), so what a script writes to it shows."""
    key = f"c-{uuid.uuid4().hex[:12]}:fences"
    yield key
    r = raw(redis_url)
    r.delete(key)
    r.close()


def test_redis_a_name_shaped_like_a_key_of_the_store_is_refused(redis_url: str, base: str, counter: str) -> None:
    """``{job}:i`` and the like are keys of the name ``job``; ``distlock:fences`` (and a ``?fence_counter=``) is
    the fence counter: a lock on one of them made every acquire of ``job`` (or every acquire) fail half-way."""
    with distlock.connect(f"{redis_url}?fence_counter={counter}") as store:
        for suffix in ("i", "q", "r", "p", "qd", "qa", "qw", "fence"):
            assert_refused(store, "{" + base + "}:" + suffix)
        assert_refused(store, rk.NODE_COUNTER)
        assert_refused(store, counter)
        with store.lock("{" + base + "}:wake", ttl=10), store.lock(base, ttl=10) as lk:  # both are names
            assert lk.fence is not None


#: a value of another type than distlock keeps at each key of the script call (by its index in ``rk.keys``)
WRONG = {0: "hash", 1: "string", 2: "string", 3: "string", 4: "string", 5: "hash", 6: "hash", 7: "string",
         8: "string", 9: "zset"}  # fmt: skip


def _put(r: redis.Redis, key: str, kind: str) -> None:
    if kind == "string":
        r.set(key, "someone else's")
    elif kind == "hash":
        r.hset(key, "f", "someone else's")
    else:
        r.zadd(key, {"someone else's": 1})


@pytest.mark.parametrize("index", sorted(WRONG))
def test_redis_a_key_of_another_type_fails_the_acquire_before_it_writes(
    redis_url: str, base: str, counter: str, index: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A key of the name (or the counter) that something else made with another type: the acquire fails with a
    one-line error and leaves nothing behind. Before, the script failed at that key with Redis's raw WRONGTYPE,
    after the writes it had made (the name's key, its queue entries, the counter's marker), which stayed."""
    key = rk.keys(base, counter=counter)[index]
    r = raw(redis_url)
    try:
        _put(r, key, WRONG[index])
        with distlock.connect(f"{redis_url}?fence_counter={counter}") as store:
            with pytest.raises(BackendError, match="DISTLOCK-WRONGTYPE") as err:
                store.lock(base, ttl=10).acquire(blocking=False)
            assert "\n" not in str(err.value) and key in str(err.value)
            assert keys_with(r, base) == ([] if key == counter else [key])
            assert r.exists(counter) == (key == counter)
        assert "could not clean up" not in caplog.text  # nothing was written, so there is nothing to clean up
    finally:
        r.delete(key)
        r.close()


def test_redis_a_waiter_that_meets_a_key_of_another_type_leaves_no_queue_entry(
    redis_url: str, base: str, counter: str
) -> None:
    """A waiter behind a holder (a redis-py Lock) whose hand-over record key is of another type: before, its
    script queued it (``{N}:q``, ``{N}:qd``) and then failed, and the entries stayed with nobody refreshing them."""
    r = raw(redis_url)
    handover = rk.keys(base)[8]
    try:
        r.set(base, "redis-py token", px=30_000)
        r.set(handover, "someone else's")
        with distlock.connect(f"{redis_url}?fence_counter={counter}") as store:
            with pytest.raises(BackendError, match="DISTLOCK-WRONGTYPE"):
                store.lock(base, ttl=10).acquire(timeout=2)
        assert keys_with(r, base) == sorted([base, handover])
    finally:
        r.delete(base, handover)
        r.close()


def test_redis_cluster_refuses_the_per_slot_counters_and_key_shapes(redis_cluster_url: str, base: str) -> None:
    with distlock.connect(redis_cluster_url) as store:
        assert_refused(store, rk.counter_key(base, True))  # distlock:fences:{<tag>}, the counter of base's slot
        assert_refused(store, "{" + base + "}:i")
        with store.lock(base, ttl=10) as lk:
            assert lk.fence is not None


# -- MySQL GET_LOCK (mode=session) -----------------------------------------------------------------------
def test_mysql_session_refuses_the_get_lock_name_of_a_long_name_and_the_companion_locks(mysql_url: str) -> None:
    """``~`` + base64url(SHA-256) is what a name longer than 64 characters locks: as a name of its own it shared
    that name's lock. ``distlock-bell:...`` are the lease mode's companion locks on the same server."""
    from distlock._backends.sql import names as sn

    long = "n-" + uuid.uuid4().hex * 3
    with distlock.connect(f"{mysql_url}?mode=session") as store:
        mapped = sn.get_lock_name(long)
        with pytest.raises(ConfigError):
            store.lock(mapped)
        with pytest.raises(ConfigError):
            store.lock(sn.bell_name(sn.name_key(long)))
        with store.lock(long, ttl=10) as held:  # the long name itself is a lock like any other
            assert held.fence is not None

"""Fences on Redis, Redis Cluster and Redlock: nothing of a released name stays on a server, fences of a
reused name keep going up (release, break_lock, a restart that keeps data), a lost counter is noticed, a
0.1.0 per-name counter is honoured and removed. Real redis-server processes only."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster as RedisClusterClient

import distlock
from distlock import ConfigError
from distlock._backends.redis import calls as rc
from distlock._backends.redis import keys as rk
from distlock._backends.redis import lua
from tools.servers.proc import ServerProc
from tools.servers.redis import DURABLE, redis_masters, redis_server, redlock_url, restart
from tools.servers.redis_cluster import RedisCluster


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5)


def keys_with(client: redis.Redis, text: str) -> list[str]:
    return sorted(k.decode() for k in client.scan_iter(match="*" + text + "*", count=1000))


def taken(store: distlock.Store, name: str, n: int) -> list[int | None]:
    """The fences of ``n`` acquisitions of ``name``, one after another, each released at once."""
    fences: list[int | None] = []
    for _ in range(n):
        with store.lock(name, ttl=10) as lk:
            fences.append(lk.fence)
    return fences


def churn(store: distlock.Store, prefix: str, n: int, kinds: bool = True) -> None:
    """``n`` fresh names, each taken and released; every few names another kind of lock, a contender that
    queues and gives up, a reentrant re-acquire."""
    for i in range(n):
        name = f"{prefix}{i}"
        k = i % 5 if kinds else 0
        if k == 0:
            with store.lock(name, ttl=10) as lk:
                assert not store.lock(name, ttl=10).acquire(timeout=0.01)  # queued, then abandoned
                assert lk.fence is not None
        elif k == 1:
            rl = store.rlock(name, ttl=10)
            with rl:
                fence = rl.fence
                with rl:
                    assert rl.fence == fence  # a reentrant re-acquire keeps its fence
        elif k == 2:
            rw = store.rwlock(name, ttl=10)
            with rw.read, store.rwlock(name, ttl=10).read:
                pass
            with rw.write:
                pass
        elif k == 3:
            with store.semaphore(name, permits=2, ttl=10):
                pass
        else:
            lk = store.lock(name, ttl=10)
            assert lk.acquire()
            store.break_lock(name)
            assert lk.lost.wait(5)


# -- one node ---------------------------------------------------------------------------------------------
@pytest.fixture
def own_server() -> Iterator[ServerProc]:
    with redis_server() as srv:
        yield srv


def test_churn_over_fresh_names_leaves_no_key(redis_url: str) -> None:
    prefix = f"churn-{uuid.uuid4().hex[:8]}-"
    with distlock.connect(redis_url) as store:
        churn(store, prefix, 200)
    r = raw(redis_url)
    try:
        assert keys_with(r, prefix) == []  # 0.1.0 left one {N}:fence per name
        assert r.type(rk.NODE_COUNTER) == b"hash"  # the one counter of the store
    finally:
        r.close()


def test_fences_of_a_reused_name_go_up_after_release_and_break(redis_url: str, name: str) -> None:
    fences = []
    with distlock.connect(redis_url) as store:
        for _ in range(3):
            with store.lock(name, ttl=10) as lk:
                fences.append(lk.fence)
        lk = store.lock(name, ttl=10)
        assert lk.acquire()
        fences.append(lk.fence)
        assert store.break_lock(name)
        with store.lock(name, ttl=10) as lk:
            fences.append(lk.fence)
        with store.rwlock(name, ttl=10).read:
            pass
    assert all(isinstance(f, int) for f in fences)
    assert fences == sorted(fences) and len(set(fences)) == len(fences), fences


def test_fences_go_up_across_a_restart_that_keeps_data(name: str) -> None:
    with redis_server(*DURABLE) as srv:
        with distlock.connect(srv.url) as store:
            with store.lock(name, ttl=10) as lk:
                before = lk.fence
            restart(srv)
            with store.lock(name, ttl=10) as lk:  # the same store: the marker survived, no refusal
                after = lk.fence
        with distlock.connect(srv.url) as store, store.lock(name, ttl=10) as lk:
            last = lk.fence
        r = raw(srv.url)
        assert keys_with(r, name) == []
        r.close()
    assert before is not None and after is not None and last is not None
    assert before < after < last


def test_a_flushed_counter_starts_again_above_every_earlier_fence(
    own_server: ServerProc, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A flush (or eviction, or a restart without persistence) takes the counter: the running store goes on
    locking (it used to refuse every acquire until restarted), a store opened afterwards too, and neither
    hands out a fence at or below one handed out before: the counter starts again from the server clock. The
    running store says so once, as a warning."""
    with distlock.connect(own_server.url) as store:
        fences = taken(store, name, 3)
        r = raw(own_server.url)
        r.flushall()
        r.close()
        with caplog.at_level(logging.WARNING, logger="distlock"):
            fences += taken(store, name, 2)
        lost = [m for m in caplog.messages if "fence counter" in m and "was lost" in m]
        assert len(lost) == 1 and "\n" not in lost[0], caplog.messages
        with distlock.connect(own_server.url) as fresh, fresh.lock(name, ttl=10) as lk:
            fences.append(lk.fence)
    assert all(isinstance(f, int) for f in fences)
    assert fences == sorted(fences) and len(set(fences)) == len(fences), fences


def test_a_counter_that_went_back_still_hands_out_higher_fences(own_server: ServerProc, name: str) -> None:
    """The state a failover to a replica that had not received the last increments leaves (or a restart from
    an older snapshot): the counter is there, with its marker, but behind the fences handed out. Counting
    from it would hand those fences out again; the clock floor keeps every fence above them."""
    with distlock.connect(own_server.url) as store:
        fences = taken(store, name, 3)
        r = raw(own_server.url)
        try:
            assert fences[0] is not None
            r.hset(rk.NODE_COUNTER, "n", fences[0] - 1)  # behind, the marker kept: nothing to notice
            fences += taken(store, name, 2)
        finally:
            r.close()
    assert all(isinstance(f, int) for f in fences)
    assert fences == sorted(fences) and len(set(fences)) == len(fences), fences


def test_an_old_per_name_fence_key_is_honoured_and_removed(redis_url: str, name: str) -> None:
    r = raw(redis_url)
    try:
        r.set(rk.fence_key(name), 5_000_000)  # what 0.1.0 left behind
        with distlock.connect(redis_url) as store:
            with store.lock(name, ttl=10) as lk:
                first = lk.fence
                assert first is not None and first > 5_000_000
                assert not r.exists(rk.fence_key(name))  # folded into the counter, gone
            with store.lock(name + "-other", ttl=10) as other:
                assert other.fence is not None and other.fence > first  # the counter never goes back
        assert keys_with(r, name) == []
    finally:
        r.close()


def test_allkeys_eviction_policy_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with redis_server("--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru") as srv:
        with caplog.at_level(logging.WARNING, logger="distlock"), distlock.connect(srv.url):
            pass
    found = [r.getMessage() for r in caplog.records if "maxmemory-policy" in r.getMessage()]
    assert found and "allkeys-lru" in found[0] and "\n" not in found[0]


def test_noeviction_is_not_warned_about(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="distlock"), distlock.connect(redis_url):
        pass
    assert not [r for r in caplog.records if "maxmemory-policy" in r.getMessage()]


def test_a_server_an_old_client_used_is_refused(own_server: ServerProc, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.1.0 clients leave their acquire script in the server's script cache. (The test loads a stand-in
    script and points the check at its SHA; the real one is 0.1.0's acquire script.)"""
    r = raw(own_server.url)
    sha = r.script_load("return 'distlock 0.1.0 stand-in'")
    monkeypatch.setattr(lua, "OLD_ACQUIRE_SHA", sha)
    with pytest.raises(ConfigError, match=r"0\.1\.0") as err:
        distlock.connect(own_server.url)
    assert "\n" not in str(err.value)
    r.script_flush()
    r.close()
    with distlock.connect(own_server.url) as store, store.lock("after-flush", ttl=5):
        pass


# -- fence_counter: the store's counter under a key of its own ------------------------------------------------
@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("fence_counter=", "must not be empty"),
        ("fence_counter=app/%00fences", "control characters"),
        ("fence_counter=app/%0Afences", "control characters"),
    ],
)
@pytest.mark.parametrize(
    "scheme", ["redis://127.0.0.1:1/0", "unix:///nowhere.sock", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"]
)
def test_a_bad_fence_counter_is_a_one_line_config_error(scheme: str, query: str, why: str) -> None:
    sep = "&" if "?" in scheme else "?"
    with pytest.raises(ConfigError, match=why) as err:
        distlock.connect(scheme + sep + query)  # refused before connecting (nothing listens there)
    assert "\n" not in str(err.value)


def test_fence_counter_names_the_node_counter_and_its_loss_is_noticed(own_server: ServerProc, name: str) -> None:
    counter = f"t-{uuid.uuid4().hex[:6]}/fences"
    r = raw(own_server.url)
    try:
        with distlock.connect(own_server.url + "?fence_counter=" + counter) as store:
            fences: list[int] = []
            for n in (name, name + "-b", name):
                with store.lock(n, ttl=10) as lk:
                    fences.append(lk.fence)
            assert fences == sorted(fences) and len(set(fences)) == 3, fences
            assert int(r.hget(counter, "n") or 0) == fences[-1] and r.hget(counter, "e")
            assert not r.exists(rk.NODE_COUNTER)  # the default counter is not touched
            with distlock.connect(own_server.url) as default, default.lock(name, ttl=10):
                assert r.exists(rk.NODE_COUNTER)  # another counter counts on its own
            r.delete(counter)
            with store.lock(name, ttl=10) as lk:  # lost: it starts again from the clock, above the others
                assert lk.fence > fences[-1]
            assert r.hget(counter, "e")
        assert keys_with(r, name) == []
    finally:
        r.close()


def test_fence_counter_with_braces_is_refused_on_a_cluster_and_names_the_slot_counters(
    redis_cluster_servers: RedisCluster,
) -> None:
    cluster = redis_cluster_servers
    with pytest.raises(ConfigError, match="no braces on Redis Cluster") as err:
        distlock.connect(cluster.url + "?fence_counter={app}/fences")
    assert "\n" not in str(err.value)
    counter = f"t-{uuid.uuid4().hex[:6]}/fences"
    prefix = f"fc-{uuid.uuid4().hex[:6]}-"
    names = [f"{prefix}{i}" for i in range(12)]
    rc = RedisClusterClient(host="127.0.0.1", port=cluster.nodes[0].port, socket_timeout=5)
    try:
        with distlock.connect(cluster.url + "?fence_counter=" + counter) as store:
            for n in names:
                # the default counter of the name's slot may exist (other tests on this cluster count there,
                # and counters stay): it must not move
                default = rk.counter_key(n, cluster=True)
                before = rc.hget(default, "n")
                with store.lock(n, ttl=10) as lk:
                    key = rk.counter_key(n, cluster=True, counter=counter)
                    assert key.startswith(counter + ":{")
                    assert int(rc.hget(key, "n") or 0) == lk.fence  # the name's slot counter, under the prefix
                    assert rc.hget(default, "n") == before  # not the default one
    finally:
        rc.close()


def test_redlock_fence_counter_on_every_master(redlock_url_servers: list[ServerProc], name: str) -> None:
    counter = f"t-{uuid.uuid4().hex[:6]}/fences"
    with distlock.connect(redlock_url(redlock_url_servers, "fence_counter=" + counter)) as store:
        fences = []
        for _ in range(2):
            with store.lock(name, ttl=10) as lk:
                fences.append(lk.fence)
    # a new counter is seeded from the masters' clocks (microseconds), then counts one up on every master
    assert fences[0] is not None and fences[0] > 10**15 and fences[1] == fences[0] + 1, fences
    for s in redlock_url_servers:
        r = raw(s.url)
        try:
            assert r.hget(counter, "e") == _run_id(s)  # seeded under the master's run id, in the named key
            assert int(r.hget(counter, "n") or 0) == fences[1]
        finally:
            r.close()


def test_px_is_rounded_up() -> None:
    assert rc.ms(0.0011) == 2  # never shorter than the local lease
    assert rc.ms(0.3) == 300 and rc.ms(1.0) == 1000  # binary noise is not rounded up
    assert rc.ms(0.0) == 1


# -- Redis Cluster ------------------------------------------------------------------------------------------
def test_cluster_churn_over_names_in_many_slots_leaves_no_key(redis_cluster_servers: RedisCluster) -> None:
    cluster = redis_cluster_servers
    prefix = f"cchurn-{uuid.uuid4().hex[:6]}-"
    with distlock.connect(cluster.url) as store:
        churn(store, prefix, 120)
        slots = {rk.slot_of("{" + f"{prefix}{i}" + "}:r") for i in range(120)}
        assert len(slots) > 100  # names spread over many slots (and all three masters)
        with store.lock(prefix + "7", ttl=10) as lk:
            again = lk.fence
        assert again is not None
    left = []
    for i in range(len(cluster.nodes)):
        c = cluster.client(i)
        left += keys_with(c, prefix)
        c.close()
    assert left == []


def test_cluster_fences_of_a_reused_name_go_up(redis_cluster_servers: RedisCluster, name: str) -> None:
    with distlock.connect(redis_cluster_servers.url) as store:
        fences = []
        for n in (name, name + "-b", name, name + "-c", name):
            with store.lock(n, ttl=10) as lk:
                if n == name:
                    fences.append(lk.fence)
    assert fences == sorted(fences) and len(set(fences)) == 3, fences


# -- Redlock ------------------------------------------------------------------------------------------------
def _marker(srv: ServerProc) -> tuple[bytes | None, int]:
    r = raw(srv.url)
    try:
        return r.hget(rk.NODE_COUNTER, "e"), int(r.hget(rk.NODE_COUNTER, "n") or 0)
    finally:
        r.close()


def _run_id(srv: ServerProc) -> bytes:
    r = raw(srv.url)
    try:
        return str(r.info("server")["run_id"]).encode()
    finally:
        r.close()


def test_redlock_churn_leaves_no_key_on_any_master(redlock_url_servers: list[ServerProc]) -> None:
    prefix = f"rchurn-{uuid.uuid4().hex[:6]}-"
    with distlock.connect(redlock_url(redlock_url_servers)) as store:
        for i in range(100):
            name = f"{prefix}{i}"
            if i % 3 == 2:
                with store.rwlock(name, ttl=10).read:
                    pass
            else:
                with store.lock(name, ttl=10):
                    assert not store.lock(name, ttl=10).acquire(blocking=False)
    for s in redlock_url_servers:
        r = raw(s.url)
        assert keys_with(r, prefix) == [], s.name
        r.close()


def test_redlock_wiped_master_is_seeded_from_its_clock(name: str) -> None:
    """0.1.0 handed out fences 5 -> 1 when a wiped master and one that missed the recent acquisitions formed
    the next majority; later versions refused every acquire of such a majority (locking stopped until the
    third master answered). Now the wiped master reports its clock (microseconds) as its counter, the two are
    seeded from the larger, and fences go on up; once all answer, every master counts above it."""
    with redis_masters(3) as (a, b, c):
        with distlock.connect(redlock_url([a, b, c], "node_timeout=0.3")) as store:
            with store.lock(name, ttl=10):
                pass  # seeds all three
            fences = []
            c.pause()
            try:
                for _ in range(4):  # c misses these (it runs them late, once resumed)
                    with store.lock(name, ttl=1) as lk:
                        fences.append(lk.fence)
            finally:
                c.resume()
            time.sleep(1.5)  # a late acquire that c ran after its release expires
            r = raw(a.url)
            r.flushall()  # a loses its state
            r.close()
            b.pause()
            try:  # a (wiped) and c (stale) answer: 0.1.0 handed out 1 here
                with store.lock(name, ttl=10) as lk:
                    fences.append(lk.fence)
            finally:
                b.resume()
            with store.lock(name, ttl=10) as lk:
                fences.append(lk.fence)
            mark, n = _marker(a)
            assert mark == _run_id(a) and n >= fences[-1]  # a was re-seeded from b and c
            b.pause()
            try:  # now a (re-seeded) and c (written back) form the majority
                with store.lock(name, ttl=10) as lk:
                    fences.append(lk.fence)
            finally:
                b.resume()
    assert all(isinstance(f, int) for f in fences)
    assert fences == sorted(fences) and len(set(fences)) == len(fences), fences


def test_redlock_master_restarted_empty_or_with_its_data_is_reseeded(name: str) -> None:
    """A restart changes the run id, so even a master that kept its data (or came back from an older
    snapshot) is re-seeded from the others before its counter counts again."""
    with redis_masters(5, *DURABLE) as masters:
        with distlock.connect(redlock_url(masters)) as store:
            fences = []
            with store.lock(name, ttl=10) as lk:
                fences.append(lk.fence)
            old = _run_id(masters[0])
            restart(masters[0])  # keeps its data (AOF, fsync always), new run id
            restart(masters[1])
            assert _run_id(masters[0]) != old
            fences += taken(store, name, 2)
            assert _marker(masters[0])[0] == _run_id(masters[0])
            assert _marker(masters[1])[0] == _run_id(masters[1])
        assert fences == sorted(fences) and len(set(fences)) == len(fences), fences


def test_redlock_read_lock_when_the_counters_disagree(name: str) -> None:
    """The masters' counters out of step (one far ahead): the read lock's fence must be written back to a
    majority, and the write-back must recognise a reader (0.1.0 only recognised the exclusive key)."""
    with redis_masters(3) as masters:
        r = raw(masters[0].url)
        r.set(rk.fence_key(name), 1000)  # one master far ahead (here: a 0.1.0 per-name counter)
        r.close()
        with distlock.connect(redlock_url(masters)) as store:
            rw = store.rwlock(name, ttl=10)
            assert rw.read.acquire(blocking=False)  # one try (0.1.0 needed a second, after its failed write-back)
            assert rw.read.fence is not None and rw.read.fence > 1000
            info = store.inspect(name)
            assert info is not None and info.holders[0].fence == rw.read.fence
            rw.read.release()
            masters[0].kill()  # the master that was ahead is gone: the others count above it
            with store.rwlock(name, ttl=10).read:
                pass
            rd = store.rwlock(name, ttl=10).read
            assert rd.acquire(timeout=5)
            assert rd.fence is not None and rd.fence > 1000
            rd.release()

"""Single-node Redis: interop with redis-py's Lock, the wire layout, push wake-ups, the fair queue, leased
permits, replication (WAIT), restarts, credentials and bad URLs. Real redis-server processes only."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import distlock
from distlock import BackendError, ConfigError, LockLost
from distlock._core.timing import WAITER_TTL
from tests.waiting import Waiter, until, wake_ups
from tools.servers.proc import LOOPBACK, ServerProc, free_port, workdir
from tools.servers.redis import redis_replicated, redis_server, restart, start_redis


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def store(redis_url: str) -> Iterator[distlock.Store]:
    with distlock.connect(redis_url) as s:
        yield s


@pytest.fixture
def own_server() -> Iterator[ServerProc]:
    """A server this test may kill and restart."""
    with redis_server() as srv:
        yield srv


# -- interop and wire layout ------------------------------------------------------------------------------
def test_redis_py_lock_and_distlock_exclude_each_other(store: distlock.Store, raw: redis.Redis, name: str) -> None:
    theirs = raw.lock(name, timeout=10)
    assert theirs.acquire(blocking=False)
    ours = store.lock(name, ttl=10)
    assert not ours.acquire(blocking=False)
    info = store.inspect(name)
    assert info is not None and info.holders[0].owner == "?"  # a foreign holder is shown, not hidden
    theirs.release()
    assert ours.acquire(blocking=False)
    assert not raw.lock(name, timeout=10).acquire(blocking=False)
    ours.release()
    assert raw.lock(name, timeout=10).acquire(blocking=False)


def test_wire_layout_key_is_the_name_value_the_token_with_px(
    store: distlock.Store, raw: redis.Redis, name: str
) -> None:
    lock = store.lock(name, ttl=7)
    assert lock.acquire()
    value = raw.get(name)
    assert value is not None and len(value) >= 32  # the random token (>= 128 bits, hex)
    assert 0 < raw.pttl(name) <= 7000
    assert int(raw.hget("distlock:fences", "n") or 0) == lock.fence  # the store's one fence counter
    # the holder's token opens it for redis-py too: same compare-and-delete semantics
    assert raw.lock(name, timeout=10).acquire(blocking=False) is False
    lock.release()
    assert raw.get(name) is None
    assert not raw.keys("*" + name + "*")  # nothing of a free name stays


def test_an_uncontended_acquire_and_release_run_seventeen_commands_on_the_server(
    own_server: ServerProc, name: str
) -> None:
    """Each command a script runs costs about 1 us of the server's single thread, more than the rest of the
    script. The acquire of a free name runs nine: the existence of the name's keys and the counter's type (the
    check before any write), epoch, the fence and the clock it floors, key, details and their lease. The
    release runs eight: existence and the types of the counter, the key and the details, then compare,
    delete, details, queue. Counted by the server itself."""
    raw = redis.Redis.from_url(own_server.url)
    try:
        with distlock.connect(own_server.url) as store:
            lock = store.lock(name, ttl=30)
            with lock:  # scripts loaded, the fence counter seeded
                pass
            raw.config_resetstat()
            for _ in range(20):
                with lock:
                    pass
            stats = raw.info("commandstats")
        scripts = stats.pop("cmdstat_evalsha")["calls"]
        inner = {cmd[len("cmdstat_") :]: s["calls"] for cmd, s in stats.items()}
        inner = {cmd: n for cmd, n in inner.items() if cmd.split("|")[0] not in ("config", "info")}
        assert scripts == 40
        assert sum(inner.values()) == 20 * 17, sorted(inner.items())
    finally:
        raw.close()


def test_waiter_behind_a_redis_py_holder_gets_in_when_its_ttl_ends(
    store: distlock.Store, raw: redis.Redis, name: str
) -> None:
    """redis-py never signals a release; the waiter's fallback is the holder's remaining lease (PTTL)."""
    raw.lock(name, timeout=1.0).acquire()
    started = time.monotonic()
    lock = store.lock(name, ttl=10)
    assert lock.acquire(timeout=15)
    waited = time.monotonic() - started
    assert 0.8 <= waited < 10, waited
    lock.release()


def test_one_release_wakes_exactly_one_waiter(
    store: distlock.Store, raw: redis.Redis, redis_url: str, name: str
) -> None:
    """F11 in docs/safety.md: a release publishes one wake-up, addressed to the first waiter, not a broadcast. The
    waiters are three processes' worth of stores (threads of one store queue locally, one on the server)."""
    holder = store.lock(name, ttl=30)
    assert holder.acquire()
    done: list[str] = []

    def waiter(tag: str) -> None:
        with distlock.connect(redis_url) as own:
            lock = own.lock(name, ttl=30)
            assert lock.acquire(timeout=30)
            done.append(tag)
            time.sleep(0.05)
            lock.release()

    threads = [threading.Thread(target=waiter, args=(t,)) for t in "abc"]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while raw.zcard("{" + name + "}:q") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert raw.zcard("{" + name + "}:q") == 3
    sub = wake_ups(raw, name)
    holder.release()
    for t in threads:
        t.join(30)
    assert sorted(done) == ["a", "b", "c"]
    messages = []
    while (m := sub.get_message(timeout=0.5)) is not None:
        messages.append((m["channel"].decode(), m["data"]))
    sub.close()
    # three releases (holder, then two of the waiters), each woke exactly one waiter by its token, on the reply
    # channel of that waiter's store: three different stores
    assert len(messages) == 3, messages
    assert all(data != b"*" for _, data in messages)
    assert all(channel.startswith("{" + name + "}:wake:") for channel, _ in messages), messages
    assert len({channel for channel, _ in messages}) == 3, messages


def test_a_wake_up_is_read_only_by_the_store_of_the_waiter_it_is_for(
    store: distlock.Store, raw: redis.Redis, redis_url: str, name: str
) -> None:
    """Every store with a waiter on the name subscribes to its channel; a release's wake-up (here a hand-over)
    goes to the first waiter's store alone, on that store's reply channel. On the shared channel every store
    read every release's message (8 processes on one lock: 7 wasted wake-ups per hand-off)."""
    holder = store.lock(name, ttl=30)
    assert holder.acquire()
    with distlock.connect(redis_url) as first, distlock.connect(redis_url) as second:
        read: dict[str, list[str]] = {"first": [], "second": []}
        for key, own in (("first", first), ("second", second)):
            listener = own._backend.node.listener  # type: ignore[attr-defined]
            plain = listener._dispatch

            def counted(msg: dict[str, object], key: str = key, plain: object = plain) -> None:
                if msg.get("type") == "message":
                    read[key].append(str(msg.get("data")))
                plain(msg)  # type: ignore[operator]

            listener._dispatch = counted
        replies = "{" + name + "}:qw"
        a = Waiter(first.lock(name, ttl=30))
        assert until(lambda: raw.hlen(replies) == 1)  # queued, and its re-check named its reply channel
        b = Waiter(second.lock(name, ttl=30))
        assert until(lambda: raw.hlen(replies) == 2)
        holder.release()
        assert a.granted()
        assert len(read["first"]) == 1 and read["second"] == [], read  # the other store read nothing
        a.finish()
        assert b.granted()
        b.finish()
        assert len(read["first"]) == 1 and len(read["second"]) == 1, read


# -- fairness and leased permits -------------------------------------------------------------------------
def test_fair_lock_is_fifo(store: distlock.Store, name: str) -> None:
    holder = store.lock(name, ttl=30, fair=True)
    assert holder.acquire()
    order: list[int] = []

    def waiter(i: int) -> None:
        lock = store.lock(name, ttl=30, fair=True)
        assert lock.acquire(timeout=30)
        order.append(i)
        lock.release()

    threads = []
    for i in range(4):
        t = threading.Thread(target=waiter, args=(i,))
        t.start()
        threads.append(t)
        time.sleep(0.15)  # each one queues after the previous
    holder.release()
    for t in threads:
        t.join(30)
    assert order == [0, 1, 2, 3]


def test_dead_waiter_does_not_stall_a_fair_queue(store: distlock.Store, raw: redis.Redis, name: str) -> None:
    """F12 in docs/safety.md: a queue entry whose waiter died (never refreshed) drops out after its own deadline."""
    now_ms = int(time.time() * 1000)
    raw.zadd("{" + name + "}:q", {"lock|dead-waiter": 1})
    raw.zadd("{" + name + "}:qd", {"lock|dead-waiter": now_ms + int(WAITER_TTL * 1000)})
    lock = store.lock(name, ttl=10, fair=True)
    assert not lock.acquire(blocking=False)  # FIFO: the (dead) waiter is ahead
    started = time.monotonic()
    assert lock.acquire(timeout=WAITER_TTL + 10)
    assert time.monotonic() - started <= WAITER_TTL + 5
    lock.release()


def test_permit_of_a_dead_holder_comes_back_after_its_ttl(store: distlock.Store, name: str) -> None:
    dead = store.semaphore(name, permits=1, ttl=1.0, auto_renew=False)  # stands for a crashed holder
    assert dead.acquire()
    other = store.semaphore(name, permits=1, ttl=10)
    assert not other.acquire(blocking=False)
    started = time.monotonic()
    assert other.acquire(timeout=10)
    assert 0.5 <= time.monotonic() - started < 6
    with pytest.raises(LockLost):
        dead.release()
    other.release()


def test_semaphore_layout_its_terms_live_with_its_holders_and_a_leftover_counts_for_nothing(
    store: distlock.Store, raw: redis.Redis, name: str
) -> None:
    """A holding of two permits is one member of {N}:p with its weight in its details; the semaphore's terms
    ({N}:sem: declared, in force) expire no later than what keeps them (here the holding's lease) and go
    with the last holder. Terms left behind by a crashed last holder (their PEXPIRE kept for a longer lease
    that was released) are nobody's: the next first user declares anew, set_permits stores nothing."""
    tag = "{" + name + "}"
    sem = store.semaphore(name, permits=3, ttl=5)
    assert sem.acquire(permits=2)
    assert raw.zcard(tag + ":p") == 1 and raw.hgetall(tag + ":sem") == {b"d": b"3", b"c": b"3"}
    assert raw.hvals(tag + ":i")[0].startswith(b"semaphore:2|")
    assert 0 < raw.pttl(tag + ":sem") <= 5000
    sem.release()
    assert not raw.keys("*" + name + "*")
    raw.hset(tag + ":sem", mapping={"d": "3", "c": "1"})
    raw.pexpire(tag + ":sem", 60000)
    assert not sem.set_permits(4) and not raw.exists(tag + ":sem")
    raw.hset(tag + ":sem", mapping={"d": "3", "c": "1"})
    raw.pexpire(tag + ":sem", 60000)
    other = store.semaphore(name, permits=5, ttl=5)
    assert other.acquire(blocking=False, permits=5)  # not "declared with permits=3"
    assert raw.hgetall(tag + ":sem") == {b"d": b"5", b"c": b"5"}
    other.release()
    assert not raw.keys("*" + name + "*")


# -- faults ----------------------------------------------------------------------------------------------
def test_server_restart_while_held_sets_lost(own_server: ServerProc, name: str) -> None:
    """F4: a restart without persistence loses the key; the next renewal finds it gone -> lost. It lost the
    fence counter too: the same store (reconnected by itself) and a store opened afterwards go on locking, with
    fences above the one handed out before the restart (the counter starts again from the server clock)."""
    with distlock.connect(own_server.url) as s:
        lock = s.lock(name, ttl=1.5)
        assert lock.acquire()
        before = lock.fence
        restart(own_server)
        assert lock.lost.wait(10)
        with pytest.raises(LockLost):
            lock.release()
        again = s.lock(name, ttl=5)
        assert again.acquire(timeout=5)
        after = again.fence
        again.release()
    with distlock.connect(own_server.url) as s, s.lock(name, ttl=5) as last:
        assert before is not None and after is not None and before < after < last.fence


def test_server_down_while_held_sets_lost_within_ttl(own_server: ServerProc, name: str) -> None:
    with distlock.connect(own_server.url, socket_timeout=0.5, connect_timeout=0.5) as s:
        lock = s.lock(name, ttl=1.5)
        assert lock.acquire()
        own_server.kill()
        started = time.monotonic()
        assert lock.lost.wait(10)
        assert time.monotonic() - started < 1.5 + 3
        own_server.start()


def test_waiter_survives_a_dropped_pubsub_connection(own_server: ServerProc, name: str) -> None:
    with distlock.connect(own_server.url) as s:
        holder = s.lock(name, ttl=30)
        assert holder.acquire()
        got = threading.Event()

        def waiter() -> None:
            if s.lock(name, ttl=30).acquire(timeout=30):
                got.set()

        t = threading.Thread(target=waiter)
        t.start()
        raw = redis.Redis.from_url(own_server.url)
        deadline = time.monotonic() + 10
        while not raw.pubsub_channels() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert raw.client_kill_filter(_type="pubsub") >= 1
        time.sleep(0.3)
        started = time.monotonic()
        holder.release()
        t.join(30)
        assert got.is_set()
        assert time.monotonic() - started < 10  # long before the 30 s lease: woken or re-checked, not expired
        raw.close()


# -- replication: WAIT ------------------------------------------------------------------------------------
@pytest.fixture
def replicated() -> Iterator[tuple[ServerProc, ServerProc]]:
    with redis_replicated() as pair:
        master, _replica = pair
        m = redis.Redis.from_url(master.url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the replica is online and acknowledges writes
            m.set("probe", "1")
            if m.wait(1, 200) == 1:
                break
        m.delete("probe")
        m.close()
        yield pair


def test_wait_replicas_refuses_a_lock_the_replica_never_saw(
    replicated: tuple[ServerProc, ServerProc], name: str
) -> None:
    """F5: with the replica stalled, WAIT gets no ack: acquire fails and releases instead of granting."""
    master, replica = replicated
    # a generous WAIT first: on a loaded machine the replica's link may still be syncing
    with distlock.connect(master.url + "?wait_replicas=1&wait_timeout=10000") as patient:
        lock = patient.lock(name, ttl=10)
        assert lock.acquire()  # the replica is up: acknowledged
        lock.release()
    url = master.url + "?wait_replicas=1&wait_timeout=300"
    with distlock.connect(url) as s:
        replica.pause()
        try:
            with pytest.raises(BackendError, match="replicas acknowledged"):
                s.lock(name, ttl=10).acquire(timeout=1)
            assert redis.Redis.from_url(master.url).get(name) is None  # released, not left behind
        finally:
            replica.resume()


def test_wait_replicas_renewals_never_outlast_what_the_replica_acknowledged(
    replicated: tuple[ServerProc, ServerProc], name: str
) -> None:
    """A renewal the replica did not acknowledge moved the master's expiry but not the replica's: were the master
    to die, the promoted replica would free the name at the old expiry. So such a renewal does not extend the
    local lease: with the replica stalled, the holder's ``lost`` fires at its local lease end (before, the
    renewals kept it believing for as long as the master alone kept the key); acknowledged renewals go on."""
    master, replica = replicated
    with distlock.connect(master.url + "?wait_replicas=1&wait_timeout=10000") as patient:
        with patient.lock(name, ttl=10):  # the replica is up and syncing: acknowledged
            pass
    with distlock.connect(master.url + "?wait_replicas=1&wait_timeout=300") as s:
        held = s.lock(name, ttl=2)
        assert held.acquire(timeout=5)
        time.sleep(2.5)  # acknowledged renewals keep it past its first TTL
        assert held.owned() and not held.lost.is_set()
        replica.pause()
        try:
            assert held.lost.wait(2 + 5)
        finally:
            replica.resume()


def test_wait_replicas_acquires_on_distlocks_own_connections(
    replicated: tuple[ServerProc, ServerProc], name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The acquire and its WAIT go out in one round trip on distlock's own connections, as every other call of
    the lock path: through redis-py's pool they raced with the pool's reset when the sentinels announced a new
    master (a closed-socket ``ValueError`` out of ``acquire()``). So do inspections."""
    master, _replica = replicated
    from distlock._backends.redis._sync import node as node_module

    def pooled(*args: Any) -> None:
        raise AssertionError("a call went through redis-py's pool")

    with distlock.connect(master.url + "?wait_replicas=1&wait_timeout=10000") as store:
        monkeypatch.setattr(node_module.drv, "pipeline", pooled)
        lock = store.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        info = store.inspect(name)
        assert info is not None and info.holders[0].fence == lock.fence
        lock.release()


def test_failover_without_wait_can_lose_a_lock_and_with_wait_cannot(
    replicated: tuple[ServerProc, ServerProc], name: str
) -> None:
    """The F5 scenario: the master grants, its write never reaches the replica, the replica is promoted.

    The replica is cut off first (REPLICAOF NO ONE: from then on no write of the master reaches it, exactly
    as if the master died before replicating), then the master grants, then dies.
    """
    master, replica = replicated
    promoted = redis.Redis.from_url(replica.url)
    promoted.replicaof("NO", "ONE")
    with distlock.connect(master.url) as s:
        assert s.lock(name, ttl=30).acquire()  # granted without WAIT
        with distlock.connect(master.url + "?wait_replicas=1&wait_timeout=300") as sw:
            with pytest.raises(BackendError):
                sw.lock(name + "-w", ttl=30).acquire()  # with WAIT: refused instead
        master.kill()
    with distlock.connect(replica.url) as s2:
        second = s2.lock(name, ttl=30)
        assert second.acquire(timeout=2)  # a second holder of the same name: without WAIT the lock was lost
        second.release()
        assert s2.inspect(name + "-w") is None  # the refused one never existed anywhere
    promoted.close()


# -- URLs, credentials, bad input --------------------------------------------------------------------------
def test_unreachable_server_is_a_quick_backend_error() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(BackendError) as err:
        distlock.connect(f"redis://:s3cr3t-pw@{LOOPBACK}:{port}/0?connect_timeout=1")
    assert time.monotonic() - started < 5
    assert "s3cr3t-pw" not in str(err.value) and "s3cr3t-pw" not in repr(err.value)


def test_password_and_acl_user() -> None:
    with workdir("redis-auth") as d:
        srv = start_redis(d, "auth", None, "--requirepass", "right-pw")
        try:
            with pytest.raises(BackendError) as err:
                distlock.connect(f"redis://:wrong-pw@{LOOPBACK}:{srv.port}/0")
            assert "wrong-pw" not in str(err.value)
            with distlock.connect(f"redis://:right-pw@{LOOPBACK}:{srv.port}/0") as s:
                assert "right-pw" not in repr(s)
                lock = s.lock("x", ttl=5)
                assert lock.acquire()
                lock.release()
            admin = redis.Redis(host=LOOPBACK, port=srv.port, password="right-pw")
            admin.acl_setuser(
                "locker", enabled=True, passwords=["+user-pw"], keys=["*"], channels=["*"], commands=["+@all"]
            )
            admin.close()
            with distlock.connect(f"redis://locker:user-pw@{LOOPBACK}:{srv.port}/0") as s:
                lock = s.lock("y", ttl=5)
                assert lock.acquire()
                lock.release()
        finally:
            srv.stop()


def test_unix_socket_url(name: str) -> None:
    with workdir("redis-unix") as d:
        sock = Path(d) / "r.sock"
        srv = start_redis(d, "unix", None, "--unixsocket", str(sock), "--unixsocketperm", "700")
        try:
            with distlock.connect(f"unix://{sock}?db=0") as s:
                lock = s.lock(name, ttl=5)
                assert lock.acquire()
                assert lock.fence is not None and lock.fence > 0
                lock.release()
        finally:
            srv.stop()


@pytest.mark.parametrize("query", ["wat=1", "wait_replicas=x", "wait_timeout=0", "socket_timeout=-1"])
def test_bad_url_options_are_config_errors(redis_url: str, query: str) -> None:
    with pytest.raises(ConfigError):
        distlock.connect(redis_url + "?" + query)


def test_renewal_of_many_locks_is_one_round_trip_per_tick(
    store: distlock.Store, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from distlock._backends.redis._sync.wire import Wire

    locks = [store.lock(f"{name}-{i}", ttl=30) for i in range(200)]
    for lock in locks:
        assert lock.acquire(blocking=False)
    sent: list[int] = []
    real = Wire.call_many

    def counting(wire: Wire, packs: list[bytes], *args: object) -> list[object]:
        sent.append(len(packs))
        return real(wire, packs, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Wire, "call_many", counting)
    results = store._backend.renew([h.claim for h in store._acquirer.holdings()])  # what one tick sends
    assert results == [True] * 200
    assert sent == [200]  # 200 renewals, one write and 200 replies: one round trip
    monkeypatch.undo()
    for lock in locks:
        lock.release()


def test_kill_9_of_a_queued_waiter_does_not_strand_the_others(
    store: distlock.Store, raw: redis.Redis, redis_url: str, name: str, tmp_path: Path
) -> None:
    """A waiter killed while first in the queue gets the release's wake-up and never acts on it; the next
    waiter still gets in, by its bounded re-check, long before the dead entry's deadline matters."""
    import subprocess
    import sys

    holder = store.lock(name, ttl=30)
    assert holder.acquire()
    root = Path(__file__).resolve().parent.parent
    dead = subprocess.Popen(
        [sys.executable, "-m", "tests.proc_worker", "hold", redis_url, name, "30", str(tmp_path)],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while raw.zcard("{" + name + "}:q") < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert raw.zcard("{" + name + "}:q") == 1  # the child is queued, first
        dead.kill()
        dead.wait(10)
        got = threading.Event()

        def waiter() -> None:
            lock = store.lock(name, ttl=30)
            if lock.acquire(timeout=30):
                got.set()
                lock.release()

        t = threading.Thread(target=waiter)
        t.start()
        while raw.zcard("{" + name + "}:q") < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        released = time.monotonic()
        holder.release()  # wakes the dead child, first in the queue
        t.join(30)
        assert got.is_set()
        assert time.monotonic() - released < WAITER_TTL + 5
    finally:
        dead.kill()
        dead.wait(10)


def test_dropped_connections_while_held_reconnect_and_keep_the_lock(own_server: ServerProc, name: str) -> None:
    """Every client connection killed (CLIENT KILL) while the key lives on: renewal reconnects, nothing is
    lost; then the server forgets the key (FLUSHALL) and the next renewal reports the loss."""
    with distlock.connect(own_server.url) as s:
        lock = s.lock(name, ttl=1.0)
        assert lock.acquire()
        admin = redis.Redis.from_url(own_server.url)
        assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
        time.sleep(1.5)  # several renewals, each on a fresh connection
        assert not lock.lost.is_set()
        assert lock.owned()
        admin.flushall()
        assert lock.lost.wait(5)
        with pytest.raises(LockLost):
            lock.release()
        admin.close()


async def test_a_call_cancelled_while_its_reply_is_due_never_hands_that_reply_to_another(
    redis_url: str, raw: redis.Redis, name: str
) -> None:
    """The per-lock calls run on distlock's own connections: a task cancelled between sending its request
    and reading the reply must not leave that reply for the next call on the connection (it would read an
    acquire's ``[1, fence]`` as its own answer). The server is paused (``CLIENT PAUSE``) so the reply is due
    while the task is cancelled. (Both distlock's wire and redis.asyncio's ``read_response`` close such a
    connection; this pins the behaviour, whichever layer provides it.)"""
    import asyncio

    store = await distlock.connect_async(redis_url)
    try:
        async with store.lock(name, ttl=5):
            pass  # fence 1 for `name`, and one idle connection on the short path
        raw.execute_command("CLIENT", "PAUSE", 300, "WRITE")
        task = asyncio.ensure_future(store.lock(name, ttl=30).acquire(timeout=10))
        await asyncio.sleep(0.1)  # the acquire is sent and waits for its reply
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        other = store.lock(name + "-other", ttl=30)
        assert await other.acquire(timeout=5)  # after the pause; a stale reply would be `name`'s [1, fence]
        info = await store.inspect(name + "-other")
        assert info is not None and info.holders[0].fence == other.fence
        assert await other.owned()
        await other.release()
        assert await store.inspect(name) is None  # the cancelled acquire left nothing behind
        assert raw.zcard("{" + name + "}:q") == 0
    finally:
        await store.aclose()

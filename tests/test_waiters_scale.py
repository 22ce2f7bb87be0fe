"""Waiters that always queue on the server (ZooKeeper, etcd) hand the lock down a chain without reading the whole
queue at each wake-up: what a hand-off costs must not grow with the number of waiters (``benchmarks/waiters.py``
measures the rates). Counted here through the store's backend (its test hooks:
``wire.client`` for kazoo, ``gw`` for etcd), on real servers, with a dozen waiters.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import distlock
from distlock._backends.etcd import keys
from distlock._backends.zookeeper import layout
from distlock._core import ids
from distlock._core.types import Claim, Mode

WAITERS = 12


async def _chain(
    store: distlock.AsyncStore,
    name: str,
    queued: Callable[[], Awaitable[None]],
    waiters: int = WAITERS,
    ttl: float = 30.0,
) -> list[int]:
    """A holder, then ``waiters`` tasks queued behind it (each its own lock object); ``queued()`` runs once all are
    queued, then the holder releases and the lock goes down the chain once. The fences, in order."""
    holder = store.lock(name, ttl=ttl)
    assert await holder.acquire(timeout=30)
    order: list[int] = []

    async def waiter() -> None:
        lock = store.lock(name, ttl=ttl)
        assert await lock.acquire(timeout=60)
        assert lock.fence is not None
        order.append(lock.fence)
        await lock.release()

    tasks = [asyncio.create_task(waiter()) for _ in range(waiters)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:  # every waiter queued on the server (not a fixed sleep: the machine may be loaded)
        info = await store.inspect(name)
        if info is not None and info.waiters == waiters:
            break
        assert loop.time() < deadline, f"waiters never all queued: {info}"
        await asyncio.sleep(0.02)
    await queued()
    await holder.release()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    return order


class _ZkCounts:
    """Counts, while ``on``, the listings of the lock's path and the reads of its children through the store's
    kazoo client (its test hook ``wire.client``)."""

    def __init__(self, store: distlock.AsyncStore, name: str) -> None:
        self.path = layout.lock_path(name)
        self.on = False
        self.lists = 0
        self.gets = 0
        self.client: Any = store._backend.wire.client  # type: ignore[attr-defined]
        self._plain = self.client.get_children_async, self.client.get_async

    async def start(self) -> None:
        """Count from now on (``_chain``'s ``queued`` step: once every waiter is queued)."""
        self.on = True

    def __enter__(self) -> _ZkCounts:
        plain_list, plain_get = self._plain

        def listed(p: str, *args: Any, **kwargs: Any) -> Any:
            if self.on and p == self.path:
                self.lists += 1
            return plain_list(p, *args, **kwargs)

        def got(p: str, *args: Any, **kwargs: Any) -> Any:
            if self.on and p.startswith(self.path + "/"):
                self.gets += 1
            return plain_get(p, *args, **kwargs)

        self.client.get_children_async, self.client.get_async = listed, got
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.get_children_async, self.client.get_async = self._plain


async def test_zookeeper_waiters_woken_together_do_not_list_the_queue(zookeeper_url: str) -> None:
    """A session event wakes every waiter of the store (and the wait slice ticks every waiter): each checks its
    own child and the one it watches, and lists the queue only if that one is gone. Then the chain is FIFO."""
    name = f"waiters-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(zookeeper_url) as store:
        backend: Any = store._backend  # type: ignore[attr-defined]
        with _ZkCounts(store, name) as seen:

            async def herd() -> None:
                seen.on = True
                backend.changed()  # what kazoo's connection events call: every waiting attempt looks again
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 30
                while seen.gets < WAITERS:  # each looked at the child it watches (both versions do that)
                    assert loop.time() < deadline, vars(seen)
                    await asyncio.sleep(0.01)
                await asyncio.sleep(0.05)  # a listing would follow its get at once: let any come
                seen.on = False

            order = await _chain(store, name, herd)
    assert order == sorted(order) and len(order) == WAITERS  # FIFO, each once
    assert seen.lists == 0, vars(seen)  # Curator's recipe would list the queue once per waiter here


async def test_zookeeper_hand_off_to_the_next_in_line_lists_nothing(zookeeper_url: str) -> None:
    """A waiter whose listing (when it queued) showed the holder as the only child ahead of it holds as soon as
    that child is gone, without listing the queue again (Curator lists it at every wake-up). Further back in
    a longer line, a waiter lists once when its predecessor goes (that one may have given up, not released)."""
    name = f"waiters-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(zookeeper_url) as store:
        with _ZkCounts(store, name) as seen:
            order = await _chain(store, name, seen.start, waiters=1)
            assert len(order) == 1 and seen.lists == 0, vars(seen)
            seen.on = False
            order = await _chain(store, name, seen.start, waiters=3)
    assert order == sorted(order) and len(order) == 3
    assert seen.lists == 2, vars(seen)  # the second and third in line; the first, none


async def test_zookeeper_a_waiter_woken_by_its_predecessors_deletion_reads_no_child(zookeeper_url: str) -> None:
    """The deletion event of the child a waiter watches says it is gone: the waiter does not read it again.
    Next in line, it only checks that its own child is still there (``exists``); further back it lists the
    queue, which shows both. Before, each woken waiter first read both children (``exists`` + ``get``): a
    round trip of two requests more per hand-off down a line (ZooKeeper hand-off p50 1.77 -> 1.50 ms, 8
    processes 0.71x -> 0.87x of kazoo's rate, benchmarks/zookeeper_peers.py)."""
    name = f"waiters-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(zookeeper_url) as store:
        with _ZkCounts(store, name) as seen:
            order = await _chain(store, name, seen.start, waiters=4)
    assert order == sorted(order) and len(order) == 4
    assert seen.gets == 0, vars(seen)  # before: one per woken waiter (4)
    assert seen.lists == 3, vars(seen)  # those not next in line when they queued list once, as before


async def test_zookeeper_waiters_of_a_store_recheck_at_a_bounded_rate(
    zookeeper_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait slice (a waiter's re-check without a wake-up, the safety net under the watches) grows with the
    number of the store's waiters, so that together they re-check at most ``MAX_RECHECKS`` times a second
    (scaled down here: a 0.2 s slice, 10 re-checks a second; with 12 waiters, a 1.2 s slice)."""
    from distlock._backends.zookeeper._async import recipe

    monkeypatch.setattr(recipe, "MAX_WAIT_SLICE", 0.2)
    monkeypatch.setattr(recipe, "MAX_RECHECKS", 10.0, raising=False)  # (raising: the test runs on the code before too)
    name = f"waiters-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(zookeeper_url) as store:
        with _ZkCounts(store, name) as seen:

            async def hold() -> None:
                loop = asyncio.get_running_loop()
                end = loop.time() + 2.5
                seen.on = True
                while loop.time() < end:
                    await asyncio.sleep(0.1)
                seen.on = False

            order = await _chain(store, name, hold)
    assert order == sorted(order) and len(order) == WAITERS
    # each re-check reads the watched child: a 0.2 s slice each would be about WAITERS * 12 = 144 here;
    # 10 a second together, about 25 (twice that allowed for a loaded machine)
    assert seen.gets <= 50, vars(seen)


async def test_etcd_queue_reads_stay_small(etcd_url: str) -> None:
    name = f"waiters-{uuid.uuid4().hex[:8]}"
    biggest = {"on": False, "n": 0}

    def kvs_in(data: Any) -> int:
        if not isinstance(data, dict):
            return 0
        n = len(data.get("kvs") or [])
        for r in data.get("responses") or []:
            n = max(n, len((r.get("response_range") or {}).get("kvs") or []))
        return n

    async with await distlock.connect_async(etcd_url) as store:
        gw: Any = store._backend.gw  # type: ignore[attr-defined]
        plain_call, plain_read_at = gw.call, gw.read_at

        async def call(path: str, *args: Any, **kwargs: Any) -> Any:
            data = await plain_call(path, *args, **kwargs)
            if biggest["on"] and path in ("/v3/kv/range", "/v3/kv/txn"):
                biggest["n"] = max(biggest["n"], kvs_in(data))
            return data

        async def read_at(*args: Any, **kwargs: Any) -> Any:
            data = await plain_read_at(*args, **kwargs)
            if biggest["on"]:
                biggest["n"] = max(biggest["n"], kvs_in(data))
            return data

        gw.call, gw.read_at = call, read_at
        try:
            # counted once all are queued (inspect() reads the whole queue, on purpose): the wake-ups' reads
            async def count() -> None:
                biggest["on"] = True

            order = await _chain(store, name, count)
        finally:
            gw.call, gw.read_at = plain_call, plain_read_at
    assert order == sorted(order) and len(order) == WAITERS
    # a read of the whole queue at each wake-up would return up to WAITERS keys: ours and the one ahead suffice
    assert 0 < biggest["n"] <= 2, biggest


async def test_etcd_waiters_of_one_store_share_one_watch_stream(etcd_url: str) -> None:
    """A store's waiters on one name share one watch stream (``waits.py``): however many wait, the store opens
    one stream for the name, not one per waiter and wait, and each hand-off still wakes the next in line."""
    name = f"waiters-{uuid.uuid4().hex[:8]}"
    streams = {"on": False, "n": 0}
    async with await distlock.connect_async(etcd_url) as store:
        client: Any = store._backend.gw.client  # type: ignore[attr-defined]
        plain_open, plain_stream = client.open_stream, client.stream

        def counted(plain: Any) -> Any:
            def call(member: Any, path: str, *args: Any, **kwargs: Any) -> Any:
                if streams["on"] and path == "/v3/watch":
                    streams["n"] += 1
                return plain(member, path, *args, **kwargs)

            return call

        client.open_stream, client.stream = counted(plain_open), counted(plain_stream)
        streams["on"] = True
        try:

            async def released() -> None:
                return None

            order = await _chain(store, name, released)
        finally:
            client.open_stream, client.stream = plain_open, plain_stream
    assert order == sorted(order) and len(order) == WAITERS  # FIFO, each once
    assert streams["n"] == 1, streams  # one per waiter and wait before


async def test_etcd_waiters_keep_their_leases_alive_together(etcd_url: str) -> None:
    """A store's waiters keep their leases alive in one keepalive request for all that are due soon (they
    queued together, so they are due together), not one request per waiter and renewal interval; and every
    waiter keeps its place meanwhile (the chain is FIFO)."""
    name = f"waiters-{uuid.uuid4().hex[:8]}"
    n = 2 * WAITERS
    calls = {"on": False, "keepalives": 0}
    async with await distlock.connect_async(etcd_url) as store:
        gw: Any = store._backend.gw  # type: ignore[attr-defined]
        plain_call = gw.call

        async def call(path: str, *args: Any, **kwargs: Any) -> Any:
            if calls["on"] and path == "/v3/lease/keepalive":
                calls["keepalives"] += 1
            return await plain_call(path, *args, **kwargs)

        async def hold() -> None:
            loop = asyncio.get_running_loop()
            end = loop.time() + 3.5  # several renewal intervals of the leases (ttl 3 s: one every second)
            calls["on"] = True
            while loop.time() < end:
                await asyncio.sleep(0.1)
            calls["on"] = False

        gw.call = call
        try:
            order = await _chain(store, name, hold, waiters=n, ttl=3.0)
        finally:
            gw.call = plain_call
    assert order == sorted(order) and len(order) == n
    # one request per waiter and interval would be n * 3 or more here; together, about one per interval (plus
    # the holder's renewer's, one per interval too)
    assert calls["keepalives"] < n, calls


def test_etcd_shared_watch_remembers_recent_deletes() -> None:
    """The shared watch's record (pure logic): a delete at or after a waiter's ``since`` is found, an older one
    is not, and trimming the record raises the revision from which it is complete (``floor``), so a waiter
    with an older read knows to read its keys instead of trusting the record."""
    from types import SimpleNamespace

    from distlock._backends.etcd._async.waits import _REMEMBER, _Feed

    member = ("127.0.0.1", 2379)
    feed = _Feed(SimpleNamespace(member=member, started=100))  # type: ignore[arg-type]
    assert feed.floor == 101
    feed.record(b"n/a", 105)
    assert feed.seen({b"n/a": 90}, 105) == (member, 105)
    assert feed.seen({b"n/a": 90}, 106) is None  # deleted before the waiter's read: that read saw it gone
    assert feed.seen({b"n/b": 90}, 101) is None
    for i in range(_REMEMBER):
        feed.record(f"n/{i}".encode(), 200 + i)
    assert feed.floor > 105 and feed.seen({b"n/a": 90}, 105) is None  # trimmed: below the floor now
    assert feed.seen({f"n/{_REMEMBER - 1}".encode(): 1}, 150) == (member, 200 + _REMEMBER - 1)


def _note_reads(store: distlock.AsyncStore, reads: list[str]) -> None:
    """Note the queue reads the store sends (a kazoo method, an etcd range or ``read_at``; test hooks)."""
    backend: Any = store._backend  # type: ignore[attr-defined]

    def noting(plain: Any, what: str) -> Any:
        def noted(*args: Any, **kwargs: Any) -> Any:
            reads.append(what)
            return plain(*args, **kwargs)

        return noted

    if hasattr(backend, "wire"):
        client = backend.wire.client
        for method in ("get_children_async", "get_async", "exists_async"):
            setattr(client, method, noting(getattr(client, method), method))
        return
    gw = backend.gw
    plain_call = gw.call

    async def call(path: str, *args: Any, **kwargs: Any) -> Any:
        if path == "/v3/kv/range":
            reads.append(path)
        return await plain_call(path, *args, **kwargs)

    gw.call, gw.read_at = call, noting(gw.read_at, "read_at")


@pytest.mark.parametrize("backend", ["zookeeper", "etcd"])
async def test_the_late_look_reads_the_queue_only_if_the_wait_was_woken(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """The look at an acquire's deadline (``try_late``) after a wait that ran out without a wake-up reads
    nothing (nothing ahead went away: the answer could only be "not yet"; a thousand waiters timing out
    together read once each, past their deadlines). After a wait woken by the holder's release it looks, and
    holds."""
    url = request.getfixturevalue(f"{backend}_url")
    name = f"late-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(url) as owner, await distlock.connect_async(url) as store:
        holder = owner.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        target: Any = store._backend  # type: ignore[attr-defined]
        reads: list[str] = []
        _note_reads(store, reads)

        async def queued() -> tuple[Claim, Any, Any]:
            claim = Claim(name, Mode.EXCLUSIVE, ids.new_token(), ids.owner_id("late"), ttl=30)
            attempt = target.attempt(claim)
            grant = await attempt.try_acquire()
            assert not grant.acquired
            return claim, attempt, grant

        _, attempt, grant = await queued()
        await attempt.wait(grant, 0.3)  # runs out: nothing woke it
        reads.clear()
        assert not (await attempt.try_late()).acquired
        assert reads == [], reads
        await attempt.abandon()

        claim, attempt, grant = await queued()
        waiting = asyncio.create_task(attempt.wait(grant, 5.0))
        await asyncio.sleep(0.2)
        await holder.release()  # wakes it
        await asyncio.wait_for(waiting, 10)
        assert (await attempt.try_late()).acquired  # woken: it looks, and holds
        assert await target.release(claim)
        info = await owner.inspect(name)
        assert info is None or not (info.holders or info.waiters), info


async def test_redis_fair_waiters_do_not_keep_a_connection_each(redis_url: str) -> None:
    """A hundred fair waiters of one store (fair claims skip the store's local line: each task tries on its own)
    open connections for their first tries at once; while they wait, the store keeps at most ``MAX_IDLE`` of
    them. Before, every one stayed open (about 20 KB of server memory per waiting task)."""
    import redis

    from distlock._backends.redis._async.wire import MAX_IDLE

    probe = redis.Redis.from_url(redis_url)
    try:
        before = int(probe.info("clients")["connected_clients"])
        name = f"waiters-{uuid.uuid4().hex[:8]}"
        async with await distlock.connect_async(redis_url) as store:
            holder = store.lock(name, ttl=30)
            assert await holder.acquire(timeout=10)

            async def waiter() -> bool:
                lock = store.lock(name, ttl=30, fair=True)
                got = await lock.acquire(timeout=30)
                if got:
                    await lock.release()
                return got

            tasks = [asyncio.create_task(waiter()) for _ in range(100)]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while (info := await store.inspect(name)) is None or info.waiters < 100:
                assert loop.time() < deadline, f"the waiters never all queued: {info}"
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.2)  # the first tries' answers are in: their connections back or closed
            during = int(probe.info("clients")["connected_clients"]) - before
            assert during <= min(MAX_IDLE + 4, 50), f"{during} connections open for 100 waiting tasks"
            await holder.release()
            assert await asyncio.wait_for(asyncio.gather(*tasks), 30) == [True] * 100  # each in turn
    finally:
        probe.close()


async def test_etcd_waiters_giving_up_together_delete_their_keys_in_a_few_txns(etcd_url: str) -> None:
    """30 waiters of one store time out at once: their keys go in a few txns (each deletes every key that
    came while the one before ran, if each still has its create revision), not one delete each; each acquire
    returns False and no key is left."""
    name = f"waiters-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(etcd_url) as owner, await distlock.connect_async(etcd_url) as store:
        holder = owner.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        gw: Any = store._backend.gw  # type: ignore[attr-defined]
        plain = gw.delete_all_if_created
        sizes: list[int] = []

        async def counted(created: Any, *args: Any, **kwargs: Any) -> Any:
            sizes.append(len(created))
            return await plain(created, *args, **kwargs)

        gw.delete_all_if_created = counted
        locks = [store.lock(name, ttl=30) for _ in range(30)]
        assert await asyncio.gather(*(lock.acquire(timeout=1.0) for lock in locks)) == [False] * 30
        # batched: not one txn per key (how many batches depends on how busy the machine is)
        assert sum(sizes) == 30 and len(sizes) < 30 and max(sizes) > 1, sizes
        info = await owner.inspect(name)
        assert info is not None and not info.waiters, info
        await holder.release()


async def test_etcd_a_batch_delete_where_one_key_changed_deletes_the_others_one_by_one(etcd_url: str) -> None:
    """One key of the batch is gone (its lease expired, an operator deleted it) or is a later key: the txn
    deletes nothing, and each key is then deleted alone if it still has its create revision."""
    async with await distlock.connect_async(etcd_url) as store:
        gw: Any = store._backend.gw  # type: ignore[attr-defined]
        prefix = f"batch-{uuid.uuid4().hex[:8]}/".encode()
        created = []
        for i in range(3):
            key = prefix + str(i).encode()
            data = await gw.call("/v3/kv/put", {"key": keys.b64(key), "value": keys.b64(b"")})
            created.append((key, int(data["header"]["revision"])))
        await gw.call("/v3/kv/deleterange", {"key": keys.b64(created[1][0])})
        assert await gw.delete_all_if_created(created, op_timeout=5) == {
            created[0][0]: True,
            created[1][0]: False,
            created[2][0]: True,
        }
        left = await gw.call("/v3/kv/range", keys.prefix_range(prefix))
        assert not left.get("kvs"), left


async def test_zookeeper_waiters_giving_up_together_delete_their_children_in_a_few_multis(zookeeper_url: str) -> None:
    """30 waiters of one store time out at once: their children go in a few multi requests (each deletes every
    child of the attempts that came while the one before ran), not one delete each; each acquire returns
    False and no child is left."""
    name = f"waiters-{uuid.uuid4().hex[:8]}"
    async with (
        await distlock.connect_async(zookeeper_url) as owner,
        await distlock.connect_async(zookeeper_url) as store,
    ):
        holder = owner.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        nodes: Any = store._backend.nodes  # type: ignore[attr-defined]
        plain, single = nodes.delete_all, nodes.delete
        sizes: list[int] = []
        alone: list[str] = []

        def counted(paths: Any) -> Any:
            sizes.append(len(paths))
            return plain(paths)

        def one(path: str) -> Any:
            alone.append(path)
            return single(path)

        nodes.delete_all, nodes.delete = counted, one
        locks = [store.lock(name, ttl=30) for _ in range(30)]
        assert await asyncio.gather(*(lock.acquire(timeout=1.0) for lock in locks)) == [False] * 30
        assert sum(sizes) == 30 and len(sizes) <= 10 and not alone, (sizes, alone)
        info = await owner.inspect(name)
        assert info is not None and not info.waiters, info
        await holder.release()


def test_zookeeper_a_multi_delete_with_one_child_gone_deletes_the_others_one_by_one(zookeeper_url: str) -> None:
    """One child of the batch is already gone (its session ended, an operator deleted it): the server deletes
    none of the multi, and each attempt is then cleaned up alone; the others' children go, and nothing is
    reported as an error."""
    from distlock._backends.zookeeper.cleanup import Traces
    from distlock._backends.zookeeper.nodes import Entry

    with distlock.connect(zookeeper_url) as store:
        backend: Any = store._backend  # type: ignore[attr-defined]
        parent = f"{backend.root}/batch-{uuid.uuid4().hex[:8]}"
        client = backend.wire.client
        client.ensure_path(parent)
        made = [client.create(f"{parent}/n-", b"", sequence=True).rsplit("/", 1)[1] for _ in range(3)]
        client.delete(f"{parent}/{made[1]}")
        many = []
        for child in made:
            node = Entry(parent, "n-")
            node.name, node.created = child, True
            many.append(Traces(f"t-{child}", "batch", node=node, lease=Entry(parent, "l-")))
        with backend.wire.bounded(None, None):
            backend.cleanup.abandon_all(many)
        assert client.get_children(parent) == []
        assert all(t.node.name is None for t in many)
        assert backend.cleanup.deferred == []
        client.delete(parent)

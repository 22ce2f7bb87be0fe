"""Redis direct hand-over (docs/redis.md "Waiting"; docs/models/redis_handover.pml): the release that finds an
exclusive waiter queued grants it the name in the same script, with a lease capped at the waiter's queue
deadline, and pushes ``token|fence|stamp``; the waiter holds from the push, without a round trip, and its
first renewal extends the lease to its TTL. Real redis-server; the waiters are other stores (other processes'
worth: threads of one store queue locally first)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import redis

import distlock
from distlock import BackendError
from distlock._backends.redis import calls as rc
from distlock._backends.redis import keys as rk
from distlock._backends.redis import lua
from distlock._core import ids
from distlock._core.timing import WAITER_TTL
from distlock._core.types import Mode
from tests.waiting import Waiter, until, wake_ups


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


def _queued(raw: redis.Redis, name: str, n: int = 1) -> bool:
    """Until ``n`` waiters are queued and the first is asleep on its wake-up: subscribed, and its re-check under
    the live subscription has refreshed its queue deadline (a release before that finds it by that re-check,
    which confirms the grant itself: the push is not needed then, and these tests look at the push)."""
    q = "{" + name + "}:q"
    if not until(lambda: raw.zcard(q) >= n):
        return False
    first = raw.zrange("{" + name + "}:qd", 0, 0, withscores=True)[0]
    channel = "{" + name + "}:wake"
    return until(
        lambda: raw.pubsub_numsub(channel)[0][1] >= 1 and raw.zscore("{" + name + "}:qd", first[0]) != first[1]
    )


def test_release_grants_the_queued_waiter_in_the_same_step(redis_url: str, raw: redis.Redis, name: str) -> None:
    """The release leaves the name held by the waiter (no moment free: a redis-py Lock cannot slip in), pushes
    the grant with the next fence, and the waiter holds with that fence; the lease it was granted is capped at
    its queue deadline, and its renewal then extends it to the TTL."""
    with distlock.connect(redis_url) as a, distlock.connect(redis_url) as b:
        holder = a.lock(name, ttl=30)
        assert holder.acquire()
        waiter = Waiter(b.lock(name, ttl=30))
        assert _queued(raw, name)
        sub = wake_ups(raw, name)
        fence0 = holder.fence
        holder.release()
        token = raw.get(name)  # read at once: the release itself set it
        theirs = raw.lock(name, timeout=10)
        assert not theirs.acquire(blocking=False)  # never free in between
        msg = sub.get_message(timeout=5)
        sub.close()
        assert msg is not None and msg["type"] == "pmessage"
        assert msg["channel"].decode().startswith("{" + name + "}:wake:")  # the waiter's store's reply channel
        pushed, fence, _stamp = msg["data"].decode().split("|")
        assert token is not None and pushed == token.decode()
        assert waiter.granted()
        assert waiter.fence == int(fence) > fence0  # type: ignore[operator]
        assert until(lambda: raw.pttl(name) > WAITER_TTL * 1000)  # the renewal's "confirm": the full TTL
        waiter.finish()
        assert waiter.owned
        assert raw.get(name) is None


def test_a_waiter_that_dies_in_the_queue_loses_its_grant_by_its_queue_deadline(
    redis_url: str, raw: redis.Redis, name: str
) -> None:
    """F12: a grant to a waiter that never takes it (here an entry whose waiter is gone) ends when that
    waiter's queue entry would have run out, not a whole TTL later; the next waiter then gets in."""
    member = "lock|dead-waiter"
    now_ms = int(time.time() * 1000)
    with distlock.connect(redis_url) as a:
        holder = a.lock(name, ttl=60)
        assert holder.acquire()
        marker = raw.hget("distlock:fences", "e").decode()  # type: ignore[union-attr]
        raw.zadd("{" + name + "}:q", {member: 1})
        raw.zadd("{" + name + "}:qd", {member: now_ms + int(WAITER_TTL * 1000)})
        raw.hset("{" + name + "}:qa", member, f"0|60000|{marker}|ghost")
        holder.release()
        assert raw.get(name) == b"dead-waiter"
        assert 0 < raw.pttl(name) <= WAITER_TTL * 1000
        nxt = a.lock(name, ttl=10)
        started = time.monotonic()
        assert nxt.acquire(timeout=WAITER_TTL + 10)
        assert time.monotonic() - started < WAITER_TTL + 3
        nxt.release()


def test_a_handed_over_lease_counts_from_the_queue_entry(redis_url: str, raw: redis.Redis, name: str) -> None:
    """The grant's lease is capped at the waiter's queue deadline, and without renewal the holding ends locally
    (``lost``) within it, whatever its TTL: its lease counts from the send of the try that queued it."""
    with distlock.connect(redis_url) as a, distlock.connect(redis_url) as b:
        holder = a.lock(name, ttl=30)
        assert holder.acquire()
        lock = b.lock(name, ttl=30, auto_renew=False)
        got = threading.Event()
        fences: list[int | None] = []

        def waiter() -> None:
            assert lock.acquire(timeout=30)
            fences.append(lock.fence)  # the fence is the owner's (this thread's)
            got.set()

        t = threading.Thread(target=waiter)
        t.start()
        assert _queued(raw, name)
        fence0 = holder.fence
        holder.release()
        assert 0 < raw.pttl(name) <= WAITER_TTL * 1000  # capped at the queue deadline, not the 30 s TTL
        assert got.wait(10)
        t.join(10)
        assert len(fences) == 1 and fences[0] > fence0  # type: ignore[operator]
        assert lock.lost.wait(WAITER_TTL + 5)  # not 30 s: the grant's own lease, counted from before it


def test_a_waiter_behind_a_replaced_fence_counter_gets_a_higher_fence(
    redis_url: str, raw: redis.Redis, name: str
) -> None:
    """A counter that is gone (evicted, deleted) while a waiter is queued: the release grants the waiter nothing
    from the old counter. Either the release wakes it and its own try counts from the counter started again at
    the server clock, or (if the waiter's re-check already saw the new counter) the release hands the name
    over from that new counter: whichever runs, the waiter's fence is above the holder's, never back to 1."""
    with distlock.connect(redis_url) as a, distlock.connect(redis_url) as b:
        holder = a.lock(name, ttl=30)
        assert holder.acquire()
        fence0 = holder.fence
        assert fence0 is not None
        fences: list[int | None] = []
        errors: list[BaseException] = []

        def waiter() -> None:
            try:
                lk = b.lock(name, ttl=30)
                if lk.acquire(timeout=30):
                    fences.append(lk.fence)
                    lk.release()
            except BackendError as err:
                errors.append(err)

        t = threading.Thread(target=waiter)
        t.start()
        assert _queued(raw, name)
        sub = wake_ups(raw, name)
        raw.delete("distlock:fences")
        holder.release()
        t.join(30)
        msg = sub.get_message(timeout=5)
        sub.close()
        assert errors == [] and len(fences) == 1 and fences[0] is not None and fences[0] > fence0
        if msg is not None and msg["data"].count(b"|") == 2:  # a hand-over: its fence is the new counter's
            assert int(msg["data"].split(b"|")[1]) > fence0


def test_shared_kinds_keep_the_wake_up(redis_url: str, raw: redis.Redis, name: str) -> None:
    """Readers and permits are not handed over (they keep the wake-up and try): the release of a writer with a
    reader queued leaves the name free and publishes the reader's token alone."""
    with distlock.connect(redis_url) as a, distlock.connect(redis_url) as b:
        writer = a.rwlock(name, ttl=30).write
        assert writer.acquire()
        got = threading.Event()

        def reader() -> None:
            lock = b.rwlock(name, ttl=30).read
            assert lock.acquire(timeout=30)
            got.set()
            lock.release()

        t = threading.Thread(target=reader)
        t.start()
        assert _queued(raw, name)
        sub = wake_ups(raw, name)
        writer.release()
        msg = sub.get_message(timeout=5)
        sub.close()
        assert msg is not None and b"|" not in msg["data"]
        assert got.wait(10)
        t.join(10)


def test_a_waiter_that_names_no_reply_channel_is_woken_on_the_names_channel(
    redis_url: str, raw: redis.Redis, name: str
) -> None:
    """A waiter of a distlock version before the reply channels queues with a try of nine arguments: the
    release hands it the name and pushes the grant on ``{N}:wake``, which every store of that version reads."""
    with distlock.connect(redis_url) as a:
        holder = a.lock(name, ttl=30)
        assert holder.acquire()
        token = ids.new_token()
        stamp = rc.stamp_of(time.monotonic())
        args = rc.acquire_args(token, Mode.EXCLUSIVE, 30.0, 1, False, "older-client", WAITER_TTL, "", stamp)
        assert args[-1] == ""  # the reply channel, which an older version does not send
        keys = rk.keys(name)
        reply = raw.evalsha(lua.SHA["acquire"], len(keys), *keys, rk.channel(name), *args[:-1])  # type: ignore[no-untyped-call]
        assert int(reply[0]) == 0 and raw.hlen("{" + name + "}:qw") == 0  # queued, no reply channel
        sub = raw.pubsub()
        sub.subscribe(rk.channel(name))
        assert sub.get_message(timeout=5)["type"] == "subscribe"  # type: ignore[index]
        holder.release()
        msg = sub.get_message(timeout=5)
        sub.close()
        assert msg is not None and msg["type"] == "message", msg
        assert msg["data"].decode().startswith(token + "|")  # the hand-over: token|fence|stamp
        assert raw.get(name) == token.encode()
        raw.delete(name, "{" + name + "}:i")


async def test_async_waiter_takes_the_hand_over(redis_url: str, raw: redis.Redis, name: str) -> None:
    import asyncio

    a = await distlock.connect_async(redis_url)
    b = await distlock.connect_async(redis_url)
    try:
        holder = a.lock(name, ttl=30)
        assert await holder.acquire()
        lock = b.lock(name, ttl=30)

        async def waiter() -> int | None:
            assert await lock.acquire(timeout=30)
            fence = lock.fence  # the fence is the owner's (this task's)
            await lock.release()
            return fence

        task = asyncio.ensure_future(waiter())
        await asyncio.to_thread(_queued, raw, name)
        sub = wake_ups(raw, name)
        fence0 = holder.fence
        await holder.release()
        fence = await asyncio.wait_for(task, 10)
        msg = sub.get_message(timeout=5)
        sub.close()
        assert msg is not None and msg["data"].count(b"|") == 2
        assert fence == int(msg["data"].split(b"|")[1]) > fence0  # type: ignore[operator]
    finally:
        await a.aclose()
        await b.aclose()

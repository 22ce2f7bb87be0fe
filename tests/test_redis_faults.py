"""Redis under gray link failures (a loopback proxy between the client and the server): a half-open pooled
connection does not stop the renewal of other locks, a release whose reply was lost and that is retried
does not report a loss it did not have. Real redis-server processes only."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import distlock
from distlock import _aconn
from distlock._backends.redis import keys as rk
from distlock.checker.proxy import FaultProxy
from tests.waiting import Waiter, take_in_thread, until
from tools.servers.proc import ServerProc
from tools.servers.redis import redis_server


def _port(url: str) -> tuple[str, int]:
    hostport = url.split("//", 1)[1].split("/", 1)[0]
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def proxy(redis_url: str) -> Iterator[FaultProxy]:
    host, port = _port(redis_url)
    p = FaultProxy(host, port).start()
    try:
        yield p
    finally:
        p.close()


def test_half_open_pooled_connections_do_not_stop_renewal(proxy: FaultProxy, name: str) -> None:
    """Every connection open at some moment goes silent for good (no FIN); a lock taken afterwards, and the
    one held before, keep being renewed on new connections."""
    url = f"redis://127.0.0.1:{proxy.port}/0"  # default timeouts (5 s), longer than the TTL
    with distlock.connect(url) as store:
        before = store.lock(name, ttl=2)
        assert before.acquire()
        time.sleep(1.0)  # a renewal ran: the pool and the short path each hold an open connection
        assert proxy.half_open() >= 1
        after = store.lock(name + "-after", ttl=2)
        assert after.acquire(timeout=5)
        time.sleep(3.0)  # longer than the TTL: both live only if renewed
        assert not after.lost.is_set() and after.owned()
        assert not before.lost.is_set() and before.owned()
        after.release()
        before.release()


async def test_half_open_pooled_connections_do_not_stop_renewal_async(proxy: FaultProxy, name: str) -> None:
    url = f"redis://127.0.0.1:{proxy.port}/0"
    store = await distlock.connect_async(url)
    try:
        before = store.lock(name, ttl=2)
        assert await before.acquire()
        await asyncio.sleep(1.0)
        assert proxy.half_open() >= 1
        after = store.lock(name + "-after", ttl=2)
        assert await after.acquire(timeout=5)
        await asyncio.sleep(3.0)
        assert not after.lost.is_set() and await after.owned()
        assert not before.lost.is_set() and await before.owned()
        await after.release()
        await before.release()
    finally:
        await store.aclose()


def test_a_retried_release_that_had_succeeded_is_not_a_loss(proxy: FaultProxy, redis_url: str, name: str) -> None:
    """The reply of a release is held back longer than the socket timeout: the driver gives up on that
    connection and sends the release again on a new one, which finds the key gone (the first one ran). Inside
    the lease that can only be our own release: success, not LockLost."""
    url = f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=0.5&connect_timeout=1"
    with distlock.connect(url) as store:
        lock = store.lock(name, ttl=30)
        assert lock.acquire()
        held = proxy.delay_next(b":1\r\n", 2.0, direction="down")  # the release's reply (no renewal due)
        lock.release()  # raised LockLost before
        assert held.is_set()
        assert store.inspect(name) is None
        with store.lock(name, ttl=5):
            pass


def test_a_release_after_the_lease_may_have_ended_still_reports_the_loss(own_server: ServerProc, name: str) -> None:
    """The rule is bounded by the lease: a token gone after the local lease end is a loss, retried or not."""
    with distlock.connect(own_server.url) as store:
        lock = store.lock(name, ttl=1)
        assert lock.acquire()
        r = redis.Redis.from_url(own_server.url)
        r.delete(name)  # gone behind our back
        r.close()
        assert lock.lost.wait(5)
        with pytest.raises(distlock.LockLost):
            lock.release()


@pytest.fixture
def own_server() -> Iterator[ServerProc]:
    with redis_server() as srv:
        yield srv


async def test_a_silent_link_still_ends_an_async_request_at_the_socket_timeout(proxy: FaultProxy, name: str) -> None:
    """distlock's async request path makes its connections without a socket timeout (redis.asyncio would write
    each request under ``asyncio.wait_for``) and bounds each request itself: a release on a connection that
    went silent ends at the socket timeout and is sent again on a new connection, which answers."""
    url = f"redis://127.0.0.1:{proxy.port}/0?socket_timeout=1"
    store = await distlock.connect_async(url)
    try:
        lock = store.lock(name, ttl=60, auto_renew=False)
        assert await lock.acquire()
        assert proxy.half_open() >= 1  # the connection the release would reuse says nothing any more
        async with asyncio.timeout(30):  # generous: only a request left unbounded runs into it
            await lock.release()
        assert not lock.lost.is_set()
    finally:
        await store.aclose()


async def test_async_requests_start_no_task_of_the_driver(redis_url: str, name: str) -> None:
    """An acquire + release pair creates no task through the loop (redis.asyncio's ``send_packed_command``
    wraps a write in ``asyncio.wait_for``, a task per request on Python 3.11, when the connection has a socket
    timeout: ``drv.made`` gives distlock's connections none). Fails if a redis-py release brings such a task
    back on this path."""
    store = await distlock.connect_async(redis_url)
    loop = asyncio.get_running_loop()
    made: list[object] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__qualname__", coro))
        return asyncio.Task(coro, loop=loop, **kwargs)

    try:
        lock = store.lock(name, ttl=30, auto_renew=False)
        await lock.acquire()  # warm: connections and scripts ready
        await lock.release()
        loop.set_task_factory(factory)
        try:
            for _ in range(5):
                await lock.acquire()
                await lock.release()
        finally:
            loop.set_task_factory(None)
        assert made == []
    finally:
        await store.aclose()


async def test_async_requests_arm_no_timer_each_and_read_in_small_chunks(
    redis_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request's bound is one timer per connection (``distlock._aconn``), not ``asyncio.timeout`` around
    each request (a timer in the loop's heap per request); and distlock's connections read at most 64 KiB at
    a time (asyncio's 256 KiB buffer per read costs three system calls a read in some processes)."""
    tuned: list[Any] = []
    small_reads = _aconn.small_reads

    def record(transport: Any) -> None:
        tuned.append(transport)
        small_reads(transport)

    monkeypatch.setattr(_aconn, "small_reads", record)
    store = await distlock.connect_async(redis_url)
    loop = asyncio.get_running_loop()
    armed: list[object] = []
    call_at = loop.call_at

    def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        armed.append(callback)
        return call_at(when, callback, *args, **kwargs)

    try:
        lock = store.lock(name, ttl=30, auto_renew=False)
        await lock.acquire()  # warm: connections, scripts, and the connection's timer armed
        await lock.release()
        monkeypatch.setattr(loop, "call_at", counting)
        for _ in range(20):
            await lock.acquire()
            await lock.release()
        assert len(armed) <= 1, armed  # 40 requests (asyncio.timeout: 40 timers)
        assert tuned and all(t.max_size == 64 * 1024 for t in tuned)
    finally:
        await store.aclose()


def _hand_over(held: Any, waiter: threading.Thread, got: list[float]) -> float:
    """Release ``held`` and return how long after the release the waiting thread got the lock."""
    released = time.monotonic()
    held.release()
    waiter.join(20)
    assert got, "the waiter got the lock"
    return got[0] - released


def test_a_hand_over_pushed_while_the_waiters_connection_is_down_is_not_lost(redis_url: str, name: str) -> None:
    """The server drops the waiting store's pub/sub connection after the waiter's try named its reply channel,
    and the release comes right after: its hand-over is pushed to a channel nobody reads. The waiter must hold
    soon all the same (the dropped read makes it look again, and its store's new subscriptions wake it once
    confirmed; its look finds the grant), not at its 2 s re-check, and with the hand-over's next fence."""
    with (
        distlock.connect(redis_url) as a,
        distlock.connect(redis_url) as b,
        redis.Redis.from_url(redis_url, decode_responses=True) as raw,
    ):
        held = a.lock(name, ttl=10)
        assert held.acquire(timeout=5)
        fence = held.fence
        waiter = Waiter(b.lock(name, ttl=10))
        assert until(lambda: raw.hlen("{" + name + "}:qw") == 1)  # queued, naming its reply channel
        listener = b._backend.node.listener  # type: ignore[attr-defined]
        port = listener._pubsub.connection._sock.getsockname()[1]
        (mine,) = [c for c in raw.client_list(_type="pubsub") if c["addr"].endswith(f":{port}")]
        raw.client_kill(mine["addr"])
        released = time.monotonic()
        held.release()
        assert waiter.granted()
        took = time.monotonic() - released
        assert took < 1.5, took
        assert fence is not None and waiter.fence is not None and waiter.fence > fence  # the hand-over's grant
        info = b.inspect(name)
        assert info is not None and [h.fence for h in info.holders] == [waiter.fence]
        waiter.finish()
        assert waiter.owned


def test_a_waiter_whose_subscription_is_confirmed_late_re_checks_at_once(
    proxy: FaultProxy, redis_url: str, name: str
) -> None:
    """The waiter's SUBSCRIBE reaches the server only after the waiter stopped waiting for its confirmation
    (``SUBSCRIBE_TIMEOUT``), and the holder released in between: that release was pushed to nobody. The
    confirmation, when it comes, must make the waiter re-check (it then finds the name free); before, it slept
    out its re-check slice (2 s), as after a Sentinel failover whose new master the waiter's store learned late."""
    url = f"redis://127.0.0.1:{proxy.port}/0"
    with distlock.connect(redis_url) as a, distlock.connect(url) as b:
        held = a.lock(name, ttl=10)
        assert held.acquire(timeout=5)
        sent = proxy.delay_next(b"SUBSCRIBE", 1.3)  # the waiter's pub/sub connection: its first command
        waiter, got = take_in_thread(b.lock(name, ttl=10), 10)
        assert sent.wait(5), "the waiter subscribed through the proxy"
        time.sleep(0.3)  # the waiter is refused and waits for the confirmation (held back 1.3 s)
        took = _hand_over(held, waiter, got)  # nobody is subscribed on the server yet
    # the confirmation comes ~1 s after the release: then the re-check (its slice would end ~2.7 s after)
    assert took < 1.8, took


def test_waiters_read_the_moved_connection_once_its_subscriptions_are_made_again(
    redis_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listener's pub/sub connection moves (what a Sentinel failover or a cluster failover does) and its
    re-subscribe fails for longer than a waiter waits for a confirmation (the sentinels do not all name the
    new master yet): the waiter ends up waiting while nobody may read. When a retry succeeds, somebody must
    read the new connection: before, the waiter slept out its 2 s re-check slice with the release's push
    unread in the socket (a CI run saw a hand-over 1.99 s after the release following a killed master)."""
    with distlock.connect(redis_url) as holders, distlock.connect(redis_url) as waiters:
        listener = waiters._backend.node.listener  # type: ignore[attr-defined]
        channel = rk.channel(name)
        held = holders.lock(name, ttl=30)
        assert held.acquire(timeout=5)
        waiter, got = take_in_thread(waiters.lock(name, ttl=30), 15)
        assert until(lambda: listener.live(channel) is not None), "the waiter subscribed"
        time.sleep(0.1)  # refused under the live subscription: it waits for the push
        subscribe = redis.client.PubSub.subscribe
        failing_until = time.monotonic() + 1.5  # longer than the waiter's SUBSCRIBE_TIMEOUT (1 s)

        def refused(self: Any, *args: Any, **kwargs: Any) -> Any:
            if time.monotonic() < failing_until:
                raise redis.ConnectionError("no master known yet (injected)")
            return subscribe(self, *args, **kwargs)

        monkeypatch.setattr(redis.client.PubSub, "subscribe", refused)
        listener.moved()  # what Node.follow does when the sentinels announce a new master
        # a retry (every 0.2 s) subscribes again on the new connection soon after the failures end; the
        # waiter looked last ~0.1 s after the move (and then waited out its 1 s for a confirmation)
        time.sleep(failing_until + 0.5 - time.monotonic())
        assert listener.live(channel) is not None, "somebody read the new subscription's confirmation"
        took = _hand_over(held, waiter, got)
    assert took < 0.5, took


def test_scripts_lost_by_the_server_are_loaded_again_on_distlocks_own_connection(
    redis_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that lost the scripts (a restart, or a replica that a failover promoted: scripts are not
    replicated) answers the next call NOSCRIPT. The scripts are loaded again on the path of that call,
    bounded as it is, not through redis-py's pool: there the load ran with the 5 s socket timeout and raced
    with the pool's reset when the sentinels announced the new master (a waiter right after a killed master
    waited 5 s there, or failed with a closed-socket ``ValueError``)."""
    with distlock.connect(redis_url) as store:
        lock = store.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        lock.release()
        with redis.Redis.from_url(redis_url) as raw:
            raw.script_flush()
        from distlock._backends.redis._sync import node as node_module

        def pooled(*args: Any) -> None:
            raise AssertionError("the scripts were loaded through redis-py's pool")

        monkeypatch.setattr(node_module.drv, "pipeline", pooled)
        assert lock.acquire(timeout=5)
        lock.release()

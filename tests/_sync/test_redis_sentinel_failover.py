# GENERATED from tests/_async/test_redis_sentinel_failover.py by scripts/gen_sync.py: edit that file, not this one.
"""A Sentinel failover away from a frozen master, on the async API; ``tests/_sync/`` is generated from this file.

SIGSTOP keeps the master's sockets open but answers nobody: a connection made to it before the freeze takes
a request and never replies, so a store that kept such connections waits out its own per-request timeout
on each of them (``socket_timeout``, 5 s here) before a new connection asks the sentinels where the master
is now. Only following the sentinels' ``+switch-master`` (``sentinel.py``) drops them at the switch. The
stores here were connected before the freeze; after the switch they must take and release locks on the
new master, and hand a held lock over to a waiter, within a fraction of that timeout (the test fails with
the follower switched off: the first request of each store then takes the full 5 s).
"""

from __future__ import annotations

import logging
from time import monotonic

import pytest

import distlock
from distlock import _rt_sync as rt
from tests.concurrency_sync import run_all, sleep
from tools.servers.redis_sentinel import SentinelDeployment, redis_sentinel

#: what a store logs when it follows a switch (the test waits for it: a switch the store has not seen yet
#: is not what is measured)
FOLLOWED = "Sentinel announced a new master"
#: the stores' per-request timeout: what a request on a connection to the frozen master waits without the
#: follower (the lock's TTL is long enough that the per-try budget, TTL/3, is not shorter)
SOCKET_TIMEOUT = 5.0
TTL = 30.0


def _followed(caplog: pytest.LogCaptureFixture) -> int:
    return sum(FOLLOWED in r.getMessage() for r in caplog.records)


def _on(d: SentinelDeployment, port: int, key: str) -> bool:
    with d.data(port) as r:
        return bool(r.exists(key))


def _queued(store: distlock.Store, name: str, within: float = 5.0) -> None:
    deadline = monotonic() + within
    while monotonic() < deadline:
        info = store.inspect(name)
        if info is not None and info.waiters:
            return
        sleep(0.02)
    raise AssertionError(f"no waiter queued on {name!r} within {within} s")


def _replicated(d: SentinelDeployment) -> None:
    """Wait until the replica has every write made so far (the waiter's queue entry): WAIT counts the writes
    of its own connection, and the replication stream keeps their order, so one write of ours is enough."""
    with d.data(d.master_port()) as r:
        r.set("distlock-test:barrier", 1)
        assert int(r.wait(1, 2000)) >= 1


def test_stores_connected_before_a_frozen_master_follow_the_switch_without_waiting_out_timeouts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="distlock")
    with redis_sentinel() as d:
        query = f"?socket_timeout={SOCKET_TIMEOUT:g}"
        holding = distlock.connect(d.url + query + "&wait_replicas=1")
        fresh = distlock.connect(d.url + query)
        waiting = distlock.connect(d.url + query)
        stores = (holding, fresh, waiting)
        try:
            holder = holding.lock("frozen", ttl=TTL)
            got: list[float] = []
            fences: list[int | None] = []
            marks: dict[str, float] = {}

            def wait() -> None:
                while waiting.inspect("frozen") is None:  # the holder holds first
                    sleep(0.02)
                lock = waiting.lock("frozen", ttl=TTL)
                assert lock.acquire(timeout=30)
                got.append(monotonic())
                fences.append(lock.fence)
                lock.release()

            def fail_over() -> None:  # the holder's owner (a lock is released by its owner)
                assert holder.acquire(timeout=5)  # wait_replicas=1: the key is on the replica too
                assert holder.fence is not None
                marks["first"] = holder.fence
                # each store's request path keeps an idle connection to the master that is about to freeze
                assert holder.owned()
                with fresh.lock("warm", ttl=TTL):
                    pass
                _queued(holding, "frozen")
                rt.offload(_replicated, d)
                old = d.master_port()
                frozen = d.by_port(old)
                frozen.pause()
                try:
                    new = rt.offload(d.wait_master, old)
                    marks["switched"] = switched = monotonic()
                    # measured from when the stores have seen the switch (without the follower: 3 s later)
                    while _followed(caplog) < len(stores) and monotonic() < switched + 3:
                        sleep(0.02)
                    lock = fresh.lock("after", ttl=TTL)
                    assert lock.acquire(timeout=20)
                    assert rt.offload(_on, d, new, "after")  # taken on the new master
                    lock.release()
                    marks["fresh"] = monotonic()
                    holder.release()
                    marks["released"] = monotonic()
                    deadline = monotonic() + 20
                    while not got and monotonic() < deadline:
                        sleep(0.01)
                finally:
                    frozen.resume()

            run_all(wait, fail_over)
        finally:
            for store in stores:
                store.close()
    switched, after, released = marks["switched"], marks["fresh"], marks["released"]
    # stores connected before the freeze: a lock taken and released on the new master, then the release of
    # one held since before, each well below one request timeout (measured: a few ms; without the follower
    # the first request on each store's old connection waits it out: >= SOCKET_TIMEOUT). The bounds are half of
    # that timeout: what they catch is seconds, and a loaded CI machine adds hundreds of milliseconds.
    assert after - switched < SOCKET_TIMEOUT / 2, after - switched
    assert released - after < SOCKET_TIMEOUT / 2, released - after
    # the waiter, queued before the freeze, is pushed on the new master (measured: 1-10 ms), not found by
    # its re-check (a slice of MAX_WAIT_SLICE = 2 s; its re-check that was in flight to the frozen master was cut
    # short at the switch, not cut: ~4 s): bounded below the slice, with room for a loaded machine
    assert got and got[0] - released < 1.5, [g - released for g in got]
    assert fences[0] is not None and fences[0] > marks["first"]
    assert _followed(caplog) >= len(stores), "a store did not log that it followed the switch"

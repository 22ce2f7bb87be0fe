# GENERATED from tests/_async/test_redis_one_hop.py by scripts/gen_sync.py: edit that file, not this one.
"""One hop from a push to ``acquire()`` returning, on the async API; ``tests/_sync/`` is generated from this file.

While a waiter waits, it reads the store's pub/sub connection itself (``listener.py``, the read role): the
push that hands it the lock is read and dispatched in the waiter's own thread (task), not in the listener's
background thread (task) and then handed over. An observer registered on the name's channel (the listener's
public ``add``) is called by whoever dispatches a message, so it records the owner (thread or task) that read
each push. Fails without the read role: the background reader then dispatches every push.
"""

from __future__ import annotations

from time import monotonic

import distlock
from distlock import _rt_sync as rt
from distlock._backends.redis import keys as rk
from tests.concurrency_sync import run_all, sleep

#: longer than the background reader's longest read (listener.COLD_SLICE): by then the waiter reads
HOLD = 0.8
ROUNDS = 3


def test_the_push_is_read_by_the_waiting_thread_itself(redis_url: str, name: str) -> None:
    with distlock.connect(redis_url) as holder, distlock.connect(redis_url) as waiter:
        readers: list[object] = []
        listener = waiter._backend.node.listener
        listener.add(rk.channel(name), "test-observer", lambda: readers.append(rt.owner_key()), observer=True)
        held = holder.lock(name, ttl=10)
        taken = waiter.lock(name, ttl=10)
        me: list[object] = []
        for _ in range(ROUNDS):
            readers.clear()

            def wait() -> None:
                deadline = monotonic() + 10
                while not (info := waiter.inspect(name)) or not info.holders:  # the holder holds it
                    assert monotonic() < deadline
                    sleep(0.01)
                me.append(rt.owner_key())
                assert taken.acquire(timeout=10)
                assert taken.fence is not None and taken.fence > 0
                taken.release()  # by its owner (this thread or task)

            def hold() -> None:
                assert held.acquire()
                deadline = monotonic() + 10
                while not (info := holder.inspect(name)) or not info.waiters:  # queued: it waits now
                    assert monotonic() < deadline
                    sleep(0.01)
                sleep(HOLD)
                held.release()

            run_all(wait, hold)
            # the push that handed the lock over was dispatched by the waiter's own thread (task)
            assert me[-1] in readers, (me[-1], readers)

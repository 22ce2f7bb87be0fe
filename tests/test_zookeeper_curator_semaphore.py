"""A weighted semaphore shared with Apache Curator (the Java peer of test_zookeeper_curator.py): Curator's
``InterProcessSemaphoreV2`` following a ``SharedCount`` on ``<path>/%count`` and a distlock semaphore on the same
path count each other's leases against one capacity, a Curator ``acquire(2)`` and a distlock
``acquire(permits=2)`` exclude each other as the capacity says, and a resize on either side governs the other.
One JVM for the whole story (the suite's time budget)."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

import distlock
from distlock._backends.zookeeper import layout
from tests.test_zookeeper_curator import Peer, _wait_for, path, peer, peer_classpath, store

__all__ = ["path", "peer", "peer_classpath", "store"]  # the fixtures this module uses


def _taken(store: distlock.Store, path: str) -> int:
    info = store.inspect(path)
    return 0 if info is None else info.taken or 0


def test_curator_shared_count_semaphore_and_distlock_share_capacity_both_ways(
    store: distlock.Store, peer: Peer, path: str
) -> None:
    count = layout.count_path(path)
    sem = store.semaphore(path, permits=3)
    # distlock first: its first acquire stores the capacity where Curator's SharedCount reads it
    assert sem.acquire(timeout=10, permits=2)
    assert peer.cmd(f"count-start {count} 9") == "OK 3"  # the stored 3, not Curator's seed
    # one permit left: Curator's acquire(2) gets none (it returns the one it got when its timeout ends)
    assert peer.cmd("take 2 500") == "OK false"
    info = store.inspect(path)
    assert info is not None and info.permits == 3 and info.taken == 2, info
    assert [h.permits for h in info.holders] == [2]
    assert peer.cmd("take 1 10000") == "OK true"  # the last permit
    other = store.semaphore(path, permits=None)  # follows the stored capacity
    assert not other.acquire(blocking=False)
    assert _taken(store, path) == 3

    # a Curator acquire(2) queued while distlock holds 2 of 3: in once distlock's holding goes, all of it at once
    peer.send("take 2 30000")
    assert peer.pending(0.5)
    sem.release()
    assert peer.reply(30) == "OK true"
    assert _taken(store, path) == 3  # Curator's 1 + 2

    # a distlock acquire(permits=2) waits for Curator's two leases, then takes both permits at once
    got: list[bool] = []
    done = threading.Event()

    def hold() -> None:  # a holding is its thread's: acquired and released there
        got.append(other.acquire(timeout=30, permits=2))
        done.wait(60)
        other.release()

    waiter = threading.Thread(target=hold)
    waiter.start()
    time.sleep(0.5)
    assert not got and _taken(store, path) == 3  # it waits without taking one of its two
    assert peer.cmd("untake") == "OK released"  # Curator's single lease: one free, still not two
    time.sleep(0.3)
    assert not got
    assert peer.cmd("untake") == "OK released"  # Curator's acquire(2): three free
    assert _wait_for(lambda: got == [True])
    assert _taken(store, path) == 2

    # distlock resizes: Curator's SharedCount hears it, and its semaphore lets two more in
    assert sem.set_permits(5) is True
    assert _wait_for(lambda: peer.cmd("count-get") == "OK 5")
    assert peer.cmd("take 3 10000") == "OK true"  # 2 + 3 = 5
    assert not sem.acquire(blocking=False)
    # Curator shrinks it (a versioned setData): holders keep theirs, distlock sees the new size
    assert peer.cmd("count-set 2") == "OK true"
    info = store.inspect(path)
    assert info is not None and info.permits == 2 and info.taken == 5, info
    assert peer.cmd("untake") == "OK released"
    assert not sem.acquire(timeout=0.3)  # 2 held of 2
    # the users built with the first size go on (the declared size is not the one in force); another size is
    # refused while the semaphore is in use
    with pytest.raises(distlock.ConfigError, match="declared with permits=3"):
        store.semaphore(path, permits=2).acquire(timeout=1)
    done.set()
    waiter.join(30)
    # the last one gone takes the stored numbers with it (Curator's SharedCount keeps its last value)
    assert store._backend.wire.client.exists(count) is None
    assert store.inspect(path) is None


def test_a_dead_last_holder_s_numbers_do_not_bind_the_next_first_user(zookeeper_url: str, path: str) -> None:
    """The last holder's session ends without a release (a crash): its capacity node stays, as a leftover that
    the next holder of the internal mutex, queued after the last lease went, declares anew."""
    dead = distlock.connect(zookeeper_url)
    assert dead.semaphore(path, permits=3).acquire(timeout=10, permits=2)
    dead._backend.wire.client.stop()  # the session closes: the leases go, the persistent capacity stays
    with distlock.connect(zookeeper_url) as store:
        client = store._backend.wire.client
        assert client.get(layout.count_path(path))[0] == layout.count_bytes(3)
        sem = store.semaphore(path, permits=5)
        assert sem.acquire(timeout=10, permits=4)  # no mismatch with the dead user's 3, and room for 4
        info = store.inspect(path)
        assert info is not None and info.permits == 5 and info.taken == 4
        sem.release()
        assert client.exists(layout.count_path(path)) is None
    with contextlib.suppress(distlock.LockError):
        dead.close()

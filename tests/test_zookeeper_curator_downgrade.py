"""Read-write lock downgrades next to Apache Curator on one path (the Java peer of test_zookeeper_curator.py).

A distlock downgrade keeps its write node in the queue until its read is released, so a Curator writer queued
behind it never holds beside that read; a Curator downgrade (write, then read, then release write) leaves a
Curator reader that distlock readers share with and distlock writers wait for."""

from __future__ import annotations

import distlock
from tests.test_zookeeper_curator import Peer, path, peer, peer_classpath, store

__all__ = ["path", "peer", "peer_classpath", "store"]  # the fixtures this module uses


def test_a_distlock_downgrade_keeps_a_queued_curator_writer_out_until_its_read_ends(
    store: distlock.Store, peer: Peer, path: str
) -> None:
    rw = store.rwlock(path)
    assert rw.write.acquire(timeout=10)
    peer.send("acquire write 30000")  # queued behind distlock's write node
    assert peer.pending(0.5)
    assert rw.read.acquire(blocking=False)  # the downgrade's read: at once, Curator's writer notwithstanding
    rw.write.release()
    assert peer.pending(1.0)  # the read holds: Curator's writer, queued ahead of it, stays out
    rw.read.release()
    assert peer.reply(30) == "OK true"  # the read's release took the kept write node with it
    assert not store.rwlock(path).read.acquire(timeout=0.3)
    assert peer.cmd("release write") == "OK released"


def test_a_curator_downgrade_shares_with_distlock_readers_and_keeps_distlock_writers_out(
    store: distlock.Store, peer: Peer, path: str
) -> None:
    assert peer.cmd("acquire write 10000") == "OK true"
    assert peer.cmd("acquire read 10000") == "OK true"  # Curator's downgrade: the write owner takes read
    assert peer.cmd("release write") == "OK released"
    rw = store.rwlock(path)
    assert rw.read.acquire(timeout=10)  # a reader beside Curator's
    other = store.rwlock(path).write
    assert not other.acquire(timeout=0.5)
    rw.read.release()
    assert not other.acquire(timeout=0.3)  # Curator's read still holds
    assert peer.cmd("release read") == "OK released"
    assert other.acquire(timeout=10)
    other.release()

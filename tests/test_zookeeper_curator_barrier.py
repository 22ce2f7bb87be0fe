"""Double barriers next to Apache Curator on one path (the Java peer of test_zookeeper_curator.py): a distlock
``double_barrier`` and Curator's ``DistributedDoubleBarrier`` on the path ``barrier_path`` gives the name enter
and leave together, whichever comes first, and a distlock entry that timed out is not counted by Curator."""

from __future__ import annotations

import threading

import distlock
from distlock._backends.zookeeper.barrier import barrier_path
from tests.test_zookeeper_curator import Peer, path, peer, peer_classpath, store

__all__ = ["path", "peer", "peer_classpath", "store"]  # the fixtures this module uses


def _in_thread(fn: object) -> tuple[threading.Thread, list[object]]:
    out: list[object] = []
    t = threading.Thread(target=lambda: out.append(fn()))  # type: ignore[operator]
    t.start()
    return t, out


def _nodes(store: distlock.Store, path: str) -> list[str] | None:
    """The children of the double barrier's node, read past distlock; None when the node is gone."""
    zk = store._backend.wire.client
    return (
        None
        if zk.exists(barrier_path("double barrier", path)) is None
        else zk.get_children(barrier_path("double barrier", path))
    )


def test_curator_enters_first_and_a_distlock_member_trips_it_then_both_leave(
    store: distlock.Store, peer: Peer, path: str
) -> None:
    peer.send(f"dbarrier-enter {barrier_path('double barrier', path)} 2 30000")
    assert peer.pending(1.0)  # Curator alone: blocked
    member = store.double_barrier(path, 2)
    assert member.enter(timeout=30)
    assert peer.reply(30) == "OK true"  # distlock's entry made the parties: Curator goes on
    assert "ready" in (_nodes(store, path) or [])
    t, out = _in_thread(lambda: member.leave(timeout=30))
    t.join(1.0)
    assert t.is_alive()  # distlock's leave waits for Curator's member
    assert peer.cmd("dbarrier-leave 30000") == "OK true"
    t.join(30)
    assert out == [True]
    assert _nodes(store, path) is None  # the last to leave removed ready and the barrier's node


def test_distlock_enters_first_and_curator_trips_it(store: distlock.Store, peer: Peer, path: str) -> None:
    member = store.double_barrier(path, 2)
    t, out = _in_thread(lambda: member.enter(timeout=30))
    t.join(1.0)
    assert t.is_alive()  # distlock alone: blocked
    assert peer.cmd(f"dbarrier-enter {barrier_path('double barrier', path)} 2 30000") == "OK true"
    t.join(30)
    assert out == [True]  # Curator's ready node released distlock's member
    peer.send("dbarrier-leave 30000")
    assert member.leave(timeout=30)
    assert peer.reply(30) == "OK true"


def test_a_distlock_entry_that_timed_out_is_not_counted_by_curator(
    store: distlock.Store, peer: Peer, path: str
) -> None:
    assert not store.double_barrier(path, 2).enter(timeout=0.5)
    assert _nodes(store, path) is None  # withdrawn: its member node and the barrier's node are gone
    assert peer.cmd(f"dbarrier-enter {barrier_path('double barrier', path)} 2 1000") == "OK false"

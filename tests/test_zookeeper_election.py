"""Elections on ZooKeeper: interop with Apache Curator's ``LeaderLatch`` both ways (a Java peer,
tests/java/CuratorPeer.java's latch commands, the peer of tests/test_zookeeper_curator.py), and a
leader whose session ends.

A distlock candidate and a LeaderLatch on the same path are one queue: each side sees the other's node
in the same order, reads the other's value (Curator's participant id), and leads once the other leaves.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

import distlock
from distlock._backends.zookeeper import layout
from distlock._core.types import LeaderInfo, LockInfo
from tests.test_zookeeper_curator import Peer, build_peer


def hosts_of(url: str) -> str:
    return url.split("://", 1)[1].split("?", 1)[0]


@pytest.fixture
def store(zookeeper_url: str) -> Iterator[distlock.Store]:
    with distlock.connect(zookeeper_url) as s:
        yield s


@pytest.fixture
def path() -> str:
    return f"/distlock-interop/{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def latch_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_peer(tmp_path_factory)


@pytest.fixture
def latch(latch_classpath: str, zookeeper_url: str, path: str) -> Iterator[Peer]:
    p = Peer(latch_classpath, hosts_of(zookeeper_url), path)
    try:
        yield p
    finally:
        p.close()


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    return t, out


def test_latch_nodes_are_ordered_by_their_sequence_and_read_as_curator_writes_them() -> None:
    a = "_c_ffffffff-0000-4000-8000-000000000000-latch-0000000007"
    b = "_c_00000000-0000-4000-8000-000000000000-latch-0000000009"
    c = "_c_77777777-0000-4000-8000-000000000000-latch-0000000008"
    assert layout.sort_children([b, c, a]) == [a, c, b]  # by sequence, whatever the UUID
    assert layout.verdict(layout.Mode.EXCLUSIVE, [a, c, b], b) == layout.Verdict(False, c)  # watch the predecessor
    assert (
        layout.mark_of(layout.Mode.EXCLUSIVE, "v") == "latch-"
        and layout.mark_of(layout.Mode.EXCLUSIVE, None) == "lock-"
    )
    assert layout.latch_data("h\u00e9:1") == "h\u00e9:1".encode()
    owner, value = layout.latch_holder(b"\xffid", a)
    assert value == "\ufffdid"  # not UTF-8 (a foreign participant): replaced, never an error
    info = LeaderInfo.of(LockInfo("x", "lock", (distlock.HolderInfo(owner, 5, "lock", None, value),)))
    assert info is not None and info.owner is None and info.term == 5


def test_curator_leads_then_hands_over_to_a_distlock_candidate(store: distlock.Store, latch: Peer, path: str) -> None:
    assert latch.cmd("latch-start curator-1") == "OK started"
    assert latch.cmd("latch-await 10000") == "OK true"
    info = store.leader(path)
    assert info is not None and info.value == "curator-1" and info.owner is None
    curator_term = info.term
    assert isinstance(curator_term, int)

    el = store.election(path)
    campaign, won = in_thread(lambda: el.campaign("py-1", timeout=30))
    time.sleep(0.5)
    assert not won and not el.is_leader()  # queued behind Curator's node
    assert latch.cmd("latch-participants") == "OK curator-1 py-1"  # Curator counts our node, in our order
    assert latch.cmd("latch-has") == "OK true"
    info = store.inspect(path)
    assert info is not None and info.waiters == 1

    assert latch.cmd("latch-close") == "OK closed"
    campaign.join(30)
    assert won == [True]
    assert el.term is not None and el.term > curator_term
    info = store.leader(path)
    assert info is not None and (info.value, info.term) == ("py-1", el.term)
    assert latch.cmd("latch-leader") == "OK true py-1"
    el.resign()
    assert store.leader(path) is None


def test_distlock_leads_and_a_curator_latch_waits_for_it(store: distlock.Store, latch: Peer, path: str) -> None:
    seen: list[str | None] = []
    first, stop = threading.Event(), threading.Event()

    def observe() -> None:
        for info in store.observe(path, timeout=30):
            seen.append(None if info is None else info.value)
            first.set()
            if info is None and stop.is_set():
                return

    observer = threading.Thread(target=observe, daemon=True)
    observer.start()
    assert first.wait(10)
    el = store.election(path)
    assert el.campaign("py-1", timeout=10)
    our_term = el.term
    assert our_term is not None

    assert latch.cmd("latch-start curator-2") == "OK started"
    assert latch.cmd("latch-await 500") == "OK false"
    assert latch.cmd("latch-has") == "OK false"
    assert latch.cmd("latch-leader") == "OK true py-1"
    assert latch.cmd("latch-participants") == "OK py-1 curator-2"
    el.resign()
    assert latch.cmd("latch-await 10000") == "OK true"
    info = store.leader(path)
    assert info is not None and info.value == "curator-2" and info.term is not None and info.term > our_term
    # the observer reports each change once it has read it: wait for Curator's turn before ending it (a change
    # shorter than one read may be skipped, as docs/election.md says)
    until = time.monotonic() + 10
    while seen[-1:] != ["curator-2"] and time.monotonic() < until:
        time.sleep(0.01)
    stop.set()
    assert latch.cmd("latch-close") == "OK closed"
    observer.join(30)
    assert not observer.is_alive()
    # the observer saw both leaders, Curator's included, and no leader before and after
    assert seen == [None, "py-1", "curator-2", None]


def test_a_proclaimed_value_is_the_participant_id_curator_reads(store: distlock.Store, latch: Peer, path: str) -> None:
    el = store.election(path)
    assert el.campaign("py-1", timeout=10)
    el.proclaim("py-2")
    # Proclaimed before the latch queued: a proclaim while a LeaderLatch waits right behind the leader would
    # consume the data watch Curator keeps on the leader's node, and Curator re-arms it only on a deletion.
    assert latch.cmd("latch-start curator-2") == "OK started"
    assert latch.cmd("latch-leader") == "OK true py-2"
    assert latch.cmd("latch-await 300") == "OK false"
    el.resign()
    assert latch.cmd("latch-await 10000") == "OK true"
    assert latch.cmd("latch-close") == "OK closed"


@pytest.mark.parametrize("how", ["expired", "closed"])
def test_a_leader_whose_session_ends_is_lost_and_the_next_candidate_leads(zookeeper_url: str, how: str) -> None:
    name = f"e-{uuid.uuid4().hex[:12]}"
    with distlock.connect(zookeeper_url) as victim, distlock.connect(zookeeper_url) as other:
        called: list[object] = []
        leader = victim.election(name, on_lost=called.append)
        assert leader.campaign("victim", timeout=10)
        term = leader.term
        assert term is not None
        nxt = other.election(name)
        campaign, won = in_thread(lambda: nxt.campaign("next", timeout=30))
        time.sleep(0.3)
        assert not won

        client: KazooClient = leader._acquirer.backend.wire.client  # type: ignore[attr-defined]
        if how == "expired":  # another client attaches to the session and closes it: the server expires it
            session_id, password = client.client_id
            thief = KazooClient(hosts=hosts_of(zookeeper_url), client_id=(session_id, password), timeout=4)
            thief.start(20)
            thief.stop()
            thief.close()
        else:  # the kazoo client underneath the store closes its session
            client.stop()
        assert leader.lost.wait(20), "the end of the leader's session must set lost"
        assert leader.term is None
        campaign.join(30)
        assert won == [True]
        assert nxt.term is not None and nxt.term > term
        info = other.leader(name)
        assert info is not None and (info.value, info.term) == ("next", nxt.term)
        for _ in range(50):
            if called:
                break
            time.sleep(0.05)
        assert called == [leader]
        with pytest.raises(distlock.LockLost):
            leader.resign()
        nxt.resign()


def test_a_candidate_behind_a_leader_that_proclaims_takes_over_at_once(store: distlock.Store, path: str) -> None:
    """A proclaim fires the data watch the next candidate keeps on the leader's node; a distlock candidate
    looks again on any event and watches anew (unlike Curator's LeaderLatch, see above)."""
    leader = store.election(path)
    assert leader.campaign("L", timeout=10)
    nxt = store.election(path)
    campaign, won = in_thread(lambda: nxt.campaign("N", timeout=30))
    time.sleep(0.3)
    leader.proclaim("L2")
    time.sleep(0.3)
    assert not won
    resigned = time.monotonic()
    leader.resign()
    campaign.join(30)
    assert won == [True]
    assert time.monotonic() - resigned < 2.0  # woken by the deletion, not by a re-check tick (5 s)
    nxt.resign()

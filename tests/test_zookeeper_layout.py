"""Pure logic of the ZooKeeper layout: name -> path mapping, Curator's child order and grant predicates."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distlock._backends.zookeeper import layout as z
from distlock._backends.zookeeper.semaphore import State
from distlock._core import arbiter
from distlock._core.types import Mode


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("jobs", "/distlock/jobs"),
        ("a/b/c", "/distlock/a/b/c"),
        ("/abs/path", "/abs/path"),
        ("ключ/鍵", "/distlock/ключ/鍵"),
        ("🔒", "/distlock/%F0%9F%94%92"),
        ("a//b", "/distlock/a/%/b"),
        ("a/", "/distlock/a/%"),
        ("./..", "/distlock/%2E/%2E%2E"),
        ("50%", "/distlock/50%25"),
        ("tab\there/x", "/distlock/tab%09here/x"),
    ],
)
def test_name_to_path(name: str, path: str) -> None:
    assert z.lock_path(name) == path
    assert z.name_of(path) == name


def test_mapping_never_collides() -> None:
    names = ["a", "a/", "a//", "/a", "a%", "a%25", "%", "%25", ".", "..", "a/.", "a/%2E", "🔒", "%F0%9F%94%92", "a b"]
    names += ["".join(p) for p in itertools.product(["a", "/", "%", "."], repeat=3)]
    names = [n for n in names if n]
    paths = {z.lock_path(n, "/r") for n in names}
    assert len(paths) == len(set(names))
    for n in names:
        assert z.name_of(z.lock_path(n, "/r"), "/r") == n or n.startswith("/")


def test_root_checks() -> None:
    assert z.check_root("/distlock") is None
    assert z.check_root("/a/b") is None
    for bad in ("distlock", "/", "/a//b", "/zookeeper/x", "/a/../b"):
        assert z.check_root(bad) is not None


def test_curator_order_is_by_sequence_after_the_marker() -> None:
    kids = ["_c_b-lock-0000000003", "_c_a-lock-0000000010", "_c_c-lock-0000000001"]
    assert z.sort_children(kids) == ["_c_c-lock-0000000001", "_c_b-lock-0000000003", "_c_a-lock-0000000010"]
    rw = ["_c_x-__WRIT__0000000002", "_c_y-__READ__0000000001", "_c_z-__READ__0000000003"]
    assert [c[-1] for c in z.sort_children(rw)] == ["1", "2", "3"]


def test_mutex_watches_its_predecessor_only() -> None:
    kids = z.sort_children([f"_c_{i}-lock-000000000{i}" for i in range(4)])
    assert z.verdict(Mode.EXCLUSIVE, kids, kids[0]) == z.Verdict(True)
    assert z.verdict(Mode.EXCLUSIVE, kids, kids[3]) == z.Verdict(False, kids[2])
    with pytest.raises(z.NodeGone):
        z.verdict(Mode.EXCLUSIVE, kids, "_c_9-lock-0000000009")


def test_read_and_write_predicates() -> None:
    r1, w2, r3, w4, r5 = (
        "_c_a-__READ__0000000001",
        "_c_b-__WRIT__0000000002",
        "_c_c-__READ__0000000003",
        "_c_d-__WRIT__0000000004",
        "_c_e-__READ__0000000005",
    )
    kids = [r1, w2, r3, w4, r5]
    assert z.verdict(Mode.READ, kids, r1).acquired
    assert z.verdict(Mode.WRITE, kids, w2) == z.Verdict(False, r1)
    assert z.verdict(Mode.READ, kids, r3) == z.Verdict(False, w2)  # a queued writer blocks later readers
    assert z.verdict(Mode.READ, kids, r5) == z.Verdict(False, w4)  # watches the nearest writer, not the first
    assert z.verdict(Mode.READ, [r1, r3], r3).acquired  # readers share
    assert z.holders_of(kids) == ([r1], 4)
    assert z.holders_of([r1, r3, w2]) == ([r1], 2)
    assert z.holders_of(z.sort_children([r1, r3])) == ([r1, r3], 0)


def test_protected_names_and_node_data() -> None:
    uid = "0b1e3f5c-1111-2222-3333-444455556666"
    kids = ["_c_other-lock-0000000001", f"{z.child_prefix(uid, z.MUTEX_MARK)}0000000002"]
    assert z.find_own(kids, uid) == kids[1]
    assert z.find_own(kids, "nope") is None
    owner, permits = z.parse_data(z.node_data("h:1:t", Mode.SEMAPHORE, 3), "x")
    assert (owner, permits) == ("h:1:t", 3)
    owner, permits = z.parse_data(b"10.0.0.7", "_c_q-lock-0000000001")
    assert owner.startswith("foreign:10.0.0.7:") and owner.count(":") >= 2 and permits is None


def test_semaphore_capacity_bytes_holdings_and_leftovers() -> None:
    """The capacity is Curator's SharedCount int; a distlock holding is the leases of one multi (one czxid),
    a Curator lease a holding of one; stored numbers whose last lease went before the head queued are a dead
    holder's leftover, while a head that queued before it keeps them (and Curator's count alone always counts)."""
    assert z.count_bytes(3) == b"\x00\x00\x00\x03" and z.count_of(z.count_bytes(-2)) == -2
    assert z.count_of(b"") is None and z.count_of(None) is None
    mine = z.node_data("h:1:t", Mode.SEMAPHORE, 2)
    leases = [f"_c_a-lease-000000000{i}" for i in range(4)]
    assert z.semaphore_holders(leases, [mine, b"10.0.0.7", mine, b"10.0.0.7"], [7, 8, 7, 9]) == [
        ("h:1:t", 7, 2),
        (f"foreign:10.0.0.7:{leases[1]}", 8, 1),
        (f"foreign:10.0.0.7:{leases[3]}", 9, 1),
    ]
    held = State(capacity=5, version=1, declared=3, leases=leases[:1], changed=50)
    assert held.stored(head=60) == arbiter.Capacity(3, 5)
    free = State(capacity=5, version=1, declared=3, leases=[], changed=50)
    assert free.stored(head=60) is None  # the last lease went before the head queued: a leftover
    assert free.stored(head=40) == arbiter.Capacity(3, 5)  # it waited while the last lease went
    assert State(capacity=4, version=0, declared=None, leases=[], changed=50).stored(60) == arbiter.Capacity(4, 4)
    assert State(capacity=None, version=-1, declared=3, leases=[], changed=0).stored(60) is None


_MARKS = (z.MUTEX_MARK, z.READ_MARK, z.WRITE_MARK, z.LEASE_MARK, z.LATCH_MARK)
_SEQ = st.one_of(st.from_regex(r"[0-9]{10}", fullmatch=True), st.from_regex(r"-[0-9]{9,10}", fullmatch=True))
#: the middle of a protected name: free to hold markers, dashes, digits, anything
_MIDDLE = st.lists(st.sampled_from([*_MARKS, "-", "a", "0", "_", "__", "lo", "ck-"]), max_size=6).map("".join)
_CHILD = st.one_of(
    st.builds(lambda middle, mark, seq: f"{z.PROTECTED}{middle}-{mark}{seq}", _MIDDLE, st.sampled_from(_MARKS), _SEQ),
    st.builds(lambda mark, seq: f"{mark}{seq}", st.sampled_from(_MARKS), _SEQ),  # a client without protection
    st.sampled_from([z.SEM_LOCKS, z.SEM_LEASES, "lock-123", "_c_x-lock-00000000001"]),
    st.text(max_size=30),
)


@given(st.lists(_CHILD, max_size=12))
def test_the_queue_in_one_pass_is_the_contenders_sorted(children: list[str]) -> None:
    assert z.queue(children) == z.sort_children(z.contenders(children))

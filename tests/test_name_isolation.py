"""Every name isolated (pure, no servers): for two distinct names a backend accepts, no key, znode, etcd key or
GET_LOCK name of one is the other's or is counted by the other's readers, and no accepted name's keys are the
store's own. (The SQL lease tables key a name by its full SHA-256: nothing to check there.)

Names are generated from the pieces the layouts are made of (internal suffixes, markers, slashes, braces, the
fence counter's key, queue-node shapes) besides arbitrary text, so the adversarial cases come up at once.
"""

from __future__ import annotations

import re

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from distlock._backends.etcd import keys as ek
from distlock._backends.redis import keys as rk
from distlock._backends.redis._async.node import same_slot
from distlock._backends.sql import names as sn
from distlock._backends.zookeeper import barrier as zbarrier
from distlock._backends.zookeeper import latch as zlatch
from distlock._backends.zookeeper import layout as zl
from distlock._core.types import Mode
from distlock._core.validate import check_name
from distlock._errors import ConfigError

PIECES = [
    "jobs", "a", "1f", "ab", "read", "write", "sem", "locks", "leases", "x",
    "_c_0b9b1a4e-7d5c-4c3e-9a7e-1d2c3b4a5f6e-lock-0000000001", "lock-0000000007", "__READ__0000000002",
    "__WRIT__0000000003", "latch-0000000004", "lease-0000000005", "_c_q-lease--2147483648",
    "{", "}", "{job}", "job", ":i", ":q", ":r", ":p", ":qd", ":qa", ":qw", ":fence", ":wake", "distlock:fences",
    ":{12}", ":{0}", "app/fences", ":latch", ":barrier", ":dbarrier", "%barriers", "%dbarriers", "ready", "", ".", "..", "%", "%2F", "é", "\n", "/", "distlock", "zookeeper",
]  # fmt: skip
SEPARATORS = ["/", "", ":"]


@st.composite
def names(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(PIECES) | st.text(max_size=4), min_size=1, max_size=5))
    seps = draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(parts), max_size=len(parts)))
    name = "".join(s + p for s, p in zip(seps, parts, strict=True))
    name = name[1:] if draw(st.booleans()) and name[:1] in ("/", ":") else name
    try:
        return check_name(name)
    except ConfigError:
        assume(False)
        raise


def built(*tails: str) -> st.SearchStrategy[str]:
    """A name and a name made from another by a tail (``jobs`` -> ``jobs/read``), half and half."""
    return names() | st.builds(lambda n, t: t.replace("NAME", n), names(), st.sampled_from(tails))


PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])


# -- etcd ------------------------------------------------------------------------------------------------
def _etcd_keys(name: str, lease: int) -> dict[bytes, Mode]:
    """Every key a contender of ``name`` may have: distlock's four modes (an election is the mutex's key) and
    Go's RWMutex recipe keys (a decimal UnixNano after the marker)."""
    out = {ek.lock_key(name, mode, lease): mode for mode in Mode}
    prefix = ek.lock_prefix(name)
    for mode in (Mode.READ, Mode.WRITE):
        out[prefix + ek.MARKERS[mode] + b"1700000000123456789"] = mode
    return out


ETCD_NAMES = built("NAME/read", "NAME/write", "NAME/sem", "NAME/x", "NAME/1f", "NAME/read/1f", "NAME/sem/x")


@PROPERTY
@given(ETCD_NAMES, ETCD_NAMES, st.integers(min_value=1, max_value=2**63 - 1))
def test_etcd_no_key_of_one_name_is_read_as_the_other_s(a: str, b: str, lease: int) -> None:
    assume(a != b and ek.name_refused(a) is None and ek.name_refused(b) is None)
    for key, mode in _etcd_keys(a, lease).items():
        assert ek.mode_of(ek.lock_prefix(a), key) is mode
        # the reader of b (acquire, inspect, break_lock, the election observer) does not count it ...
        assert ek.mode_of(ek.lock_prefix(b), key) is None, (a, b, key)
        assert key not in _etcd_keys(b, lease)
        # ... list reads it back as a's, and it is not the store's own (the 0.1 owner records start with NUL)
        assert ek.split_key(key) == (a, mode)
        assert not key.startswith(b"\x00")
    # a latch's key is in no lock's range (a Go Mutex counts every key under NAME/), and no latch's key is the
    # prefix of another's (a waiter watches its key as a prefix)
    la, lb = ek.latch_key(a), ek.latch_key(b)
    assert not la.startswith(ek.lock_prefix(a)) and not la.startswith(ek.lock_prefix(b))
    assert not lb.startswith(la) and not la.startswith(lb)
    assert ek.split_key(la) is None  # list reads no lock out of it
    # a barrier's key likewise: in no lock's range, no latch's or other barrier's key or prefix
    for kind in ("barrier", "double barrier"):
        ba, bb = ek.barrier_key(kind, a), ek.barrier_key(kind, b)
        assert not ba.startswith(ek.lock_prefix(a)) and not ba.startswith(ek.lock_prefix(b))
        for other in (bb, la, lb, ek.barrier_key("double barrier" if kind == "barrier" else "barrier", a)):
            assert not other.startswith(ba) and not ba.startswith(other)
        assert ek.split_key(ba) is None


@PROPERTY
@given(ETCD_NAMES)
def test_etcd_a_refused_name_is_one_whose_keys_another_name_counts(name: str) -> None:
    """The rule is no broader than the collision: a refused name's keys are a contender of its parent."""
    assume(ek.name_refused(name) is not None)
    parent = name.rpartition("/")[0]
    assert ek.mode_of(ek.lock_prefix(parent), ek.lock_key(name, Mode.EXCLUSIVE, 0x1F)) is not None


def test_etcd_the_reported_names_are_refused_and_the_go_layout_stays() -> None:
    for name in ("jobs/write", "jobs/read", "jobs/sem"):
        assert ek.name_refused(name) is not None
        assert "\n" not in str(ek.name_refused(name))
    for name in ("jobs", "read", "/read", "jobs/reader", "jobs/read/x", "jobs/1f"):
        assert ek.name_refused(name) is None
    assert ek.lock_key("jobs", Mode.EXCLUSIVE, 0x1F) == b"jobs/1f"  # etcdctl lock jobs


# -- ZooKeeper -------------------------------------------------------------------------------------------
UID = "0b9b1a4e-7d5c-4c3e-9a7e-1d2c3b4a5f6e"
QUEUE = [zl.child_prefix(UID, mark) + "0000000042" for mark in (*zl.MARK_OF_MODE.values(), zl.LATCH_MARK)]
LOCKER = zl.child_prefix(UID, zl.MUTEX_MARK) + "0000000043"
LEASE = zl.child_prefix(UID, zl.LEASE_MARK) + "0000000044"
ROOTS = st.sampled_from([zl.DEFAULT_ROOT, "/apps/locks", "/jobs"])
ZK_NAMES = built(
    "NAME/locks",
    "NAME/leases",
    "NAME/leases/x",
    "NAME/locks/0",
    "NAME/" + QUEUE[0],
    "NAME/" + LEASE,
    "NAME/0",
    "/distlock",
    "/jobs",
    "/zookeeper/NAME",
    "/NAME",
    "NAME/-",
    "/distlock%latches/NAME",
    "/distlock%latches",
    "/distlock%barriers/NAME",
    "/distlock%dbarriers/NAME/ready",
    "NAME%2F%25",
    "NAME/%count",
    "NAME/count",
)


def _zk_nodes(path: str) -> set[str]:
    """Every znode a lock at ``path`` creates, of every kind: the lock path, the queue nodes of a mutex,
    read-write lock and election, and a semaphore's ``locks`` and ``leases`` with their nodes and its capacity."""
    return (
        {path, f"{path}/{zl.SEM_LOCKS}", f"{path}/{zl.SEM_LEASES}", zl.count_path(path)}
        | {f"{path}/{c}" for c in QUEUE}
        | {f"{path}/{zl.SEM_LOCKS}/{LOCKER}", f"{path}/{zl.SEM_LEASES}/{LEASE}"}
    )


def _zk_counted(path: str, node: str) -> bool:
    """Does a reader of the lock at ``path`` count ``node`` (the children it lists, filtered as it filters)?"""
    parent, _, child = node.rpartition("/")
    scanned = {path, f"{path}/{zl.SEM_LOCKS}", f"{path}/{zl.SEM_LEASES}"}
    return parent in scanned and zl.contenders([child]) == [child]


@PROPERTY
@given(ZK_NAMES, ZK_NAMES, ROOTS)
def test_zookeeper_no_znode_of_one_name_is_the_other_s_or_counted_by_it(a: str, b: str, root: str) -> None:
    assume(zl.name_refused(a, root) is None and zl.name_refused(b, root) is None)
    pa, pb = zl.lock_path(a, root), zl.lock_path(b, root)
    assume(pa != pb)  # "x" and root + "/x" are one name (an absolute path used as is)
    mine, theirs = _zk_nodes(pa), _zk_nodes(pb)
    assert not mine & theirs, (a, b)
    for node in mine:
        assert not _zk_counted(pb, node), (a, b, node)
        # not the store's own: the root (the parent of every name) and the server's /zookeeper
        assert node != root and node != "/zookeeper" and not node.startswith("/zookeeper/")
    # list walks the tree and reads the name back from the path
    assert zl.lock_path(zl.name_of(pa, root), root) == pa
    # a latch's znode is no other latch's, and no lock's node of any name is at or below the latches' parent
    la, lb, parent = zlatch.latch_path(a, root), zlatch.latch_path(b, root), zlatch.latches_root(root)
    assert la != lb and la.rpartition("/")[0] == parent
    # list reads a latch's or barrier's name back from its node (the same name, or its other spelling)
    assert zl.lock_path(zl.name_of_escaped(la.rpartition("/")[2], root), root) == pa
    assert zl.lock_path(zl.name_of_escaped(zbarrier.barrier_path("barrier", a, root).rpartition("/")[2], root), root) == pa
    for node in mine | theirs:
        assert node != parent and not node.startswith(parent + "/"), (a, b, node)
    # the same for barriers and double barriers (Curator's layout: member nodes and ``ready`` below the path):
    # no lock's or latch's node is at or below their parents, and two names' barriers are apart
    for kind in ("barrier", "double barrier"):
        ba, bb = zbarrier.barrier_path(kind, a, root), zbarrier.barrier_path(kind, b, root)
        bparent = root + zbarrier.PARENTS[kind]
        assert ba != bb and ba.rpartition("/")[0] == bparent and bb.rpartition("/")[0] == bparent
        for node in mine | theirs | {la, lb, parent}:
            assert node != bparent and not node.startswith(bparent + "/"), (a, b, node)


@PROPERTY
@given(ZK_NAMES, ROOTS)
def test_zookeeper_a_refused_name_collides(name: str, root: str) -> None:
    """The rule is no broader than the collision: a refused name's path is a semaphore's internal node, would be
    counted in its parent's queue, or is the store's or the server's own."""
    assume(zl.name_refused(name, root) is not None)
    path = zl.lock_path(name, root)
    parent, _, last = path.rpartition("/")
    internal = last in (zl.SEM_LOCKS, zl.SEM_LEASES) and path in _zk_nodes(parent)
    counted = _zk_counted(parent, path)
    own = path == root or path == "/zookeeper" or path.startswith("/zookeeper/")
    assert internal or counted or own, (name, path)


def test_zookeeper_the_reported_names_are_refused_and_curator_paths_stay() -> None:
    for name in ("jobs/leases", "jobs/locks", "locks", "/distlock", "/zookeeper/quota", "jobs/" + QUEUE[0]):
        assert zl.name_refused(name) is not None, name
    for name in ("jobs", "jobs/leases/x", "jobs/locksmith", "/locks", "lock-1", "jobs/lock-"):
        assert zl.name_refused(name) is None, name
    assert zl.lock_path("jobs/nightly") == "/distlock/jobs/nightly"  # Curator on the same path meets it
    assert zl.contenders(["x", "locks", "leases", *QUEUE, "0", "-", LEASE]) == [*QUEUE, LEASE]


# -- Redis -----------------------------------------------------------------------------------------------
COUNTERS = st.sampled_from([rk.NODE_COUNTER, "app/fences", "tenant:{a}:fences", "{x}:r", "{x}:fences"])
REDIS_NAMES = built(
    *("{NAME}:" + suffix for suffix in (*rk.SUFFIXES, rk.LATCH_SUFFIX, "wake", "x")),
    "NAME:{12}",
    "distlock:fences:{NAME}",
    "distlock:fences",
    "app/fences",
    "app/fences:{7}",
    "{NAME}",
)


def _own_keys(name: str, cluster: bool, counter: str) -> set[str]:
    """The keys of ``name`` that are its own (every key of the script call but the shared fence counter)."""
    keys = rk.keys(name, cluster, counter)
    return set(keys) - {rk.counter_key(name, cluster, counter)}


def _redis_accepts(name: str, cluster: bool, counter: str) -> bool:
    return rk.name_refused(name, counter) is None and (not cluster or same_slot(name))


@PROPERTY
@given(REDIS_NAMES, REDIS_NAMES, st.booleans(), COUNTERS)
def test_redis_no_key_of_one_name_is_the_other_s_or_a_counter(a: str, b: str, cluster: bool, counter: str) -> None:
    assume(rk.check_counter(counter, cluster) is None)
    assume(a != b and _redis_accepts(a, cluster, counter) and _redis_accepts(b, cluster, counter))
    mine, theirs = _own_keys(a, cluster, counter), _own_keys(b, cluster, counter)
    assert len(mine) == rk.NKEYS - 1 and not mine & theirs, (a, b, mine & theirs)
    # no key of a name is a fence counter: this store's, the default one of other stores on the database, and
    # every per-slot one on a cluster
    for c in {counter, rk.NODE_COUNTER}:
        for other in (a, b):
            for on_cluster in (False, True):
                assert rk.counter_key(other, on_cluster, c) not in mine
    assert counter not in mine and rk.NODE_COUNTER not in mine
    assert not any(re.fullmatch(re.escape(c) + r":\{[0-9]+\}", k) for k in mine for c in (counter, rk.NODE_COUNTER))
    # the wake-up and reply channels are apart too, and list reads the name back from its details key
    assert rk.channel(a) != rk.channel(b)
    assert rk.reply_channel(rk.channel(a), "0a1b") not in (rk.channel(b), rk.reply_channel(rk.channel(b), "0a1b"))
    assert rk.name_of_info_key(rk.keys(a)[3]) == a
    # a latch's key is no lock's key (of either name) and no other latch's, in the slot of its name's keys,
    # and its channel is no lock's channel
    latch_a, latch_b = rk.latch_key(a), rk.latch_key(b)
    assert latch_a != latch_b and latch_a not in mine | theirs and latch_b not in mine
    assert latch_a not in {counter, rk.NODE_COUNTER, a, b}
    assert not cluster or rk.slot_of(latch_a) == rk.slot_of(rk.keys(a)[1])
    assert latch_a not in (rk.channel(a), rk.channel(b), rk.reply_channel(rk.channel(b), "0a1b"))
    # a barrier's keys likewise: no lock's or latch's key, no other name's barrier, in the slot of the name's keys
    for kind in ("barrier", "double barrier"):
        bar_a, bar_b = rk.barrier_key(kind, a), rk.barrier_key(kind, b)
        assert bar_a != bar_b and bar_a not in mine | theirs | {latch_a, latch_b, counter, rk.NODE_COUNTER, a, b}
        assert not cluster or rk.slot_of(bar_a) == rk.slot_of(rk.keys(a)[1])
    assert rk.barrier_key("barrier", a) != rk.barrier_key("double barrier", a)


@PROPERTY
@given(REDIS_NAMES, COUNTERS)
def test_redis_a_refused_name_is_another_name_s_key_or_a_counter(name: str, counter: str) -> None:
    assume(rk.check_counter(counter, False) is None and rk.name_refused(name, counter) is not None)
    owner = name[1 : name.rindex("}")] if name.startswith("{") else None
    barrier_keys = {rk.barrier_key(kind, owner) for kind in rk.BARRIER_SUFFIXES} if owner is not None else set()
    is_key = owner is not None and (
        name in _own_keys(owner, False, counter) or name == rk.latch_key(owner) or name in barrier_keys
    )
    slot_counters = {rk.counter_key(str(i), True, c) for c in (counter, rk.NODE_COUNTER) for i in range(64)}
    is_counter = name in (counter, rk.NODE_COUNTER) or re.fullmatch(r".*:\{[0-9]+\}", name) is not None
    assert is_key or is_counter or name in slot_counters, name


def test_redis_the_reported_names_are_refused_and_the_redis_py_key_stays() -> None:
    for name in (
        "{job}:i",
        "{job}:q",
        "{job}:r",
        "{job}:qd",
        "{job}:fence",
        "{job}:latch",
        "{job}:barrier",
        "{job}:dbarrier",
        rk.NODE_COUNTER,
    ):
        assert rk.name_refused(name) is not None, name
    assert rk.name_refused(rk.counter_key("job", True)) is not None  # distlock:fences:{<tag>} of a slot
    assert rk.name_refused("app/fences", "app/fences") is not None  # ?fence_counter=app/fences
    assert rk.check_counter("{job}:i", False) is not None  # a counter may not be a name's key either
    for name in ("job", "{job}", "{job}:wake", "job:i", "{}:i", "distlock:fences:x", "app/fences"):
        assert rk.name_refused(name) is None, name
    assert rk.keys("job")[0] == "job"  # redis-py's Lock("job")


# -- MySQL GET_LOCK (mode=session) -----------------------------------------------------------------------
MYSQL_NAMES = built("~" + "A" * 43, "~NAME", "distlock-bell:NAME", "NAME" * 20, "NAME" + "x" * 64)


@PROPERTY
@given(MYSQL_NAMES, MYSQL_NAMES)
def test_mysql_get_lock_names_of_two_names_differ_and_are_not_the_lease_mode_s_own(a: str, b: str) -> None:
    """A name longer than 64 characters maps to ``~`` + base64url(SHA-256): no accepted name maps to the same
    GET_LOCK name as another, and none is a lease-mode store's companion lock (``distlock-bell:...``)."""
    assume(a != b and sn.get_lock_refused(a) is None and sn.get_lock_refused(b) is None)
    assert sn.get_lock_name(a) != sn.get_lock_name(b)
    assert not sn.get_lock_name(a).startswith(sn.BELL_PREFIX)
    assert sn.get_lock_name(a) != sn.bell_name(sn.name_key(b))


def test_mysql_the_mapped_and_the_companion_names_are_refused() -> None:
    long = "x" * 65
    assert sn.get_lock_refused(sn.get_lock_name(long)) is not None  # it would share the long name's lock
    assert sn.get_lock_refused(sn.bell_name(sn.name_key("job"))) is not None
    for name in ("job", "~job", "~" + "A" * 42, long, "distlock-bells"):
        assert sn.get_lock_refused(name) is None, name

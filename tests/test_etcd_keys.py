"""The etcd key layout and grant rule (``distlock._backends.etcd.keys``): pure functions, no server."""

from __future__ import annotations

from distlock._backends.etcd import keys as k
from distlock._core.arbiter import Capacity
from distlock._core.types import Mode


def c(rev: int, mode: Mode = Mode.EXCLUSIVE, name: str = "n") -> k.Contender:
    return k.Contender(k.lock_key(name, mode, rev + 0x1000), mode, rev, rev + 0x1000)


def test_keys_match_go_mutex_layout() -> None:
    assert k.lock_key("jobs/a", Mode.EXCLUSIVE, 0x694D9A1B2C) == b"jobs/a/694d9a1b2c"  # Go: "%s/%x"
    assert k.lock_key("r", Mode.READ, 255) == b"r/read/ff"
    assert k.lock_key("r", Mode.WRITE, 255) == b"r/write/ff"
    assert k.lock_key("s", Mode.SEMAPHORE, 1) == b"s/sem/1"
    assert k.lock_key("ключ", Mode.EXCLUSIVE, 1) == "ключ/1".encode()


def test_prefix_end() -> None:
    assert k.prefix_end(b"a/") == b"a0"
    assert k.prefix_end(b"a\xff") == b"b"
    assert k.prefix_end(b"\xff\xff") == b"\x00"


def test_mode_of_ignores_other_locks_keys() -> None:
    p = b"n/"
    assert k.mode_of(p, b"n/694d") is Mode.EXCLUSIVE
    assert k.mode_of(p, b"n/read/694d") is Mode.READ
    assert k.mode_of(p, b"n/write/1") is Mode.WRITE
    assert k.mode_of(p, b"n/sem/1") is Mode.SEMAPHORE
    assert k.mode_of(p, b"n/read/1700000000123456789") is Mode.READ  # Go's recipes.RWMutex key
    assert k.mode_of(p, b"n/17000000001234567") is None  # too long for a lease id
    assert k.mode_of(p, b"n/x/694d") is None  # the lock "n/x"
    assert k.mode_of(p, b"n/694D") is None
    assert k.mode_of(p, b"n/") is None
    assert k.mode_of(p, b"m/1") is None


def test_contenders_are_sorted_by_create_revision() -> None:
    kvs = [
        {"key": k.b64(b"n/2"), "create_revision": "9", "lease": "2"},
        {"key": k.b64(b"n/x/3"), "create_revision": "5", "lease": "3"},
        {"key": k.b64(b"n/1"), "create_revision": "7", "lease": "1"},
    ]
    assert [(x.key, x.rev, x.lease) for x in k.contenders(b"n/", kvs)] == [(b"n/1", 7, 1), (b"n/2", 9, 2)]


def test_decide_mutex_watches_only_the_predecessor() -> None:
    q = [c(3), c(5), c(8)]
    assert k.decide(q, 3, Mode.EXCLUSIVE, 1).acquired
    d = k.decide(q, 8, Mode.EXCLUSIVE, 1)
    assert not d.acquired and d.watch == (q[1],)


def test_decide_read_write() -> None:
    r1, r2, w, r3 = c(1, Mode.READ), c(2, Mode.READ), c(3, Mode.WRITE), c(4, Mode.READ)
    q = [r1, r2, w, r3]
    assert k.decide(q, 2, Mode.READ, 1).acquired  # readers share
    d = k.decide(q, 3, Mode.WRITE, 1)
    assert not d.acquired and d.watch == (r2,)  # a writer waits for the last key ahead
    d = k.decide(q, 4, Mode.READ, 1)
    assert not d.acquired and d.watch == (w,)  # a queued writer blocks later readers
    assert k.holders(q, None) == [r1, r2]
    assert k.queue_kind(q) == "rwlock"


def test_decide_semaphore() -> None:
    q = [c(1, Mode.SEMAPHORE), c(2, Mode.SEMAPHORE), c(3, Mode.SEMAPHORE)]
    assert k.decide(q, 2, Mode.SEMAPHORE, 2).acquired
    d = k.decide(q, 3, Mode.SEMAPHORE, 2)
    assert not d.acquired and d.watch == (q[0], q[1])
    assert k.holders(q, 2) == q[:2]
    assert k.queue_kind(q) == "semaphore"


def test_decide_weighted_semaphore_counts_takes_and_a_shrink_keeps_its_holders() -> None:
    """Every record carries the semaphore's terms and its contender's take: a contender holds once the takes
    of everyone ahead (holders and waiters: etcd's queue is FIFO) and its own fit the capacity in force; a
    shrink marks those within the capacity before it, who keep holding (and are reported) above the new one."""
    terms = Capacity(3, 3)

    def sem(rev: int, take: int, held: bool = False) -> k.Contender:
        value = k.sem_value("h:1:t", take, terms)
        if held:
            value = k.resized(value, 1, held=True) or b""
        return k.Contender(k.lock_key("n", Mode.SEMAPHORE, rev), Mode.SEMAPHORE, rev, rev, value, rev)

    q = [sem(1, 2), sem(2, 2), sem(3, 1)]
    assert [k.take_of(x) for x in q] == [2, 2, 1] and k.terms_of(q[0].value) == terms
    assert k.decide(q, 1, Mode.SEMAPHORE, 3, 2).acquired
    d = k.decide(q, 2, Mode.SEMAPHORE, 3, 2)  # 2 + 2 > 3: waits for a delete of the one ahead
    assert not d.acquired and d.watch == (q[0],)
    assert not k.decide(q, 3, Mode.SEMAPHORE, 3, 1).acquired  # 1 free, but the big one ahead comes first
    assert k.holders(q, 3) == q[:1] and k.holders(q, 4) == q[:2]
    assert k.stored_terms(q) == (q[2], terms)
    # a shrink from 4 to 1 marks the two within 4; the third is still a waiter, behind them
    assert k.shrink_marks(q, 4) == {q[0].key, q[1].key}
    shrunk = [sem(1, 2, held=True), sem(2, 2, held=True), sem(3, 1)]
    assert k.terms_of(shrunk[0].value) == Capacity(3, 1) and k.marked_held(shrunk[1])
    assert k.holders(shrunk, 1) == shrunk[:2] and not k.decide(shrunk, 3, Mode.SEMAPHORE, 1, 1).acquired
    # a record of another client (no terms) and a contender of another kind ahead
    assert k.terms_of(b"") is None and k.resized(b"", 2) is None
    assert not k.decide([c(1), sem(2, 1)], 2, Mode.SEMAPHORE, 3, 1).acquired


def test_split_key_for_list() -> None:
    assert k.split_key(b"a/b/1f") == ("a/b", Mode.EXCLUSIVE)
    assert k.split_key(b"a/read/1f") == ("a", Mode.READ)
    assert k.split_key(b"a/sem/1f") == ("a", Mode.SEMAPHORE)
    assert k.split_key(b"a/write/1700000000123456789") == ("a", Mode.WRITE)
    assert k.split_key(b"\x00distlock/owner/1") is None
    assert k.split_key(b"plain-key") is None


def test_lease_ttl_is_rounded_up_never_down() -> None:
    assert k.lease_ttl_seconds(0.5) == 1
    assert k.lease_ttl_seconds(1.0) == 1
    assert k.lease_ttl_seconds(1.2) == 2
    assert k.lease_ttl_seconds(30) == 30


def test_owner_record_round_trip() -> None:
    assert k.parse_owner(k.owner_value("h:1:t", Mode.SEMAPHORE, 3)) == ("h:1:t", 3)
    assert k.parse_owner(b"not json") == (None, None)


def test_owner_record_is_the_value_of_the_contender_key() -> None:
    """Everything distlock writes for a name is inside ``NAME/`` (a role on the names' prefix covers it): the
    owner record rides in the lock key's value, which Go's Mutex writes empty and never reads."""
    value = k.owner_value("h:1:t", Mode.SEMAPHORE, 2)
    kvs = [
        {"key": k.b64(b"app/s/sem/1a"), "value": k.b64(value), "create_revision": "7", "lease": "26"},
        {"key": k.b64(b"app/s/2b"), "create_revision": "9", "lease": "43"},  # a Go contender: empty value
    ]
    mine, go = k.contenders(b"app/s/", kvs)
    assert mine.value == value and k.parse_owner(mine.value) == ("h:1:t", 2)
    assert go.value == b"" and go.mode is Mode.EXCLUSIVE
    assert not hasattr(k, "OWNER_PREFIX")

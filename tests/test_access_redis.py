"""Redis with an ACL user limited to the key pattern of its lock names.

The grants are the ones docs/access-control.md prints (:func:`acl`): the keys ``app/*`` (the exclusive key
is the name itself, and the store's own fence counter ``app/distlock:fences``, named by the URL option
``fence_counter``) and ``{app/*`` (the name's other keys, ``{NAME}:r`` ...), the wake-up channels ``{app/*``
and the commands distlock sends. A third user keeps the default counter ``distlock:fences``, shared by the
database, and needs a grant on it. The server is the test's own (the fence counter test deletes counters).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

import distlock
from tools.servers.redis import redis_server

ADMIN_PW = "adm1n-Secret-5"
ALICE_PW = "al1ce-Secret-7"
BOB_PW = "b0b-Secret-3"
CAROL_PW = "car0l-Secret-9"
#: alice's and bob's stores keep their fence counter under their own prefix; carol's uses the shared one
ALICE_COUNTER = "app/distlock:fences"
BOB_COUNTER = "other/distlock:fences"
#: user -> (password, prefix of its lock names, its store's fence_counter, or None for the default)
USERS = {
    "alice": (ALICE_PW, "app/", ALICE_COUNTER),
    "bob": (BOB_PW, "other/", BOB_COUNTER),
    "carol": (CAROL_PW, "shared/", None),
}

#: the commands distlock sends on a single node and the ones its scripts run: data commands (@read, @write,
#: SCAN included), the scripts (@scripting), wake-ups (@pubsub), PING/HELLO (@connection) and TIME; nothing
#: @dangerous (INFO, CONFIG GET are asked at connect but optional: refused, they are skipped)
COMMANDS = "-@all +@read +@write +@scripting +@pubsub +@connection +time -@dangerous"


def acl(prefix: str, own_counter: bool = True) -> list[str]:
    """The ACL SETUSER rules of a user whose lock names start with ``prefix``: with ``own_counter`` its
    stores name a fence counter under ``prefix`` (``?fence_counter=PREFIXdistlock:fences``), which ``~PREFIX*``
    already covers; otherwise they use the database's shared ``distlock:fences``, which must be granted."""
    shared = [] if own_counter else ["~distlock:fences"]
    return [f"~{prefix}*", f"~{{{prefix}*", *shared, f"&{{{prefix}*", *COMMANDS.split()]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """(url without credentials) of a server whose default user is off; users alice (``app/``), bob
    (``other/``) and carol (``shared/``, the shared fence counter), and an admin."""
    with redis_server() as srv:
        admin = redis.Redis(host="127.0.0.1", port=srv.port)
        admin.acl_setuser("admin", enabled=True, passwords=[f"+{ADMIN_PW}"], keys=["*"], channels=["*"],
                          commands=["+@all"])  # fmt: skip
        for user, (password, prefix, counter) in USERS.items():
            rules = acl(prefix, own_counter=counter is not None)
            admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *rules)
        admin.execute_command("ACL", "SETUSER", "default", "off")
        admin.close()
        yield f"127.0.0.1:{srv.port}"


def admin_client(server: str) -> redis.Redis:
    host, port = server.split(":")
    return redis.Redis(host=host, port=int(port), username="admin", password=ADMIN_PW)


def url(server: str, user: str, password: str | None = None) -> str:
    """The store URL of ``user`` (with its ``fence_counter``); a ``password`` given: that one, no option."""
    if password is not None:
        return f"redis://{user}:{password}@{server}/0"
    password, _, counter = USERS[user]
    return f"redis://{user}:{password}@{server}/0" + (f"?fence_counter={counter}" if counter else "")


def keys_of(server: str, part: str) -> list[bytes]:
    with admin_client(server) as admin:
        return [k for k in admin.scan_iter(match="*", count=1000) if part.encode() in k]


def one_line_without_secrets(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    for secret in (ADMIN_PW, ALICE_PW, BOB_PW, CAROL_PW):
        assert secret not in text and secret not in repr(err), text
    return text


@pytest.mark.parametrize("user", ["alice", "carol"])
def test_the_acl_pattern_is_enough_for_every_lock_kind_fences_and_wakeups(server: str, user: str) -> None:
    base = f"{USERS[user][1]}{uuid.uuid4().hex[:8]}"
    with (
        distlock.connect(url(server, user)) as store,
        distlock.connect(url(server, user)) as other,
    ):
        lock = store.lock(f"{base}/lock", ttl=5)
        assert lock.acquire(timeout=5)
        first = lock.fence
        assert first is not None
        rw = store.rwlock(f"{base}/rw", ttl=5)
        assert rw.read.acquire(timeout=5)
        sem = store.semaphore(f"{base}/sem", permits=2, ttl=5)
        assert sem.acquire(timeout=5)
        info = store.inspect(f"{base}/lock")
        assert info is not None and info.holders[0].fence == first
        assert {i.name for i in store.list(f"{base}/")} == {f"{base}/lock", f"{base}/rw", f"{base}/sem"}
        # a waiter is woken by the release (the pub/sub channel is granted), not by polling
        order: list[str] = []

        def waiter() -> None:
            w = other.lock(f"{base}/lock", ttl=5)
            if w.acquire(timeout=20):
                order.append("granted")
                assert w.fence is not None and w.fence > first
                w.release()

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.5)
        order.append("released")
        lock.release()
        t.join(20)
        assert order == ["released", "granted"]
        rw.read.release()
        sem.release()
        victim = store.lock(f"{base}/broken", ttl=5)
        assert victim.acquire(timeout=5)
        assert other.break_lock(f"{base}/broken")
        assert victim.lost.wait(10)
    assert keys_of(server, base) == []


def test_a_name_outside_the_pattern_is_a_one_line_noperm_error_that_leaves_nothing(server: str) -> None:
    outside = f"other/{uuid.uuid4().hex[:8]}"
    with distlock.connect(url(server, "alice")) as store:
        started = time.monotonic()
        with pytest.raises(distlock.BackendError) as err:
            store.lock(outside, ttl=5).acquire(timeout=5)
        assert time.monotonic() - started < 3.0
        msg = one_line_without_secrets(err.value)
        assert "no permissions" in msg
        assert "the fence counter" in msg and "?fence_counter=" in msg  # which option fixes it
        for call in (store.inspect, store.break_lock):
            with pytest.raises(distlock.BackendError) as err:
                call(outside)
            msg = one_line_without_secrets(err.value)
        assert "no permissions" in msg
        assert "the fence counter" in msg and "?fence_counter=" in msg  # which option fixes it
        with store.lock(f"app/{uuid.uuid4().hex[:8]}", ttl=5, timeout=5):  # still fine inside the grant
            pass
    assert keys_of(server, outside) == []


def test_another_user_can_neither_read_nor_delete_and_a_wrong_password_is_refused(server: str) -> None:
    name = f"app/{uuid.uuid4().hex[:8]}"
    host, port = server.split(":")
    with distlock.connect(url(server, "alice")) as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire(timeout=5)
        with redis.Redis(host=host, port=int(port), username="bob", password=BOB_PW) as bob:
            for command in (("GET", name), ("DEL", name), ("HGETALL", "{" + name + "}:i")):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    bob.execute_command(*command)
        with distlock.connect(url(server, "bob")) as other:
            with pytest.raises(distlock.BackendError) as err:
                other.break_lock(name)
            msg = one_line_without_secrets(err.value)
        assert "no permissions" in msg
        assert "the fence counter" in msg and "?fence_counter=" in msg  # which option fixes it
        started = time.monotonic()
        with pytest.raises(distlock.BackendError) as err:
            distlock.connect(url(server, "alice", "not-" + ALICE_PW))
        assert time.monotonic() - started < 3.0
        one_line_without_secrets(err.value)
        assert "not-" + ALICE_PW not in str(err.value)
        assert lock.owned() and not lock.lost.is_set()
        lock.release()
    assert keys_of(server, name) == []


def test_another_user_cannot_touch_the_fence_counter_of_this_one(server: str) -> None:
    """With ``?fence_counter=app/distlock:fences`` alice's counter is inside her own key pattern: bob (another
    tenant, ``~other/*``) can neither read, rewrite nor delete it, nor does he need the shared one; alice's
    fences go on up whatever bob does to his own counter. Without the option, alice's grant (no
    ``~distlock:fences``) is not enough: a one-line NOPERM error."""
    name = f"app/{uuid.uuid4().hex[:8]}"
    host, port = server.split(":")
    with admin_client(server) as admin:
        shared_before = admin.hgetall("distlock:fences")
    with distlock.connect(url(server, "alice")) as store:
        with store.lock(name, ttl=5, timeout=5) as lk:
            first = lk.fence
        assert first is not None
        with admin_client(server) as admin:
            assert int(admin.hget(ALICE_COUNTER, "n") or 0) == first  # the store's counter is alice's own key
            assert admin.hget(ALICE_COUNTER, "e")  # with its marker
        with redis.Redis(host=host, port=int(port), username="bob", password=BOB_PW) as bob:
            for command in (
                ("DEL", ALICE_COUNTER),
                ("HSET", ALICE_COUNTER, "n", "0"),
                ("HDEL", ALICE_COUNTER, "e"),
                ("HGET", ALICE_COUNTER, "n"),
                ("UNLINK", ALICE_COUNTER),
            ):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    bob.execute_command(*command)
            with distlock.connect(url(server, "bob")) as other, other.lock("other/x", ttl=5, timeout=5) as theirs:
                assert theirs.fence is not None
            assert bob.delete(BOB_COUNTER) == 1  # bob may wreck his own counter: it is his alone
        with store.lock(name, ttl=5, timeout=5) as lk:  # alice is not affected
            assert lk.fence is not None and lk.fence > first
    with admin_client(server) as admin:
        assert admin.hgetall("distlock:fences") == shared_before  # the shared counter was never used
    with distlock.connect(url(server, "alice", ALICE_PW)) as store:  # no option: the shared counter
        with pytest.raises(distlock.BackendError) as err:
            store.lock(name, ttl=5).acquire(timeout=5)
        msg = one_line_without_secrets(err.value)
        assert "no permissions" in msg
        assert "the fence counter" in msg and "?fence_counter=" in msg  # which option fixes it
    assert keys_of(server, name) == []

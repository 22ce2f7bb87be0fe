"""Redis with an ACL user limited to the key pattern of its lock names.

The grant is the one docs/access-control.md prints (:data:`ACL`): the keys ``app/*`` (the exclusive key is
the name itself) and ``{app/*`` (the name's other keys, ``{NAME}:r`` ...), the fence counter
``distlock:fences`` (one per database), the wake-up channels ``{app/*`` and the commands distlock sends.
The server is the test's own (the fence counter test deletes the counter).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

import distlock
from tests.servers.redis import redis_server

ADMIN_PW = "adm1n-Secret-5"
ALICE_PW = "al1ce-Secret-7"
BOB_PW = "b0b-Secret-3"

#: the commands distlock sends on a single node and the ones its scripts run: data commands (@read, @write,
#: SCAN included), the scripts (@scripting), wake-ups (@pubsub), PING/HELLO (@connection) and TIME; nothing
#: @dangerous (INFO, CONFIG GET are asked at connect but optional: refused, they are skipped)
COMMANDS = "-@all +@read +@write +@scripting +@pubsub +@connection +time -@dangerous"


def acl(prefix: str) -> list[str]:
    """The ACL SETUSER rules of a user whose lock names start with ``prefix``."""
    return [f"~{prefix}*", f"~{{{prefix}*", "~distlock:fences", f"&{{{prefix}*", *COMMANDS.split()]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """(url without credentials) of a server whose default user is off; users alice (``app/``) and bob
    (``other/``), and an admin."""
    with redis_server() as srv:
        admin = redis.Redis(host="127.0.0.1", port=srv.port)
        admin.acl_setuser("admin", enabled=True, passwords=[f"+{ADMIN_PW}"], keys=["*"], channels=["*"],
                          commands=["+@all"])  # fmt: skip
        for user, password, prefix in (("alice", ALICE_PW, "app/"), ("bob", BOB_PW, "other/")):
            admin.execute_command("ACL", "SETUSER", user, "reset", "on", f">{password}", *acl(prefix))
        admin.execute_command("ACL", "SETUSER", "default", "off")
        admin.close()
        yield f"127.0.0.1:{srv.port}"


def admin_client(server: str) -> redis.Redis:
    host, port = server.split(":")
    return redis.Redis(host=host, port=int(port), username="admin", password=ADMIN_PW)


def url(server: str, user: str, password: str) -> str:
    return f"redis://{user}:{password}@{server}/0"


def keys_of(server: str, part: str) -> list[bytes]:
    with admin_client(server) as admin:
        return [k for k in admin.scan_iter(match="*", count=1000) if part.encode() in k]


def one_line_without_secrets(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    for secret in (ADMIN_PW, ALICE_PW, BOB_PW):
        assert secret not in text and secret not in repr(err), text
    return text


def test_the_acl_pattern_is_enough_for_every_lock_kind_fences_and_wakeups(server: str) -> None:
    base = f"app/{uuid.uuid4().hex[:8]}"
    with (
        distlock.connect(url(server, "alice", ALICE_PW)) as store,
        distlock.connect(url(server, "alice", ALICE_PW)) as other,
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
    with distlock.connect(url(server, "alice", ALICE_PW)) as store:
        started = time.monotonic()
        with pytest.raises(distlock.BackendError) as err:
            store.lock(outside, ttl=5).acquire(timeout=5)
        assert time.monotonic() - started < 3.0
        assert "no permissions" in one_line_without_secrets(err.value)
        for call in (store.inspect, store.break_lock):
            with pytest.raises(distlock.BackendError) as err:
                call(outside)
            assert "no permissions" in one_line_without_secrets(err.value)
        with store.lock(f"app/{uuid.uuid4().hex[:8]}", ttl=5, timeout=5):  # still fine inside the grant
            pass
    assert keys_of(server, outside) == []


def test_another_user_can_neither_read_nor_delete_and_a_wrong_password_is_refused(server: str) -> None:
    name = f"app/{uuid.uuid4().hex[:8]}"
    host, port = server.split(":")
    with distlock.connect(url(server, "alice", ALICE_PW)) as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire(timeout=5)
        with redis.Redis(host=host, port=int(port), username="bob", password=BOB_PW) as bob:
            for command in (("GET", name), ("DEL", name), ("HGETALL", "{" + name + "}:i")):
                with pytest.raises(redis.exceptions.NoPermissionError):
                    bob.execute_command(*command)
        with distlock.connect(url(server, "bob", BOB_PW)) as other:
            with pytest.raises(distlock.BackendError) as err:
                other.break_lock(name)
            assert "no permissions" in one_line_without_secrets(err.value)
        started = time.monotonic()
        with pytest.raises(distlock.BackendError) as err:
            distlock.connect(url(server, "alice", "not-" + ALICE_PW))
        assert time.monotonic() - started < 3.0
        one_line_without_secrets(err.value)
        assert "not-" + ALICE_PW not in str(err.value)
        assert lock.owned() and not lock.lost.is_set()
        lock.release()
    assert keys_of(server, name) == []


@pytest.mark.xfail(
    strict=True,
    reason="the fence counter distlock:fences is one key shared by every user of the database: a user that"
    " needs it for its own locks may delete it, and every other user's next acquire is refused (FENCE-LOST)."
    " A per-prefix counter (a URL option naming it) would keep tenants apart.",
)
def test_another_user_cannot_touch_the_fence_counter_of_this_one(server: str) -> None:
    name = f"app/{uuid.uuid4().hex[:8]}"
    host, port = server.split(":")
    with distlock.connect(url(server, "alice", ALICE_PW)) as store:
        with store.lock(name, ttl=5, timeout=5):
            pass
        with redis.Redis(host=host, port=int(port), username="bob", password=BOB_PW) as bob:
            try:
                bob.execute_command("DEL", "distlock:fences")
            except redis.exceptions.NoPermissionError:
                pass
        with store.lock(name, ttl=5, timeout=5):  # refused today: the counter it saw is gone
            pass

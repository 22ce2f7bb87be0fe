"""ZooKeeper with digest credentials: the ACL distlock puts on the nodes it creates, a second client without
the credentials, wrong credentials, and a name under a node the user may not create in.

The set-up is the one docs/access-control.md prints: an admin creates the tenant's root with
``digest:admin:...:cdrwa`` plus ``digest:alice:...:cr`` (alice may create and list under it, not delete it);
alice's store (``zookeeper://alice:PW@host/?root=ROOT``) gives every node it creates
``digest:alice:...:cdrwa`` only.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.security import make_digest_acl

import distlock
from distlock._backends.zookeeper import layout
from tools.servers.zookeeper import ZkEnsemble, available, zookeeper_ensemble

pytestmark = pytest.mark.skipif(not available(), reason="ZooKeeper is not installed")

ADMIN_PW = "adm1n-Secret-5"
ALICE_PW = "al1ce-Secret-7"
BOB_PW = "b0b-Secret-3"


@pytest.fixture(scope="module")
def single() -> Iterator[ZkEnsemble]:
    with zookeeper_ensemble(1) as ens:
        yield ens


def kazoo(hosts: str, user: str | None = None, password: str = "") -> KazooClient:
    auth = [("digest", f"{user}:{password}")] if user else None
    client = KazooClient(hosts=hosts, timeout=10, auth_data=auth)
    client.start(20)
    return client


@pytest.fixture
def tenant(single: ZkEnsemble) -> Iterator[tuple[str, KazooClient]]:
    """A root made by the admin for alice, and the admin's client."""
    root = f"/tenant-{uuid.uuid4().hex[:8]}"
    admin = kazoo(single.hosts, "admin", ADMIN_PW)
    acl = [make_digest_acl("admin", ADMIN_PW, all=True), make_digest_acl("alice", ALICE_PW, create=True, read=True)]
    admin.create(root, b"", acl=acl)
    admin.create(f"{root}/other", b"", acl=[make_digest_acl("admin", ADMIN_PW, all=True)])
    try:
        yield root, admin
    finally:
        admin.stop()
        admin.close()


def url(single: ZkEnsemble, root: str, user: str, password: str) -> str:
    return f"zookeeper://{user}:{password}@{single.hosts}?root={root}&session_timeout=6"


def one_line_without_secrets(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    for secret in (ADMIN_PW, ALICE_PW, BOB_PW):
        assert secret not in text and secret not in repr(err), text
    return text


def nodes(admin: KazooClient, path: str) -> list[str]:
    """Every node under ``path`` (the admin reads through its own ACL entries only where it has them)."""
    out = []
    try:
        children = admin.get_children(path)
    except (NoAuthError, NoNodeError):  # NoNode: an emptied container (a semaphore's ``locks``) just reaped
        return []
    for child in children:
        out.append(f"{path}/{child}")
        out.extend(nodes(admin, f"{path}/{child}"))
    return out


def test_every_node_distlock_creates_is_the_users_alone(single: ZkEnsemble, tenant: tuple[str, Any]) -> None:
    root, _ = tenant
    name = f"jobs/{uuid.uuid4().hex[:8]}"
    with distlock.connect(url(single, root, "alice", ALICE_PW)) as store:
        lock = store.lock(name)
        assert lock.acquire(timeout=10)
        rw = store.rwlock(name + "-rw")
        assert rw.read.acquire(timeout=10)
        sem = store.semaphore(name + "-sem", permits=2)
        assert sem.acquire(timeout=10)
        own = kazoo(single.hosts, "alice", ALICE_PW)
        try:
            created = [p for p in nodes(own, root) if not p.startswith(f"{root}/other")]
            assert len(created) >= 6  # jobs, three lock paths, their contenders
            for path in created:
                try:
                    acl, _ = own.get_acls(path)
                except NoNodeError:  # reaped since the listing: the semaphore's emptied ``locks`` container
                    continue
                assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acl] == [("digest", "alice", 31)], path
        finally:
            own.stop()
            own.close()
        info = store.inspect(name)
        assert info is not None and info.holders[0].fence == lock.fence
        assert {i.name for i in store.list("jobs/")} >= {name, name + "-rw", name + "-sem"}
        rw.read.release()
        sem.release()
        lock.release()


def test_a_client_without_the_credentials_can_neither_read_nor_delete(
    single: ZkEnsemble, tenant: tuple[str, Any]
) -> None:
    root, _ = tenant
    name = f"jobs/{uuid.uuid4().hex[:8]}"
    path = layout.lock_path(name, root)
    with distlock.connect(url(single, root, "alice", ALICE_PW)) as store:
        lock = store.lock(name)
        assert lock.acquire(timeout=10)
        (child,) = kazoo_children(single, path)
        anonymous = kazoo(single.hosts)
        try:
            with pytest.raises(NoAuthError):
                anonymous.get_children(path)
            with pytest.raises(NoAuthError):
                anonymous.delete(f"{path}/{child}")
        finally:
            anonymous.stop()
            anonymous.close()
        for user, password in (("bob", BOB_PW), ("alice", "not-" + ALICE_PW)):  # another user; a wrong password
            started = time.monotonic()
            with distlock.connect(url(single, root, user, password)) as other:
                for call in (other.break_lock, other.inspect):
                    with pytest.raises(distlock.BackendError) as err:
                        call(name)
                    assert "NoAuth" in one_line_without_secrets(err.value)
                with pytest.raises(distlock.BackendError) as err:
                    other.lock(name).acquire(timeout=5)
                text = one_line_without_secrets(err.value)
                assert "NoAuth" in text and name in text
            assert time.monotonic() - started < 5.0
        assert lock.owned() and not lock.lost.is_set()
        assert kazoo_children(single, path) == [child]  # nothing of the others was left behind
        lock.release()


def test_a_name_under_a_node_the_user_may_not_create_in(single: ZkEnsemble, tenant: tuple[str, Any]) -> None:
    root, admin = tenant
    name = f"other/{uuid.uuid4().hex[:8]}"
    with distlock.connect(url(single, root, "alice", ALICE_PW)) as store:
        started = time.monotonic()
        with pytest.raises(distlock.BackendError) as err:
            store.lock(name).acquire(timeout=10)
        assert time.monotonic() - started < 3.0
        text = one_line_without_secrets(err.value)
        assert "NoAuth" in text and name in text
        # nothing left to clean up later either (a refused clean-up retried on every heartbeat, for ever)
        assert store._backend.cleanup.deferred == []  # type: ignore[attr-defined]
        with store.lock(f"jobs/{uuid.uuid4().hex[:8]}", timeout=10):  # the store still works inside its grant
            pass
    assert admin.get_children(f"{root}/other") == []


def kazoo_children(single: ZkEnsemble, path: str) -> list[str]:
    own = kazoo(single.hosts, "alice", ALICE_PW)
    try:
        return list(own.get_children(path))
    finally:
        own.stop()
        own.close()

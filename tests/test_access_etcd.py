"""etcd with authentication on and a user whose role covers only the prefix of its lock names.

The grant each test relies on is the one docs/access-control.md prints: role ``alice`` with
``readwrite`` on the prefix ``app/`` (``etcdctl role grant-permission --prefix=true alice readwrite app/``),
nothing else. Tokens expire after 2 s, so they run out while a lock is held and while a waiter waits.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import pytest

import distlock
from distlock._backends.etcd import keys
from tests.waiting import take_in_thread
from tools.servers.etcd import EtcdCluster, endpoints, etcd_binary, etcd_cluster, etcdctl_binary

pytestmark = pytest.mark.skipif(etcd_binary() is None, reason="etcd is not installed")

ROOT_PW = "r00t-Secret-9"
ALICE_PW = "al1ce-Secret-7"
BOB_PW = "b0b-Secret-3"


@pytest.fixture(scope="module")
def cluster() -> Iterator[EtcdCluster]:
    with etcd_cluster(1, root_password=ROOT_PW, auth_token_ttl=2) as c:
        c.add_user("alice", ALICE_PW, ["app/"])
        c.add_user("bob", BOB_PW, ["other/"])
        yield c


@pytest.fixture
def alice(cluster: EtcdCluster) -> str:
    return cluster.auth_url("alice", ALICE_PW)


@pytest.fixture
def bob(cluster: EtcdCluster) -> str:
    return cluster.auth_url("bob", BOB_PW)


def all_keys(cluster: EtcdCluster) -> list[bytes]:
    data = cluster.admin("/v3/kv/range", {"key": keys.b64(b"\x00"), "range_end": keys.b64(b"\x00"), "keys_only": True})
    return [keys.unb64(kv["key"]) for kv in data.get("kvs") or []]  # type: ignore[attr-defined]


def leases(cluster: EtcdCluster) -> set[str]:
    return {str(x["ID"]) for x in cluster.admin("/v3/lease/leases", {}).get("leases") or []}  # type: ignore[attr-defined]


def one_line_without_secrets(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    for secret in (ROOT_PW, ALICE_PW, BOB_PW):
        assert secret not in text and secret not in repr(err), text
    return text


def test_a_role_on_the_prefix_is_enough_for_every_lock_kind_and_admin_call(
    cluster: EtcdCluster, alice: str, name: str
) -> None:
    """Fails before owner records moved into the lock key: connect() read ``\\x00distlock/owner/ping``."""
    base = f"app/{name}"
    with distlock.connect(alice) as store:
        lock = store.lock(f"{base}/lock", ttl=5)
        assert lock.acquire(timeout=5)
        rw = store.rwlock(f"{base}/rw", ttl=5)
        assert rw.read.acquire(timeout=5)
        sem = store.semaphore(f"{base}/pool", permits=2, ttl=5)
        assert sem.acquire(timeout=5)
        # everything distlock wrote is under the role's prefix (no owner record anywhere else)
        written = all_keys(cluster)
        assert written and all(k.startswith(b"app/") for k in written), written
        info = store.inspect(f"{base}/lock")
        assert info is not None and info.kind == "lock"
        (holder,) = info.holders
        assert holder.fence == lock.fence and not holder.owner.startswith("unknown:")
        sem_info = store.inspect(f"{base}/pool")
        assert sem_info is not None and sem_info.kind == "semaphore" and len(sem_info.holders) == 1
        listed = {i.name for i in store.list(f"{base}/")}
        assert listed == {f"{base}/lock", f"{base}/rw", f"{base}/pool"}
        rw.read.release()
        assert rw.write.acquire(timeout=5)
        rw.write.release()
        sem.release()
        with distlock.connect(alice) as admin:
            assert admin.break_lock(f"{base}/lock")
        deadline = time.monotonic() + 10
        while not lock.lost.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lock.lost.is_set()
    assert not [k for k in all_keys(cluster) if k.startswith(base.encode())]


def test_tokens_expire_while_held_and_while_waiting(alice: str, name: str) -> None:
    """2-second tokens: the holder's renewals and the waiter's reads re-authenticate; the waiter is granted
    right after the release, and the holder never lost the lock."""
    lock_name = f"app/{name}"
    with distlock.connect(alice) as holder_store, distlock.connect(alice) as waiter_store:
        holder = holder_store.lock(lock_name, ttl=2)
        assert holder.acquire(timeout=5)
        t, got = take_in_thread(waiter_store.lock(lock_name, ttl=2), 30)
        time.sleep(5.0)  # two token lifetimes and two lease TTLs
        assert not got, "the waiter got the lock while the holder held it"
        assert holder.owned() and not holder.lost.is_set()
        released = time.monotonic()
        holder.release()
        t.join(30)
        assert got and got[0] >= released


def test_a_name_outside_the_role_is_a_quick_one_line_permission_error_that_leaves_nothing(
    cluster: EtcdCluster, alice: str, name: str
) -> None:
    outside = f"other/{name}"
    before = leases(cluster)
    with distlock.connect(alice) as store:
        started = time.monotonic()
        with pytest.raises(distlock.BackendError) as err:
            store.lock(outside, ttl=5).acquire(timeout=10)
        assert time.monotonic() - started < 3.0
        text = one_line_without_secrets(err.value)
        assert "permission denied" in text and outside in text and err.value.name == outside
        for call in (store.inspect, store.break_lock):
            with pytest.raises(distlock.BackendError) as err:
                call(outside)
            assert "permission denied" in one_line_without_secrets(err.value) and outside in str(err.value)
        with pytest.raises(distlock.BackendError) as err:
            store.list("other/")
        assert "permission denied" in one_line_without_secrets(err.value)
        assert leases(cluster) == before  # the attempt's lease was revoked, not kept
        # the store still works for names inside the grant
        with store.lock(f"app/{name}", ttl=5, timeout=5):
            pass
    assert not [k for k in all_keys(cluster) if name.encode() in k]


def test_another_prefix_cannot_read_or_delete_what_distlock_wrote(
    cluster: EtcdCluster, alice: str, bob: str, name: str
) -> None:
    lock_name = f"app/{name}"
    with distlock.connect(alice) as store:
        lock = store.lock(lock_name, ttl=5)
        assert lock.acquire(timeout=5)
        (key,) = [k for k in all_keys(cluster) if k.startswith(lock_name.encode() + b"/")]
        lease = int(key.rsplit(b"/", 1)[1], 16)
        with distlock.connect(bob) as other:
            for call in (other.inspect, other.break_lock):
                with pytest.raises(distlock.BackendError) as err:
                    call(lock_name)
                assert "permission denied" in one_line_without_secrets(err.value)
            with pytest.raises(distlock.BackendError):
                other.lock(lock_name, ttl=5).acquire(blocking=False)
        bob_token = cluster.token("bob", BOB_PW)
        port = cluster.members[0].port
        from tools.servers.etcd import post

        prefix = keys.lock_prefix(lock_name)
        denied = [
            post(port, "/v3/kv/range", keys.prefix_range(prefix, keys_only=False), token=bob_token),
            post(port, "/v3/kv/deleterange", {"key": keys.b64(key)}, token=bob_token),
            post(port, "/v3/lease/revoke", {"ID": str(lease)}, token=bob_token),
        ]
        assert all("permission denied" in str(d.get("error")) for d in denied), denied
        assert lock.owned() and not lock.lost.is_set()
        lock.release()


def test_wrong_password_and_no_credentials(cluster: EtcdCluster, alice: str, name: str) -> None:
    hosts = cluster.url.split("://", 1)[1]
    started = time.monotonic()
    with pytest.raises(distlock.BackendError) as err:
        distlock.connect(f"etcd://alice:{BOB_PW}@{hosts}")
    assert time.monotonic() - started < 3.0
    assert "authentication failed" in one_line_without_secrets(err.value)
    with distlock.connect(f"etcd://{hosts}") as anonymous:  # connecting needs no grant at all
        with pytest.raises(distlock.BackendError) as err:
            anonymous.lock(f"app/{name}", ttl=5).acquire(timeout=5)
        assert "user:password" in one_line_without_secrets(err.value)
    assert not [k for k in all_keys(cluster) if name.encode() in k]


@pytest.mark.skipif(etcdctl_binary() is None, reason="etcdctl is not installed")
def test_etcdctl_lock_and_distlock_share_a_name_under_the_same_scoped_role(
    cluster: EtcdCluster, alice: str, name: str
) -> None:
    """Go's Mutex needs only ``NAME/``; so does distlock now: both run under the one scoped role."""
    lock_name = f"app/{name}"
    with distlock.connect(alice) as store:
        lock = store.lock(lock_name, ttl=10)
        assert lock.acquire(timeout=5)
        etcdctl = etcdctl_binary()
        assert etcdctl is not None
        proc = subprocess.Popen(
            [etcdctl, "--endpoints", endpoints(cluster.url), "--user", f"alice:{ALICE_PW}", "lock", lock_name,
             "--", "sh", "-c", 'echo "GOT $ETCD_LOCK_REV"'],
            env={**os.environ, "ETCDCTL_API": "3"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            # etcdctl queues once it has started and logged in (seconds on a loaded machine)
            deadline = time.monotonic() + 20
            info = store.inspect(lock_name)
            while (info is None or info.waiters != 1) and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.1)
                info = store.inspect(lock_name)
            assert proc.poll() is None, "etcdctl ran its command while distlock held the lock"
            assert info is not None and info.waiters == 1
            fence = lock.fence
            lock.release()
            out, errtext = proc.communicate(timeout=30)
        finally:
            proc.kill()
        assert proc.returncode == 0, errtext
        (line,) = [ln for ln in out.splitlines() if ln.startswith("GOT")]
        assert fence is not None and int(line.split()[1]) > fence

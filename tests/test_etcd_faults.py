"""etcd-specific faults: a killed leader, leases revoked from outside, auth tokens, dead endpoints, the guard.

Kill -9 of a holder process and SIGSTOP past the TTL run for etcd in ``tests/test_processes.py``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import distlock
from distlock._backends.etcd._sync import guard
from tools.servers.etcd import (
    EtcdCluster,
    client_ports,
    etcd_cluster,
    partitionable_cluster,
    post,
)
from tools.servers.proc import free_port, netns_usable

pytestmark = pytest.mark.skipif(not __import__("shutil").which("etcd"), reason="etcd is not installed")


def b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def contenders(port: int, name: str) -> list[dict[str, object]]:
    """The keys under ``name/``, oldest first, as an outside client sees them."""
    prefix = (name + "/").encode()
    end = prefix[:-1] + bytes([prefix[-1] + 1])
    data = post(port, "/v3/kv/range", {"key": b64(prefix), "range_end": b64(end), "sort_target": "CREATE"})
    kvs = data.get("kvs") or []
    assert isinstance(kvs, list)
    return kvs


def wait_for(pred: object, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[EtcdCluster]:
    """A cluster of our own: this module kills its members."""
    with etcd_cluster(3) as cluster:
        yield cluster


def test_kill_leader_while_locks_are_held_and_waited_on(own_cluster: EtcdCluster, name: str) -> None:
    """Contenders hammer one lock and a long holder keeps another while the leader is killed with -9:
    never two holders at once, fences keep increasing, the long holding survives the election. (Leases of
    6 s: a new leader takes about a second on an idle machine, seconds more on one busy with other suites.)"""
    url = own_cluster.url + "?timeout=15"
    inside = 0
    overlaps = 0
    fences: list[int] = []
    errors: list[BaseException] = []
    guard_ = threading.Lock()
    kill_now = threading.Event()
    rounds = 12

    with distlock.connect(url) as store:
        long_hold = store.lock(name + "-long", ttl=6)
        assert long_hold.acquire(timeout=10)

        def worker() -> None:
            nonlocal inside, overlaps
            try:
                with distlock.connect(url) as mine:
                    lock = mine.lock(name, ttl=6)
                    for i in range(rounds):
                        assert lock.acquire(timeout=60)
                        with guard_:
                            inside += 1
                            overlaps += inside > 1
                            fences.append(lock.fence or 0)
                        time.sleep(0.01)
                        if i == rounds // 3:
                            kill_now.set()
                        with guard_:
                            inside -= 1
                        lock.release()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        assert kill_now.wait(60)
        leader = own_cluster.leader_index()
        assert leader is not None
        own_cluster.members[leader].kill()
        try:
            for t in threads:
                t.join(120)
            assert not errors, errors
            assert overlaps == 0
            assert len(fences) == 4 * rounds
            assert fences == sorted(fences) and len(set(fences)) == len(fences)
            assert own_cluster.leader_index() not in (None, leader)
            assert not long_hold.lost.is_set(), long_hold  # its lease was kept alive across the election
            assert long_hold.owned()
            long_hold.release()
        finally:
            own_cluster.restart(leader)  # the module's next tests need all three members


def test_paused_leader_longer_than_the_ttl_loses_nothing_and_grants_nothing_twice(
    own_cluster: EtcdCluster, name: str
) -> None:
    """SIGSTOP the leader (the member the holder talks to) for longer than the lease TTL: the holder's
    keepalives move to the new leader in time, the waiter does not get the lock meanwhile, and gets it once
    the holder releases."""
    leader = own_cluster.leader_index()
    assert leader is not None
    order = [leader] + [i for i in range(len(own_cluster.members)) if i != leader]
    holder_url = "etcd://" + ",".join(f"127.0.0.1:{own_cluster.members[i].port}" for i in order)
    waiter_got: list[float] = []
    with distlock.connect(holder_url) as holder_store, distlock.connect(own_cluster.url) as waiter_store:
        holder = holder_store.lock(name, ttl=6)
        assert holder.acquire(timeout=10)

        def waiter() -> None:
            lock = waiter_store.lock(name, ttl=6)
            try:
                if lock.acquire(timeout=60):
                    waiter_got.append(time.monotonic())
                    lock.release()
            except Exception:  # noqa: BLE001 - the assertions below report what went wrong
                pass

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        own_cluster.members[leader].pause()
        try:
            time.sleep(7.0)  # > the 6 s lease: only keepalives through the new leader keep it
            assert not waiter_got, "the waiter got the lock while the holder still held it"
            assert not holder.lost.is_set()
            assert holder.owned()  # asked of the majority
        finally:
            own_cluster.members[leader].resume()
        # etcd without PR #16822 (etcd#12528; Debian's 3.4.23): the resumed old leader may still revoke the
        # leases it saw expire while it was stopped. The holder then learns it at its next renewal.
        with contextlib.suppress(distlock.LockLost):
            holder.release()
        t.join(60)
        assert waiter_got


def test_revoked_waiter_never_reports_acquired(etcd_url: str, name: str) -> None:
    """etcd#11456 / F6: a waiter whose lease is revoked while it waits must not take its old place."""
    port = client_ports(etcd_url)[0]
    with distlock.connect(etcd_url) as store:
        holder = store.lock(name, ttl=10)
        assert holder.acquire()
        holder_key = guard(holder).key
        waiter_got: list[tuple[float, int | None]] = []
        release_waiter = threading.Event()

        def waiter() -> None:
            lock = store.lock(name, ttl=10)
            assert lock.acquire(timeout=60)
            waiter_got.append((time.monotonic(), lock.fence))
            release_waiter.wait(30)
            lock.release()

        w = threading.Thread(target=waiter)
        w.start()
        wait_for(lambda: len(contenders(port, name)) == 2, what="the waiter's key")
        (waiter_kv,) = [kv for kv in contenders(port, name) if base64.b64decode(str(kv["key"])) != holder_key]
        post(port, "/v3/lease/revoke", {"ID": waiter_kv["lease"]})
        wait_for(lambda: len(contenders(port, name)) == 1, what="the revoked key to go")

        third = store.lock(name, ttl=10)
        third_done = threading.Event()
        third_fence: list[int | None] = []

        def third_owner() -> None:
            assert third.acquire(timeout=60)
            third_fence.append(third.fence)
            time.sleep(1.0)  # the revoked waiter must not believe it holds the lock meanwhile
            assert not waiter_got, "the revoked waiter reported acquired while another owner held the lock"
            third.release()
            third_done.set()

        t = threading.Thread(target=third_owner)
        t.start()
        wait_for(lambda: len(contenders(port, name)) >= 2, what="the third owner's key")
        holder.release()
        t.join(60)
        assert third_done.is_set()
        w.join(0.1)
        wait_for(lambda: bool(waiter_got), what="the re-queued waiter to get the lock")
        release_waiter.set()
        w.join(30)
        assert waiter_got[0][1] is not None and third_fence[0] is not None
        assert waiter_got[0][1] > third_fence[0]


def test_lease_revoked_from_outside_sets_lost(etcd_url: str, name: str) -> None:
    port = client_ports(etcd_url)[0]
    lost: list[object] = []
    with distlock.connect(etcd_url) as store:
        lock = store.lock(name, ttl=3, on_lost=lost.append)
        assert lock.acquire()
        (kv,) = contenders(port, name)
        post(port, "/v3/lease/revoke", {"ID": kv["lease"]})
        assert lock.lost.wait(10), "the renewer must notice the revoked lease"
        with pytest.raises(distlock.LockLost):
            lock.release()
        wait_for(lambda: lost == [lock], what="on_lost")


def test_key_deleted_from_outside_sets_lost(etcd_url: str, name: str) -> None:
    port = client_ports(etcd_url)[0]
    with distlock.connect(etcd_url) as store:
        lock = store.lock(name, ttl=3)
        assert lock.acquire()
        post(port, "/v3/kv/deleterange", {"key": b64(guard(lock).key)})  # `etcdctl del` by an admin
        assert lock.lost.wait(10)
        other = store.lock(name, ttl=3)
        assert other.acquire(timeout=5)
        other.release()


def lease_before_and_after(
    etcd_url: str, name: str, ttl: float, meanwhile: Callable[[int, object], object]
) -> tuple[object, object, int]:
    """The lease of a lock's key in one holding and in the next one by the same lock object (the first
    holding's lease goes back to the store's pool on release); ``meanwhile(port, lease)`` runs between.
    Also the seconds the second lease has left right after the second acquire."""
    port = client_ports(etcd_url)[0]
    with distlock.connect(etcd_url) as store:
        lock = store.lock(name, ttl=ttl)
        assert lock.acquire(timeout=10)
        (first,) = contenders(port, name)
        lock.release()
        meanwhile(port, first["lease"])
        assert lock.acquire(timeout=10)
        (second,) = contenders(port, name)
        left = int(post(port, "/v3/lease/timetolive", {"ID": second["lease"]})["TTL"])  # type: ignore[arg-type]
        lock.release()
        return first["lease"], second["lease"], left


def test_a_pooled_lease_revoked_from_outside_is_replaced(etcd_url: str, name: str) -> None:
    """A released holding's lease waits in the store's pool for the next acquire; if someone revokes it
    meanwhile, the next acquire takes a fresh lease instead of failing ("requested lease not found")."""
    first, second, _ = lease_before_and_after(
        etcd_url, name, 10, lambda port, lease: post(port, "/v3/lease/revoke", {"ID": lease})
    )
    assert first != second


def test_an_aged_pooled_lease_is_renewed_not_replaced(etcd_url: str, name: str) -> None:
    """A free lease that aged in the pool (nothing held, so no renewal tick kept it alive) is renewed with
    one keepalive at the next acquire: no new lease is granted and none is left behind."""
    # 6 s lease, 3.5 s left after the pause: less than the 2/3 a pooled lease must have, still alive
    first, second, left = lease_before_and_after(etcd_url, name, 6, lambda _port, _lease: time.sleep(2.5))
    assert first == second
    assert left > 4, left  # renewed to its full 6 s at the second acquire


def test_break_lock_from_another_store_revokes_the_holders_lease(etcd_url: str, name: str) -> None:
    with distlock.connect(etcd_url) as a, distlock.connect(etcd_url) as b:
        lock = a.lock(name, ttl=3)
        assert lock.acquire()
        assert b.break_lock(name)
        assert lock.lost.wait(10)
        assert b.lock(name).acquire(timeout=5)


def test_guard_makes_a_write_conditional_on_still_holding(etcd_url: str, name: str) -> None:
    port = client_ports(etcd_url)[0]
    data_key = b64(name + "-data")
    with distlock.connect(etcd_url) as store:
        lock = store.lock(name, ttl=10)
        with pytest.raises(distlock.NotHeld):
            guard(lock)
        assert lock.acquire()
        g = distlock.etcd_guard(lock)  # the public name of the same helper
        assert g == guard(lock)
        assert g.create_revision == lock.fence
        assert g.etcdctl() == f'c("{g.key.decode()}") = "{lock.fence}"'
        txn = {
            "compare": [g.compare()],
            "success": [{"request_put": {"key": data_key, "value": b64("v1")}}],
        }
        assert post(port, "/v3/kv/txn", txn).get("succeeded") is True
        lock.release()
        assert not post(port, "/v3/kv/txn", txn).get("succeeded")  # a stale holder's write is refused


def test_guard_is_one_class_for_both_apis(etcd_url: str, name: str) -> None:
    """``etcd_guard`` of an asyncio lock and of a threaded lock: the same ``EtcdGuard`` class (one public type)."""

    async def async_guard() -> object:
        async with distlock.connect_async(etcd_url) as store:
            async with store.lock(name + "-a") as lock:
                return distlock.etcd_guard(lock)

    on_asyncio = asyncio.run(async_guard())
    with distlock.connect(etcd_url) as store, store.lock(name) as lock:
        threaded = distlock.etcd_guard(lock)
    assert type(on_asyncio) is type(threaded), (type(on_asyncio), type(threaded))


def test_unreachable_endpoint_is_a_bounded_backend_error() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(distlock.BackendError):
        distlock.connect(f"etcd://127.0.0.1:{port}?timeout=1&connect_timeout=0.5")
    assert time.monotonic() - started < 10


def test_dead_endpoint_in_the_url_is_skipped(etcd_url: str, name: str) -> None:
    dead = free_port()
    hosts = etcd_url.split("://", 1)[1]
    with distlock.connect(f"etcd://127.0.0.1:{dead},{hosts}") as store:
        lock = store.lock(name, ttl=5)
        assert lock.acquire(timeout=10)
        lock.release()


@pytest.fixture(scope="module")
def auth_cluster() -> Iterator[EtcdCluster]:
    """One member with auth on and 1-second tokens (to see the client refresh an expired token)."""
    with etcd_cluster(1, ("--auth-token-ttl", "1")) as cluster:
        port = cluster.members[0].port
        post(port, "/v3/auth/role/add", {"name": "root"})
        post(port, "/v3/auth/user/add", {"name": "root", "password": "s3cret-pw"})
        post(port, "/v3/auth/user/grant", {"user": "root", "role": "root"})
        post(port, "/v3/auth/enable", {})
        yield cluster


def test_auth_wrong_password_and_token_refresh(auth_cluster: EtcdCluster, name: str) -> None:
    base = auth_cluster.url.split("://", 1)[1]
    with pytest.raises(distlock.BackendError) as err:
        distlock.connect(f"etcd://root:not-it@{base}")
    assert "not-it" not in str(err.value)
    with distlock.connect(f"etcd://root:s3cret-pw@{base}") as store:
        assert "s3cret-pw" not in repr(store)
        lock = store.lock(name, ttl=5)
        assert lock.acquire(timeout=5)
        lock.release()
        time.sleep(2.5)  # the token has expired: the next request authenticates again
        assert lock.acquire(timeout=5)
        assert store.inspect(name) is not None
        lock.release()


@pytest.mark.skipif(not netns_usable(), reason="needs root and network namespaces (ip netns)")
def test_partitioned_leader_loses_nothing_and_grants_nothing_twice(name: str) -> None:
    """Cut the leader (the member the holder talks to) off the network for longer than the lease TTL:
    connections to it hang instead of failing, the holder's renewals move to the majority in time, nobody
    else gets the lock meanwhile, the majority keeps serving, and after the heal the lock is handed over."""
    with partitionable_cluster(3) as cluster:
        cut = len(cluster.members) - 1  # the member in its own network namespace
        leader = cluster.leader_index()
        assert leader is not None
        if leader != cut:
            move = {"targetID": cluster.member_id(cut)}
            post(cluster.members[leader].port, "/v3/maintenance/transfer-leadership", move, 5, cluster.host(leader))
            wait_for(lambda: cluster.leader_index() == cut, what="leadership on the member to cut")
        hosts = cluster.url.split("://", 1)[1].split(",")
        holder_url = "etcd://" + ",".join([hosts[cut], *hosts[:cut]])
        waiter_got: list[float] = []
        with distlock.connect(holder_url) as holder_store, distlock.connect(cluster.url) as other_store:
            holder = holder_store.lock(name, ttl=4)
            assert holder.acquire(timeout=10)

            def waiter() -> None:
                lock = other_store.lock(name, ttl=4)
                try:
                    if lock.acquire(timeout=60):
                        waiter_got.append(time.monotonic())
                        lock.release()
                except Exception:  # noqa: BLE001 - the assertions below report what went wrong
                    pass

            t = threading.Thread(target=waiter)
            t.start()
            time.sleep(0.3)
            cluster.partition()
            try:
                other = other_store.lock(name + "-other", ttl=4)
                assert other.acquire(timeout=10)  # the majority side serves new locks meanwhile
                other.release()
                time.sleep(6.0)  # > the 4 s lease: only renewals through the new leader keep it
                assert not waiter_got, "the waiter got the lock while the holder still held it"
                assert not holder.lost.is_set()
                assert holder.owned()  # asked of the majority
            finally:
                cluster.heal()
            # etcd#12528 (see the SIGSTOP test): the old leader may revoke the lease when it comes back
            with contextlib.suppress(distlock.LockLost):
                holder.release()
            t.join(60)
            assert waiter_got


def test_extend_beyond_the_lease_ttl_moves_the_key_to_a_longer_lease(etcd_url: str, name: str) -> None:
    """etcd cannot change a lease's TTL: extend(ttl) past it re-attaches the key to a new, longer lease in
    one txn, keeping the create revision (the fence and the place in the queue)."""
    port = client_ports(etcd_url)[0]
    with distlock.connect(etcd_url) as store:
        lock = store.lock(name, ttl=1, auto_renew=False)
        assert lock.acquire()
        fence = lock.fence
        (before,) = contenders(port, name)
        lock.extend(6)
        time.sleep(2.5)  # well past the first lease (1 s, or the server's minimum)
        (after,) = contenders(port, name)
        assert after["lease"] != before["lease"] and after["create_revision"] == before["create_revision"]
        assert lock.owned() and lock.fence == fence == guard(lock).create_revision
        assert not store.lock(name).acquire(blocking=False)
        lock.release()
        assert contenders(port, name) == []


def test_a_semaphore_resize_is_in_every_record_and_outlives_the_records_it_wrote(etcd_url: str, name: str) -> None:
    """set_permits writes the capacity into every contender's record; one that comes later copies it (its
    create is guarded by the record it copied from being unchanged), so the resize stays while anyone uses the
    semaphore, whoever leaves. A holding moved to a longer lease (extend) keeps its record as it is now."""
    port = client_ports(etcd_url)[0]

    def records() -> list[tuple[int, int | None, int]]:
        out = [json.loads(base64.b64decode(str(kv["value"]))) for kv in contenders(port, name)]
        return [(r["permits"], r.get("cap"), r.get("take", 1)) for r in out]

    with distlock.connect(etcd_url) as store:
        first = store.semaphore(name, permits=2, ttl=5)
        later = store.semaphore(name, permits=None, ttl=5)
        assert first.acquire() and later.acquire()
        assert first.set_permits(4) and records() == [(2, 4, 1), (2, 4, 1)]
        later.extend(8)  # past the lease's TTL: the key moves to a new lease, with the record as it is now
        first.release()
        third = store.semaphore(name, permits=None, ttl=5)
        assert third.acquire(blocking=False, permits=2) and records() == [(2, 4, 1), (2, 4, 2)]
        later.release()
        info = store.inspect(name)
        assert info is not None and (info.permits, info.taken) == (4, 2)
        again = store.semaphore(name, permits=2, ttl=5)  # the first user's declared size, still
        assert again.acquire(blocking=False, permits=2)
        again.release()
        third.release()
        assert contenders(port, name) == []


def test_more_holdings_than_one_txn_may_carry_are_renewed_and_inspected(etcd_url: str, name: str) -> None:
    """etcd refuses txns of more than 128 ops: renewal checks, owner look-ups and break_lock split them."""
    with distlock.connect(etcd_url) as store:
        sem = store.semaphore(name, permits=150, ttl=1.5)
        owners = [threading.Thread(target=lambda: (sem.acquire(timeout=20), time.sleep(2.5))) for _ in range(140)]
        for t in owners:
            t.start()
        for t in owners:
            t.join(60)
        info = store.inspect(name)
        assert info is not None and len(info.holders) == 140 and info.kind == "semaphore"
        assert all(h.owner.count(":") >= 2 for h in info.holders)
        assert store.break_lock(name)
        assert store.inspect(name) is None


def test_close_is_quick_when_the_cluster_is_gone(name: str) -> None:
    with etcd_cluster(1) as cluster:
        store = distlock.connect(cluster.url)
        lock = store.lock(name, ttl=30)
        assert lock.acquire()
        lock.release()  # its lease goes back to the store's pool
        cluster.members[0].kill()
        started = time.monotonic()
        store.close()  # revoking pooled leases is best effort: they expire by themselves
        assert time.monotonic() - started < 4


def test_a_full_database_refuses_new_locks_at_once_and_lets_holders_release(name: str) -> None:
    """The NOSPACE alarm (a cluster whose history nobody compacts fills its quota): an acquire fails at once
    with what to do, not after the ``timeout`` of retries as a "no answer"; a lock held before keeps
    being renewed (keep-alives and deletes are still served) and releases cleanly."""
    with etcd_cluster(1, ("--quota-backend-bytes", str(1 << 20))) as cluster:
        port = client_ports(cluster.url)[0]
        with distlock.connect(f"{cluster.url}?timeout=8") as store:
            held = store.lock(f"{name}-held", ttl=1.5)
            assert held.acquire(timeout=10)
            filler = b64(b"x" * 300_000)
            for i in range(50):  # until the server raises the alarm
                answer = post(port, "/v3/kv/put", {"key": b64(f"{name}-fill-{i}"), "value": filler}, timeout=10)
                if "space exceeded" in str(answer.get("error") or answer.get("message") or ""):
                    break
            else:
                pytest.fail("the quota was never exceeded")
            started = time.monotonic()
            with pytest.raises(distlock.BackendError, match=r"database is full .*--auto-compaction-retention"):
                store.lock(name, ttl=5).acquire(timeout=10)
            assert time.monotonic() - started < 2, "retried as if the server had not answered"
            time.sleep(2.5)  # past the held lock's TTL: only its renewals keep it
            assert not held.lost.is_set() and held.owned()
            held.release()
            assert store.inspect(f"{name}-held") is None


def test_a_downgrades_read_is_lost_with_the_write_key_it_stands_on(etcd_url: str, name: str) -> None:
    """A write holder took the read lock while a writer queued behind its write key: the read holds only because
    that key keeps its place. Its lease revoked before the write's release moved it, the writer holds: the read
    must be told lost too (docs/models/rwlock_downgrade.pml, LAPSE)."""
    port = client_ports(etcd_url)[0]
    with distlock.connect(etcd_url) as store, distlock.connect(etcd_url) as other:
        rw = store.rwlock(name, ttl=3)
        assert rw.write.acquire()
        (write_kv,) = contenders(port, name)
        got: list[bool] = []
        done = threading.Event()

        def write() -> None:
            writer = other.rwlock(name, ttl=3).write
            got.append(writer.acquire(timeout=30))
            done.wait(30)
            writer.release()

        t = threading.Thread(target=write)
        t.start()
        wait_for(lambda: len(contenders(port, name)) == 2, what="the writer's key")
        assert rw.read.acquire(blocking=False)  # the downgrade: granted at once
        post(port, "/v3/lease/revoke", {"ID": write_kv["lease"]})
        wait_for(lambda: got == [True], what="the queued writer to hold")
        held_on = not rw.read.lost.wait(10)
        done.set()
        t.join(30)
        assert not held_on, "a read standing on a revoked write key still believed it held beside a writer"
        for lock in (rw.write, rw.read):
            with contextlib.suppress(distlock.LockLost):
                lock.release()

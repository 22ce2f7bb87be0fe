"""ZooKeeper faults on real servers: leader killed mid-contention, session expired from outside, holder killed
with -9, a create whose reply is lost (F8), a lock broken from another client, ACLs, container clean-up.

The leader test runs on its own 3-node ensemble (it kills and restarts a server); the rest share a
standalone server started for this module, with short session timeouts.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoAuthError, NoNodeError
from kazoo.protocol.serialization import Create2, GetChildren, Transaction

import distlock
from distlock._backends.zookeeper import holdings as zk_holdings
from distlock._backends.zookeeper import layout
from distlock._backends.zookeeper.handler import Handler
from distlock.checker.proxy import FaultProxy
from tests.waiting import Waiter, take_in_thread, until
from tools.servers.proc import free_port
from tools.servers.zookeeper import ZkEnsemble, available, zookeeper_ensemble

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not available(), reason="ZooKeeper is not installed")


@pytest.fixture(scope="module")
def single() -> Iterator[ZkEnsemble]:
    with zookeeper_ensemble(1) as ens:
        yield ens


@pytest.fixture
def name() -> str:
    return f"f-{uuid.uuid4().hex[:12]}"


def kazoo(hosts: str, **kw: Any) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10, **kw)
    client.start(20)
    return client


def backend_of(lock: Any) -> Any:
    return lock._acquirer.backend


def wait_for(cond: Any, timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())


def test_session_expired_from_outside_sets_lost_and_requeues_waiters(single: ZkEnsemble, name: str) -> None:
    url = f"{single.url}?session_timeout=4"
    with distlock.connect(url) as victim, distlock.connect(url) as other:
        held = victim.lock(name)
        assert held.acquire(timeout=10)
        first = held.fence
        queued = victim.lock(name + "-q")
        blocker = other.lock(name + "-q")
        assert blocker.acquire(timeout=10)
        got: list[object] = []
        queue_path = layout.lock_path(name + "-q")

        def wait_then_release() -> None:
            ok = queued.acquire(timeout=60)
            got.append(ok)
            if ok:  # no orphan from the expired session: our node is the only child
                got.append(backend_of(queued).wire.client.get_children(queue_path))
                queued.release()

        waiter = threading.Thread(target=wait_then_release)
        waiter.start()
        time.sleep(0.5)  # the waiter's node is queued under the victim's session
        # expire the victim's session: a second client attaches to it and closes it
        session_id, password = backend_of(held).wire.client.client_id
        thief = KazooClient(hosts=single.hosts, client_id=(session_id, password), timeout=4)
        thief.start(20)
        thief.stop()
        thief.close()
        assert held.lost.wait(20), "session expiry must set lost"
        with pytest.raises(distlock.LockLost):
            held.release()
        # the lock is free for others, with a larger fence
        taker = other.lock(name)
        assert taker.acquire(timeout=20)
        assert first is not None and taker.fence is not None and taker.fence > first
        taker.release()
        # the waiter queued again under the new session and is handed the lock, leaving no orphan behind
        blocker.release()
        waiter.join(60)
        assert got[0] is True
        assert isinstance(got[1], list) and len(got[1]) == 1, got


def test_kill_9_holder_frees_lock_after_session_timeout(single: ZkEnsemble, name: str, tmp_path: Path) -> None:
    url = f"{single.url}?session_timeout=2"
    holder = subprocess.Popen(
        [sys.executable, "-m", "tests.proc_worker", "hold", url, name, "30", str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.startswith("ACQUIRED"), holder.stderr.read() if holder.stderr else ""
        first = int(line.split()[1])
        with distlock.connect(url) as store:
            lock = store.lock(name)
            assert not lock.acquire(timeout=0.5)  # alive: held
            holder.kill()
            holder.wait(10)
            killed = time.monotonic()
            assert lock.acquire(timeout=30)
            waited = time.monotonic() - killed
            assert lock.fence is not None and lock.fence > first
            lock.release()
        # the session timeout (2 s) plus the server's expiry tick, with a wide margin for a loaded machine
        assert waited < 15, f"freed only after {waited:.1f}s"
    finally:
        holder.kill()
        holder.communicate()


def _watched(backend: Any, parent: str) -> int:
    """How many children of ``parent`` the store's kazoo client watches with the server's confirmation (kazoo
    registers a data watch once the request that set it is answered)."""
    return sum(1 for path in list(backend.wire.client._data_watchers) if path.startswith(parent + "/"))


def _waiters(store: Any, name: str) -> int | None:
    info = store.inspect(name)
    return None if info is None else info.waiters


def _is_child_create(request: Any) -> bool:
    """Is this kazoo request the create of a lock's ephemeral sequential child?"""
    return isinstance(request, Create2) and bool(request.flags & 2)


def test_lost_create_reply_is_found_by_its_uuid(single: ZkEnsemble, name: str) -> None:
    """F8: the create succeeds on the server but the client sees a connection loss."""
    with distlock.connect(single.url) as store:
        client = backend_of(store.lock(name)).wire.client
        real = client._call
        calls: list[str] = []

        def lossy_call(request: Any, result: Any) -> Any:
            if not _is_child_create(request):
                return real(request, result)
            created = client.handler.async_result()
            real(request, created)
            created.get(10)  # it happened on the server...
            calls.append(request.path)
            result.set_exception(ConnectionLoss())  # ...but the reply is lost
            return None

        client._call = lossy_call
        try:
            lock = store.lock(name)
            assert lock.acquire(timeout=10)
        finally:
            del client._call
        assert len(calls) == 1, "exactly one create: the retry found the first node instead of making another"
        assert lock.fence is not None
        (child,) = client.get_children(layout.lock_path(name))
        assert child.startswith(layout.PROTECTED) and "-lock-" in child
        lock.release()
        assert client.get_children(layout.lock_path(name)) == []


def test_a_weighted_holding_whose_multi_reply_is_lost_is_found_by_its_uuid(single: ZkEnsemble, name: str) -> None:
    """F8 for a semaphore holding of 3 permits: its 3 leases are made in one multi request, which the server
    applies while the client sees a connection loss. The acquire finds the 3 leases by their UUID (no second
    multi), its fence is their czxid, and the release deletes all of them in one multi request."""
    with distlock.connect(single.url) as store:
        client = backend_of(store.lock(name)).wire.client
        real = client._call
        multis: list[object] = []

        def lossy_call(request: Any, result: Any) -> Any:
            if not isinstance(request, Transaction) or multis:
                return real(request, result)
            applied = client.handler.async_result()
            real(request, applied)
            answer = applied.get(10)
            if any(isinstance(r, BaseException) for r in answer):  # not applied (no parent yet): as it came
                result.set(answer)
                return None
            multis.append(request)  # it happened on the server...
            result.set_exception(ConnectionLoss())  # ...but the reply is lost
            return None

        client._call = lossy_call
        try:
            sem = store.semaphore(name, permits=4)
            assert sem.acquire(timeout=10, permits=3)
        finally:
            del client._call
        assert len(multis) == 1
        leases_path = f"{layout.lock_path(name)}/{layout.SEM_LEASES}"
        leases = client.get_children(leases_path)
        assert len(leases) == 3, "the retry found the leases instead of making more"
        assert {client.exists(f"{leases_path}/{c}").czxid for c in leases} == {sem.fence}
        info = store.inspect(name)
        assert info is not None and info.taken == 3 and [h.permits for h in info.holders] == [3]
        sent: list[Any] = []

        def spy(request: Any, result: Any) -> Any:
            sent.append(request)
            return real(request, result)

        client._call = spy
        try:
            sem.release()
        finally:
            del client._call
        # released together: the first request of the release is one multi deleting the three leases
        assert isinstance(sent[0], Transaction)
        assert sorted(op.path.rsplit("/", 1)[1] for op in sent[0].operations) == sorted(leases)
        assert client.exists(leases_path) is None  # the leases, then their emptied node


def test_an_acquire_queues_up_and_lists_the_queue_in_one_round_trip(single: ZkEnsemble, name: str) -> None:
    """The create of the queue node and the listing of the queue go out back to back (ZooKeeper answers one
    session's requests in order, so the listing holds the new node): the listing is sent while the create's
    answer is still on its way through a link that delays every answer."""
    node = single.nodes[0]
    proxy = FaultProxy(node.host, node.client_port).start()
    try:
        with distlock.connect(f"zookeeper://127.0.0.1:{proxy.port}") as store:
            lock = store.lock(name)
            assert lock.acquire(timeout=10)  # the parent nodes exist from now on
            lock.release()
            client = backend_of(lock).wire.client
            real = client._call
            creates: list[Any] = []
            ready_when_listed: list[list[bool]] = []

            def call(request: Any, result: Any) -> Any:
                if _is_child_create(request):
                    creates.append(result)
                elif isinstance(request, GetChildren):
                    ready_when_listed.append([c.ready() for c in creates])
                return real(request, result)

            client._call = call
            proxy.delay(0.05)  # each way
            try:
                assert lock.acquire(timeout=10)
            finally:
                del client._call
                proxy.heal()
            assert ready_when_listed[0] == [False], ready_when_listed
            lock.release()
    finally:
        proxy.close()


@contextlib.contextmanager
def _passing(queue: Any) -> Iterator[list[Any]]:
    """What is put on one of kazoo's work queues (its completion or callback thread's) in the block."""
    real_put = queue.put
    passed: list[Any] = []

    def put(item: Any, *args: Any, **kwargs: Any) -> None:
        passed.append(item)
        real_put(item, *args, **kwargs)

    queue.put = put
    try:
        yield passed
    finally:
        del queue.put


@pytest.fixture
def no_holder_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """No holding lives long enough for its deletion watch (whose answer goes through kazoo's completion
    thread, on purpose): a machine slow enough to keep a lock 0.2 s between acquire and release would arm it."""
    monkeypatch.setattr(zk_holdings, "WATCH_AFTER", 600.0)


@pytest.mark.usefixtures("no_holder_watch")
def test_a_lock_cycle_wakes_no_kazoo_completion_thread(single: ZkEnsemble, name: str) -> None:
    """Each answer of a cycle (create, listing, delete) wakes the waiting thread straight from kazoo's
    connection thread, none through kazoo's completion thread (one thread hop more: kazoo's ``create_async``
    takes it), and that connection thread waits with distlock's one-poll handler."""
    with distlock.connect(single.url) as store:
        lock = store.lock(name)
        assert lock.acquire(timeout=10)  # the parent nodes exist from now on
        lock.release()
        client = backend_of(lock).wire.client
        assert isinstance(client.handler, Handler)
        with _passing(client.handler.completion_queue) as passed:
            for _ in range(5):
                assert lock.acquire(timeout=10)
                lock.release()
        assert passed == []


@pytest.mark.usefixtures("no_holder_watch")
def test_a_waiters_wake_up_runs_on_kazoos_connection_thread(single: ZkEnsemble, name: str) -> None:
    """The deletion that ends a waiter's wait wakes it straight from kazoo's connection thread: no watch
    callback of the waiting store goes through kazoo's callback thread (one thread hop less per hand-off)."""
    with distlock.connect(single.url) as a, distlock.connect(single.url) as b:
        holder, waiter = a.lock(name), b.lock(name)
        assert holder.acquire(timeout=10)
        with _passing(backend_of(waiter).wire.client.handler.callback_queue) as passed:
            thread, got = take_in_thread(waiter, 10)
            assert until(lambda: _waiters(b, name) == 1)
            assert until(lambda: _watched(backend_of(waiter), layout.lock_path(name)) == 2)  # own and the holder's
            holder.release()
            thread.join(10)
        assert len(got) == 1
        assert passed == []


@contextlib.contextmanager
def _requests_under(client: Any, path: str, answers: list[Any] | None = None) -> Iterator[list[str]]:
    """The requests ``client`` queues in the block for nodes under ``path`` (their types); ``answers`` gets
    the result of each (kazoo's async result, ready once the server answered)."""
    real = client._call
    sent: list[str] = []

    def call(request: Any, result: Any) -> Any:
        if str(getattr(request, "path", "")).startswith(path):
            sent.append(type(request).__name__)
            if answers is not None:
                answers.append(result)
        return real(request, result)

    client._call = call
    try:
        yield sent
    finally:
        del client._call


def test_the_next_in_line_holds_on_its_turn_with_no_request(single: ZkEnsemble, name: str) -> None:
    """A waiter next in line watches its own child too (in the round trip that watches the holder's): when the
    holder's child is deleted, it holds without asking whether its own child is still there. ZooKeeper tells
    one session's events in order, so that child's deletion would have come first."""
    with distlock.connect(single.url) as a, distlock.connect(single.url) as b:
        holder, waiter = a.lock(name), b.lock(name)
        assert holder.acquire(timeout=10)
        thread, got = take_in_thread(waiter, 10)
        assert until(lambda: _waiters(b, name) == 1)
        assert until(lambda: _watched(backend_of(waiter), layout.lock_path(name)) == 2)  # own and the holder's
        try:
            with _requests_under(backend_of(waiter).wire.client, layout.lock_path(name)) as sent:
                holder.release()
                assert until(lambda: bool(got))
                requests_on_its_turn = list(sent)
        finally:
            thread.join(10)
        # its release's delete may already be out; nothing else: no exists(), no listing
        assert [r for r in requests_on_its_turn if r != "Delete"] == [], requests_on_its_turn


def test_after_a_dropped_connection_the_next_in_line_still_holds_with_no_request(single: ZkEnsemble, name: str) -> None:
    """A dropped connection takes the waiter's two watches with it (kazoo sets none again) and wakes it: its
    look after the reconnect watches its own child again with the holder's, in one round trip, so its turn
    still needs no request (before, it watched the holder's child only, and asked ``exists`` on its turn)."""
    node = single.nodes[0]
    proxy = FaultProxy(node.host, node.client_port).start()
    try:
        with distlock.connect(single.url) as a, distlock.connect(f"zookeeper://127.0.0.1:{proxy.port}") as b:
            holder, waiter = a.lock(name), b.lock(name)
            assert holder.acquire(timeout=10)
            thread, got = take_in_thread(waiter, 20)
            path = layout.lock_path(name)
            assert until(lambda: _waiters(b, name) == 1)
            assert until(lambda: _watched(backend_of(waiter), path) == 2)  # own and the holder's
            answers: list[Any] = []

            def settled() -> bool:
                """The waiter looked after the drop (once per state change: the drop, the reconnect), every
                look is answered (so it found the holder's child still there), and no other one follows."""
                n = len(answers)
                if n < 2 or not all(r.ready() for r in answers):
                    return False
                time.sleep(0.3)
                return len(answers) == n

            try:
                with _requests_under(backend_of(waiter).wire.client, path, answers) as sent:
                    assert proxy.cut() == 1  # the same session goes on over a new connection
                    assert until(settled)
                    looked = list(sent)
                    holder.release()
                    assert until(lambda: bool(got))
                    on_its_turn = list(sent[len(looked) :])
            finally:
                thread.join(10)
        assert set(looked) == {"GetData"}, looked  # each look read both children with a watch (no exists)
        assert [r for r in on_its_turn if r != "Delete"] == [], on_its_turn
    finally:
        proxy.close()


@pytest.mark.parametrize("sync_answered", [False, True], ids=["sync-lost", "sync-answered"])
def test_inspect_reads_again_behind_a_new_sync_when_the_connection_dropped_after_its_sync(
    single: ZkEnsemble, name: str, sync_answered: bool
) -> None:
    """``inspect`` (and so ``leader``) sends a ``sync`` before its reads so that they see what another client's
    server already granted. A sync serves only the reads its own connection carries: when the connection
    drops right after the sync went out, kazoo sends the reads on the next connection (on an ensemble perhaps
    to a server that is behind). The reads that answer must then follow a sync on that new connection (before,
    they went out alone). Whether the sync's answer came back before the drop or was lost with it."""
    node = single.nodes[0]
    proxy = FaultProxy(node.host, node.client_port).start()
    try:
        with distlock.connect(single.url) as a, distlock.connect(f"zookeeper://127.0.0.1:{proxy.port}") as b:
            holder = a.lock(name)
            assert holder.acquire(timeout=10)
            backend = b._acquirer.backend
            b.inspect(name + "-warm")  # the store's session is up before the requests are watched
            client = backend.wire.client
            real, path = client._call, layout.lock_path(name)
            drops: list[str] = []  # kazoo's connection states other than CONNECTED, as its listeners hear them
            queued: list[tuple[str, int]] = []  # (request type, drops heard when it was queued)

            def listen(state: str) -> None:
                if state != "CONNECTED":
                    drops.append(state)

            def call(request: Any, result: Any) -> Any:
                if not str(getattr(request, "path", "")).startswith(path):
                    return real(request, result)
                queued.append((type(request).__name__, len(drops)))
                out = real(request, result)
                if len(queued) == 1:  # the first sync is queued: drop the connection before the reads go
                    if sync_answered:
                        result.wait(10)
                        assert result.successful()
                    assert proxy.cut() == 1
                    assert until(lambda: bool(drops))
                return out

            client.add_listener(listen)
            client._call = call
            try:
                info = b.inspect(name)
            finally:
                del client._call
                client.remove_listener(listen)
            assert info is not None and info.holders[0].fence == holder.fence
            first = queued[0][1]
            assert queued[0][0] == "Sync", queued
            after = [kind for kind, drops in queued if drops > first]  # queued once the drop was counted
            listing = len(after) - 1 - after[::-1].index("GetChildren")  # the last listing: it answered
            assert "Sync" in after[:listing], queued
            holder.release()
    finally:
        proxy.close()


def test_inspect_answers_while_kazoos_completion_thread_is_busy(single: ZkEnsemble, name: str) -> None:
    """The check that ``inspect``'s reads came behind its sync reads the sync's result as kazoo's connection
    thread settles it. kazoo's completion thread (where the callbacks of every request's result run, a user's
    too on a shared client, and where ``sync_async`` settles the result it returns) can be busy meanwhile."""
    with distlock.connect(single.url) as a, distlock.connect(single.url) as b:
        holder = a.lock(name)
        assert holder.acquire(timeout=10)
        client = b._acquirer.backend.wire.client
        busy = threading.Event()

        def slow() -> None:
            busy.set()
            time.sleep(2.0)

        client.handler.completion_queue.put(slow)
        assert busy.wait(10)
        info = b.inspect(name)  # before: the sync's result was still unsettled: "dropped around every read"
        assert info is not None and info.holders[0].fence == holder.fence
        holder.release()


def test_a_waiter_whose_own_child_was_deleted_queues_again_on_its_turn(single: ZkEnsemble, name: str) -> None:
    """F6 with the own-child watch: an admin deletes the next-in-line waiter's child and the holder's in one
    transaction, so the two deletion events come back to back (its own first). The waiter must not take the
    turn its vanished child had: it queues again and holds with a child of its own that exists."""
    admin = kazoo(single.hosts)
    try:
        with distlock.connect(single.url) as a, distlock.connect(single.url) as b:
            holder, waiter = a.lock(name), b.lock(name)
            assert holder.acquire(timeout=10)
            first = holder.fence
            w = Waiter(waiter)
            assert until(lambda: _waiters(b, name) == 1)
            assert until(lambda: _watched(backend_of(waiter), layout.lock_path(name)) == 2)  # own and the holder's
            path = layout.lock_path(name)
            ours, theirs = layout.sort_children(admin.get_children(path))  # the holder's child, then the waiter's
            both = admin.transaction()
            both.delete(f"{path}/{theirs}")
            both.delete(f"{path}/{ours}")
            assert all(r is True for r in both.commit())
            assert w.granted(10)
            assert holder.lost.wait(10)
            children = admin.get_children(path)
            assert len(children) == 1 and children[0] != theirs, (children, theirs)
            assert w.fence is not None and first is not None and w.fence > first
            w.finish()
            assert w.owned
            with pytest.raises(distlock.LockLost):
                holder.release()
    finally:
        admin.stop()
        admin.close()


def test_break_from_another_client_sets_lost_via_the_holder_watch(single: ZkEnsemble, name: str) -> None:
    with distlock.connect(single.url) as a, distlock.connect(single.url) as b:
        lock = a.lock(name)
        assert lock.acquire(timeout=10)
        assert b.break_lock(name)
        assert lock.lost.wait(10)
        with pytest.raises(distlock.LockLost):
            lock.release()
        assert b.lock(name).acquire(timeout=10)


def test_holdings_watched_one_after_another_start_no_thread_per_grant(single: ZkEnsemble, name: str) -> None:
    """A holding's deletion watch is armed by the store's one sweeper thread: a lock taken again and again,
    each time held until its watch is armed (past ``WATCH_AFTER``), starts no thread on its grants once the
    first ones are made (a thread started on the grant path costs about 0.1 ms there)."""
    with distlock.connect(single.url) as store:
        lock = store.lock(name)
        backend = backend_of(lock)
        seen: set[threading.Thread] = set()  # the objects, kept: an ident may be reused once its thread ends
        started_late: list[str] = []
        for i in range(6):
            assert lock.acquire(timeout=10)
            started = [t for t in threading.enumerate() if t not in seen]
            seen.update(started)
            if i >= 2:
                started_late += [t.name for t in started]
            assert until(lambda: _watched(backend, layout.lock_path(name)) == 1)  # the sweep is done
            lock.release()
            assert until(lambda: _watched(backend, layout.lock_path(name)) == 0)
        assert started_late == []
        assert lock.acquire(timeout=10)  # and the sweeper still arms the watch: a break is seen
        with distlock.connect(single.url) as admin:
            assert admin.break_lock(name)
        assert lock.lost.wait(10)
        sweeper = next(t for t in threading.enumerate() if t.name == "distlock-zk-sweeper" and t in seen)
    sweeper.join(10)  # the store closed: its sweeper ended with it
    assert not sweeper.is_alive()


def test_digest_acl_protects_nodes(single: ZkEnsemble, name: str) -> None:
    root = f"/acl-{uuid.uuid4().hex[:8]}"
    with distlock.connect(f"zookeeper://alice:s3cret@{single.hosts}?root={root}") as store:
        assert "s3cret" not in repr(store)
        lock = store.lock(name)
        assert lock.acquire(timeout=10)
        path = layout.lock_path(name, root)
        own = backend_of(lock).wire.client
        (child,) = own.get_children(path)
        acl, _ = own.get_acls(f"{path}/{child}")
        assert [a.id.scheme for a in acl] == ["digest"]
        outsider = kazoo(single.hosts)
        try:
            with pytest.raises(NoAuthError):
                outsider.get_children(path)
            with pytest.raises(NoAuthError):
                outsider.delete(f"{path}/{child}")
        finally:
            outsider.stop()
            outsider.close()
        with distlock.connect(f"zookeeper://mallory:guess@{single.hosts}?root={root}") as wrong:
            with pytest.raises(distlock.BackendError):
                wrong.lock(name).acquire(timeout=2)
        assert lock.owned()
        lock.release()


def test_emptied_lock_paths_are_removed(single: ZkEnsemble, name: str) -> None:
    with distlock.connect(single.url) as store:
        lock = store.lock(name + "/deep/er")
        assert lock.acquire(timeout=10)
        lock.release()
        client = backend_of(lock).wire.client
        path = layout.lock_path(name)
        # container nodes: the server deletes them once empty (checked every second by the test servers)
        assert wait_for(lambda: client.exists(path) is None, 20, 0.2), client.get_children(path)


def test_unreachable_server_is_a_backend_error_quickly() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(distlock.BackendError):
        distlock.connect(f"zookeeper://127.0.0.1:{port}?connect_timeout=1")
    assert time.monotonic() - started < 10


def test_chroot_and_absolute_names(single: ZkEnsemble, name: str) -> None:
    chroot = f"/chroot-{uuid.uuid4().hex[:8]}"
    admin = kazoo(single.hosts)
    try:
        admin.ensure_path(chroot)
        with distlock.connect(f"{single.url}{chroot}") as store:
            lock = store.lock(name)
            absolute = store.lock(f"/{name}-abs")
            assert lock.acquire(timeout=10) and absolute.acquire(timeout=10)
            assert admin.get_children(f"{chroot}{layout.DEFAULT_ROOT}/{name}")
            assert admin.get_children(f"{chroot}/{name}-abs")
            assert [i.name for i in store.list(name)] == [name]
            lock.release()
            absolute.release()
    finally:
        admin.stop()
        admin.close()


# -- the leader dies while locks are held and waited on --------------------------------------------------
@pytest.fixture(scope="module")
def ensemble() -> Iterator[ZkEnsemble]:
    with zookeeper_ensemble(3) as ens:
        yield ens


def test_leader_killed_during_contention_never_grants_twice(ensemble: ZkEnsemble, name: str) -> None:
    url = f"{ensemble.url}?session_timeout=10"
    guard = threading.Lock()
    inside: list[Any] = []
    violations: list[str] = []
    fences: list[int] = []
    done = {"before": 0, "after": 0}
    phase = {"killed": False}
    stop = threading.Event()
    errors: list[BaseException] = []
    states: list[str] = []

    def worker() -> None:
        try:
            with distlock.connect(url) as store:
                store._backend.wire.client.add_listener(states.append)  # type: ignore[attr-defined]
                lock = store.lock(name)
                while not stop.is_set():
                    try:
                        if not lock.acquire(timeout=5):
                            continue
                    except distlock.BackendError:
                        time.sleep(0.1)
                        continue
                    with guard:
                        live = [other for other in inside if not other.lost.is_set()]
                        if live and not lock.lost.is_set():
                            violations.append(f"granted while {len(live)} live holder(s) inside")
                        inside.append(lock)
                        assert lock.fence is not None
                        fences.append(lock.fence)
                        done["after" if phase["killed"] else "before"] += 1
                    time.sleep(0.03)
                    with guard:
                        inside.remove(lock)
                    try:
                        lock.release()
                    except (distlock.LockLost, distlock.BackendError):
                        pass
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        assert wait_for(lambda: done["before"] >= 10, 30)
        assert wait_for(lambda: ensemble.leader() is not None, 20)
        leader = ensemble.leader()
        assert leader is not None
        phase["killed"] = True
        ensemble.kill(leader)
        assert wait_for(lambda: done["after"] >= 10, 45), "no progress after the leader died"
        ensemble.restart(leader)
        assert wait_for(lambda: done["after"] >= 20, 30)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert "SUSPENDED" in states, "the clients never noticed the leader's death"
    assert not violations, violations
    assert len(set(fences)) == len(fences), "a fence was handed out twice"
    assert fences == sorted(fences), "fences must grow in grant order"


def test_release_wakes_one_waiter_not_the_herd(single: ZkEnsemble, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """F11: each waiter watches only its predecessor, so one release wakes one waiter."""
    from distlock._backends.zookeeper import _sync as zk

    wakes: list[str] = []
    original = zk.Attempt.wake

    def counting_wake(self: Any, event: Any = None) -> None:
        wakes.append(self.claim.token)
        original(self, event)

    monkeypatch.setattr(zk.Attempt, "wake", counting_wake)
    n = 5
    with distlock.connect(single.url) as store:
        holder = store.lock(name)
        assert holder.acquire(timeout=10)
        order: list[int] = []

        def waiter(i: int) -> None:
            lock = store.lock(name)
            assert lock.acquire(timeout=60)
            order.append(i)
            time.sleep(0.05)
            lock.release()

        threads = []
        for i in range(n):
            threads.append(threading.Thread(target=waiter, args=(i,)))
            threads[-1].start()
            queued = i + 1  # wait until this waiter is in the queue before starting the next one

            def in_queue(queued: int = queued) -> bool:
                info = store.inspect(name)
                return info is not None and info.waiters == queued

            assert wait_for(in_queue, 30)
        assert wakes == []  # nobody is woken while the holder holds
        holder.release()
        for t in threads:
            t.join(60)
        assert order == list(range(n))  # FIFO
        # one wake-up per hand-off; a herd would wake every remaining waiter at each release (n + n-1 + ...)
        assert len(wakes) == n, wakes
        assert len(set(wakes)) == n


def test_connection_down_past_grace_sets_lost_while_server_is_silent(single: ZkEnsemble, name: str) -> None:
    """F7: a holder cut off from the ensemble is told it lost the lock before the server could expire its
    session, i.e. without hearing from the server at all (it is paused)."""
    url = f"{single.url}?session_timeout=3"  # kazoo notices the silence after 2 s; grace 1 s
    (node,) = single.nodes
    assert node.proc is not None
    with distlock.connect(url) as store:
        lock = store.lock(name)
        assert lock.acquire(timeout=10)
        node.proc.pause()
        try:
            paused = time.monotonic()
            assert lock.lost.wait(20)
            told = time.monotonic() - paused
        finally:
            node.proc.resume()
        assert told < 3.0 + 5.0, f"told only after {told:.1f}s"  # at most the session timeout, plus slack
        with pytest.raises(distlock.LockLost):
            lock.release()
    with distlock.connect(url) as store:  # and the lock is free again
        again = store.lock(name)
        assert again.acquire(timeout=20)
        again.release()


def test_fences_keep_growing_when_the_parent_is_recreated(single: ZkEnsemble, name: str) -> None:
    """Sequence numbers restart with a new parent node; the czxid fence does not."""
    with distlock.connect(single.url) as store:
        lock = store.lock(name)
        fences = []
        for _ in range(2):
            assert lock.acquire(timeout=10)
            fences.append(lock.fence)
            lock.release()
        client = backend_of(lock).wire.client
        path = layout.lock_path(name)
        try:
            client.delete(path)  # what the server does to an emptied container, done now
        except NoNodeError:
            pass  # the server was quicker
        assert lock.acquire(timeout=10)
        (child,) = client.get_children(path)
        assert child.endswith("-lock-0000000000"), child  # the sequence restarted...
        assert lock.fence is not None and all(f is not None and lock.fence > f for f in fences)  # ...the fence did not
        lock.release()


def test_abandon_during_a_disconnection_is_finished_on_reconnect(
    single: ZkEnsemble, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F8/F10: a timed-out waiter whose clean-up fails (connection down) must not leave its node in the queue
    once the same session is back: the node would stall every later waiter."""
    from kazoo.protocol.states import KazooState

    with distlock.connect(single.url) as a, distlock.connect(single.url) as b:
        holder = a.lock(name)
        assert holder.acquire(timeout=10)
        backend = backend_of(b.lock(name))

        def down(path: str) -> bool:
            raise distlock.BackendError("injected: connection down", backend="zookeeper")

        def all_down(paths: list[str]) -> None:
            raise distlock.BackendError("injected: connection down", backend="zookeeper")

        monkeypatch.setattr(backend.nodes, "delete", down)
        monkeypatch.setattr(backend.nodes, "delete_all", all_down)  # the clean-ups' multi request, too
        # times out; its clean-up fails and is deferred (logged): the acquire reports what happened, not held
        assert b.lock(name).acquire(timeout=0.3) is False
        path = layout.lock_path(name)
        client = backend.wire.client
        session = client.client_id[0]

        def b_nodes() -> list[str]:
            return [c for c in client.get_children(path) if client.exists(f"{path}/{c}").ephemeralOwner == session]

        assert len(b_nodes()) == 1  # the orphan the failed abandon left behind
        monkeypatch.undo()  # the connection is back: deletes work again
        backend.session.on_state(KazooState.SUSPENDED)
        backend.session.on_state(KazooState.CONNECTED)  # the same session is back
        assert wait_for(lambda: b_nodes() == [], 10)
        holder.release()
        assert b.lock(name).acquire(timeout=10)  # nothing stalls the queue


def test_watching_a_vanished_predecessor_leaves_no_watch(single: ZkEnsemble, name: str) -> None:
    """A waiter whose predecessor left before the watch was set must not leave a never-firing watch behind
    (``exists`` on a missing node would, on the server and in kazoo, for every such race)."""
    with distlock.connect(single.url) as store:
        backend = backend_of(store.lock(name))
        gone = f"{layout.lock_path(name)}/_c_x-lock-0000000007"
        assert backend.nodes.watch_exists(gone, lambda event: None) is False
        assert gone not in backend.wire.client._data_watchers


def test_session_end_follows_the_session_timeout_the_server_granted(single: ZkEnsemble) -> None:
    """lease_end counts with the timeout the server granted: asking for more than its maximum must not make
    the local lease outlive the server's session."""
    # the test servers grant at most 60 s: asking for 90 s gets 60 s
    with distlock.connect(f"{single.url}?session_timeout=90") as store:
        backend = backend_of(store.lock("x"))
        assert backend.granted_timeout == pytest.approx(60.0)
        assert backend.lease_end(None) - time.monotonic() < 60.0 - 0.6
        assert backend.suspend_grace is None
    with distlock.connect(f"{single.url}?session_timeout=6&suspend_grace=0.5") as store:
        assert backend_of(store.lock("x")).granted_timeout == pytest.approx(6.0)
        assert backend_of(store.lock("x")).suspend_grace == 0.5
    with pytest.raises(distlock.ConfigError):
        distlock.connect(f"{single.url}?lost_on=never")


def test_an_abandon_that_cannot_wait_for_its_step_deletes_in_the_background(single: ZkEnsemble, name: str) -> None:
    """The clean-up waits for the attempt's running step only within its budget; past it the child is
    handed to the background clean-up, which deletes it now (the connection is fine: no reconnect will come
    to start it), so the queue is not stalled until the session ends."""
    from distlock._core import ids
    from distlock._core.types import Claim, Mode

    with distlock.connect(single.url) as a, distlock.connect(single.url) as b:
        holder = a.lock(name)
        assert holder.acquire(timeout=10)
        backend = backend_of(b.lock(name))
        backend.cleanup.budget = 0.3
        attempt = backend.attempt(Claim(name, Mode.EXCLUSIVE, ids.new_token(), ids.owner_id("t"), ttl=30))
        assert not attempt.try_acquire().acquired  # its child is queued behind the holder
        path = layout.lock_path(name)
        client = backend.wire.client
        session = client.client_id[0]

        def b_nodes() -> list[str]:
            return [c for c in client.get_children(path) if client.exists(f"{path}/{c}").ephemeralOwner == session]

        assert len(b_nodes()) == 1
        with attempt.step_mutex:  # a step of it still running (a try cancelled in flight)
            attempt.abandon()
            assert wait_for(lambda: b_nodes() == [], 1.0), "the child was left in the queue"
        holder.release()

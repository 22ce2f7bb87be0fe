"""A holding belongs to the process that acquired it, not to a child forked while it was held.

Pre-fork servers (gunicorn ``--preload``), Celery's prefork pool, ``multiprocessing`` with the fork start
method and daemonising helpers fork processes that inherit the memory recording a lock. Before, a child that
left the ``with`` block (as any returning code path does) released the **parent's** lock, and another process
took it while the parent's ``lost`` was still False; and a child that took a lock of its own through the
inherited store started the store's renewer anew, which renewed the parent's holding too, so a parent killed
with ``kill -9`` kept its lock alive through the child. Now the child drops what it inherited, with no word to
the backend: leaving the block releases nothing, ``release()`` says ``NotHeld``, ``owned()`` is False, and the
child's renewer renews only the child's own holdings.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import distlock
from distlock import NotHeld, UnsupportedFeature
from tests.waiting import until


def _in_a_child(body: Callable[[], None]) -> int:
    """Run ``body`` in a forked child; its exit status (0: ``body`` returned, 1: it raised)."""
    return _exited_within(_fork(body), 60)


async def _in_a_child_async(body: Callable[[], None]) -> int:
    """``_in_a_child`` from a coroutine: the parent's event loop goes on running (its tasks with it)."""
    pid = _fork(body)
    deadline = time.monotonic() + 60
    while (code := _exited(pid, deadline)) is None:
        await asyncio.sleep(0.01)
    return code


def _exited(pid: int, deadline: float) -> int | None:
    """The child's exit status once it exited (killed past ``deadline``: -1), else None."""
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        return os.waitstatus_to_exitcode(status)
    if time.monotonic() > deadline:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return -1
    return None


def _exited_within(pid: int, seconds: float) -> int:
    """The child's exit status, waited for ``seconds`` at most (then it is killed: -1)."""
    deadline = time.monotonic() + seconds
    while (code := _exited(pid, deadline)) is None:
        time.sleep(0.01)
    return code


def _fork(body: Callable[[], None]) -> int:
    with warnings.catch_warnings():  # Python >= 3.12 warns about fork() in a process with threads
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 1
        try:
            body()
            code = 0
        except BaseException as exc:  # noqa: BLE001 - reported through the exit status
            os.write(2, f"child: {exc!r}\n".encode())
        finally:
            os._exit(code)
    return pid


def _election(store: distlock.Store, name: str) -> distlock.Election | None:
    """A leadership held by this process, where the backend has elections."""
    try:
        election = store.election(name, ttl=30)
    except UnsupportedFeature:
        return None
    assert election.campaign(timeout=10)
    return election


def test_a_forked_child_never_releases_or_reports_the_parents_lock(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    with sync_store.lock(name, ttl=30, timeout=10) as lock:
        fence = lock.fence
        election = _election(sync_store, name + "/leader")

        def child() -> None:
            lock.__exit__(None, None, None)  # what leaving the with block does in the child: nothing
            if election is not None:
                election.__exit__(None, None, None)
            assert lock.fence is None and not lock.lost.is_set()
            assert not lock.owned()  # and no round trip: the child holds nothing
            with pytest.raises(NotHeld):
                lock.release()
            with pytest.raises(NotHeld):
                lock.extend()
            if election is not None:
                assert election.term is None and not election.is_leader()
                with pytest.raises(NotHeld):
                    election.resign()
            sync_store.close()  # releases nothing of the parent's, and leaves the parent's connections alone

        assert _in_a_child(child) == 0
        # the parent still holds both, with the same fence, and nobody else can take them
        assert lock.owned() and lock.fence == fence and not lock.lost.is_set()
        with distlock.connect(backend_url) as other:
            assert not other.lock(name, ttl=30).acquire(blocking=False)
        if election is not None:
            assert election.is_leader()
            election.resign()


def _held_by_this_process(store: distlock.Store, name: str) -> bool:
    """The server's word: ``name`` is held, by an owner of this process (owner ids are ``host:pid:...``)."""
    info = store.inspect(name)
    return info is not None and any(f":{os.getpid()}:" in h.owner for h in info.holders)


def _parent_keeps_holding(lock: distlock.Lock, fence: int | None, backend_url: str, name: str) -> None:
    """After the child: the parent's holding is whole, renews, and releases as ever."""
    assert lock.owned() and lock.fence == fence and not lock.lost.is_set()
    lock.extend()
    with distlock.connect(backend_url) as other:
        assert _held_by_this_process(other, name)
        assert not other.lock(name, ttl=30).acquire(blocking=False)
    lock.release()
    with distlock.connect(backend_url) as other:
        assert other.inspect(name) is None
        again = other.lock(name, ttl=30)
        assert again.acquire(blocking=False)
        again.release()


def test_a_forked_child_takes_locks_of_its_own_through_the_inherited_store(
    sync_store: distlock.Store, backend_url: str, name: str
) -> None:
    """The child's connections (and threads) are its own: it locks through the store it inherited, at once,
    while a thread of the parent keeps making round trips on the parent's copy; neither side sees the
    other's answers, and the parent's holding is untouched."""
    shared = not backend_url.startswith("memory:")  # memory://: a forked child starts with a database of its own
    lock = sync_store.lock(name, ttl=30, timeout=10)
    assert lock.acquire()
    fence = lock.fence
    stop = threading.Event()
    errors: list[BaseException] = []

    def busy() -> None:  # the parent's traffic, in flight at the fork and all through the child's run
        while not stop.is_set():
            try:
                assert _held_by_this_process(sync_store, name), "the parent's lock is not seen held"
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                errors.append(exc)
                return

    def child() -> None:
        # a wait of the child's (a server-side wait or a watch stream on some connection) while the parent's
        # threads keep using every connection they have: the parent's lock is not the child's to take
        assert not shared or not sync_store.lock(name, ttl=30).acquire(timeout=1.5)
        for i in range(10):
            own = sync_store.lock(f"{name}/child", ttl=30)
            assert own.acquire(timeout=10), "the child could not take a lock of its own"
            assert own.owned() and _held_by_this_process(sync_store, f"{name}/child")
            if i == 0 and shared:  # the parent's lock, seen from the child: held, and not by the child
                assert not sync_store.lock(name, ttl=30).acquire(blocking=False)
                info = sync_store.inspect(name)
                assert info is not None and not any(f":{os.getpid()}:" in h.owner for h in info.holders)
            own.release()
            assert not own.owned()
        sync_store.close()  # the child's own connections and session; nothing of the parent's

    # kept-alive connections of the parent's, idle at the fork (made by round trips in parallel), and several
    # threads of the parent's using them around the fork and all through the child's run
    warm = [threading.Thread(target=lambda: [sync_store.inspect(name) for _ in range(3)]) for _ in range(8)]
    for thread in warm:
        thread.start()
    for thread in warm:
        thread.join(30)
    threads = [threading.Thread(target=busy, daemon=True) for _ in range(8)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(0.1)
        assert _in_a_child(child) == 0
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert not errors, f"the parent's store failed while the child used its copy: {errors[0]!r}"
    _parent_keeps_holding(lock, fence, backend_url, name)
    with distlock.connect(backend_url) as other:  # the child's lock was released (and not left behind)
        assert other.inspect(f"{name}/child") is None


def test_a_killed_childs_own_lock_ends_with_the_child(sync_store: distlock.Store, backend_url: str, name: str) -> None:
    """A lock the child took through the inherited store is the child's alone: on a session or a lease of
    the child's, not one of the parent's (a pooled etcd lease the parent keeps alive, a SQL session the
    parent keeps open). A child killed while holding it loses it with its own lease or session, whatever the
    parent does meanwhile."""
    if backend_url.startswith("memory:"):
        pytest.skip("memory://: one database per process")
    lock = sync_store.lock(name, ttl=2, timeout=10)  # renewed about every 0.7 s, with whatever rides along
    assert lock.acquire()
    warm = sync_store.lock(f"{name}/warm", ttl=2)  # the parent's free resources: a pooled lease, an idle session
    assert warm.acquire(timeout=10)
    warm.release()

    def child() -> None:
        own = sync_store.lock(f"{name}/child", ttl=2)
        assert own.acquire(timeout=10)
        os.kill(os.getpid(), signal.SIGKILL)  # dies holding it

    assert _in_a_child(child) == -signal.SIGKILL
    with distlock.connect(backend_url) as other:
        # its lease (2 s) or session runs out; the parent's renewals and open sessions go on all the while
        late = other.lock(f"{name}/child", ttl=30)
        assert late.acquire(timeout=30), "the dead child's lock was kept alive by its parent"
        late.release()
    assert lock.owned() and not lock.lost.is_set()
    lock.release()


async def test_a_forked_asyncio_child_locks_through_the_inherited_async_store(
    async_store: distlock.AsyncStore, backend_url: str, name: str
) -> None:
    """The asyncio side: the child runs an event loop of its own with the store it inherited (whose
    connections and tasks were the parent's loop's), takes and releases a lock of its own at once, and the
    parent's holding goes on."""
    shared = not backend_url.startswith("memory:")  # memory://: a forked child starts with a database of its own
    lock = async_store.lock(name, ttl=30, timeout=10)
    assert await lock.acquire()
    fence = lock.fence
    assert await async_store.inspect(name) is not None  # the connections the child inherits are warm

    async def run_child() -> None:
        for _ in range(3):
            own = async_store.lock(f"{name}/child", ttl=30)
            assert await own.acquire(timeout=10), "the child could not take a lock of its own"
            assert await own.owned()
            info = await async_store.inspect(f"{name}/child")
            assert info is not None and any(f":{os.getpid()}:" in h.owner for h in info.holders)
            if shared:
                info = await async_store.inspect(name)
                assert info is not None and not any(f":{os.getpid()}:" in h.owner for h in info.holders)
            await own.release()
        await async_store.aclose()

    async def busy() -> None:  # the parent's traffic, all through the child's run
        while True:
            info = await async_store.inspect(name)
            assert info is not None and any(f":{os.getpid()}:" in h.owner for h in info.holders)
            await asyncio.sleep(0)  # an inspect that never waits (SQLite's inline path) must not hog the loop

    # forked from a point where no call of the parent's loop is in flight; the child's loop is new, and the
    # parent's tasks go on using the connections the child inherited
    child = asyncio.ensure_future(_in_a_child_async(lambda: asyncio.run(run_child())))
    tasks = [asyncio.ensure_future(busy()) for _ in range(4)]
    try:
        done, _ = await asyncio.wait([child, *tasks], return_when=asyncio.FIRST_COMPLETED)
        assert child in done, f"the parent's store failed while the child used its copy: {done.pop().exception()!r}"
        assert child.result() == 0
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    assert await lock.owned() and lock.fence == fence and not lock.lost.is_set()
    await lock.extend()
    info = await async_store.inspect(name)
    assert info is not None and any(f":{os.getpid()}:" in h.owner for h in info.holders)
    await lock.release()
    assert await async_store.inspect(name) is None
    assert await async_store.inspect(f"{name}/child") is None


def test_a_forked_child_of_a_store_on_a_given_kazoo_client_is_told_to_connect_anew(
    zookeeper_url: str, name: str
) -> None:
    """``connect(client=KazooClient)``: the session is the caller's client's, whose connection thread is not in
    a forked child. The child is told so in one line (never a wait for ever), and the parent's lock and the
    caller's session are untouched."""
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=zookeeper_url.split("://", 1)[1].split("?", 1)[0], timeout=4)
    zk.start(timeout=15)
    try:
        with distlock.connect(client=zk) as store, store.lock(name, ttl=30, timeout=10) as lock:

            def child() -> None:
                with pytest.raises(distlock.BackendError, match="connect anew in the child"):
                    store.inspect(name)
                store.close()  # the caller's client is left alone

            assert _in_a_child(child) == 0
            assert lock.owned() and not lock.lost.is_set()
            assert _held_by_this_process(store, name)
        assert zk.connected
    finally:
        zk.stop()
        zk.close()


def test_a_forked_childs_zookeeper_holding_is_watched_by_a_sweeper_of_its_own(zookeeper_url: str, name: str) -> None:
    """ZooKeeper: a holding's deletion watch is armed by a sweeper thread of the store, which a forked child
    does not have (the parent's was waiting for a sweep due at the fork). A lock the child takes through the
    inherited store is watched all the same once it has lived ``WATCH_AFTER``: its deletion by an admin is
    told lost in the child."""
    from distlock._backends.zookeeper.holdings import WATCH_AFTER

    with distlock.connect(zookeeper_url) as store, store.lock(f"{name}/parent", ttl=30, timeout=10) as lock:

        def child() -> None:
            own = store.lock(f"{name}/child", ttl=30)
            assert own.acquire(timeout=10)
            time.sleep(5 * WATCH_AFTER)  # past the sweep that arms its watch
            with distlock.connect(zookeeper_url) as admin:
                assert admin.break_lock(f"{name}/child")
            assert own.lost.wait(10), "the child's holding was never watched"
            store.close()

        assert _in_a_child(child) == 0
        assert lock.owned() and not lock.lost.is_set()


def test_a_forked_child_follows_a_sentinel_failover(tmp_path: Path, name: str) -> None:
    """Redis Sentinel: the store's watch of the sentinels' announcements is a thread (a task) of the parent's,
    not in a forked child. The child's copy starts its own: after a failover its next lock is taken on the
    new master, not on an idle connection to the old one (which stays writable for seconds)."""
    from tools.servers.redis_sentinel import redis_sentinel

    switched, done, checked = tmp_path / "switched", tmp_path / "done", tmp_path / "checked"
    with redis_sentinel() as d, distlock.connect(d.url) as store:
        assert store.lock(f"{name}/parent", ttl=30).acquire(timeout=10)

        def child() -> None:
            first = store.lock(f"{name}/before", ttl=30)  # connections of the child's, to the master of now
            assert first.acquire(timeout=10)
            first.release()
            assert until(switched.exists, seconds=40)
            time.sleep(1.0)  # the announcement reaches the child's watch
            after = store.lock(f"{name}/after", ttl=30)
            assert after.acquire(timeout=10)
            done.write_text("held")
            assert until(checked.exists, seconds=40)
            after.release()

        pid = _fork(child)
        try:
            old = d.master_port()
            with d.sentinel() as s:
                s.execute_command("SENTINEL", "FAILOVER", d.service)
            d.wait_master(old)
            switched.write_text("yes")
            assert until(done.exists, seconds=30), "the child did not take its lock after the failover"
            with distlock.connect(d.url) as fresh:  # connected after the switch: the new master
                assert fresh.inspect(f"{name}/after") is not None, "the child's lock went to the old master"
        finally:
            checked.write_text("yes")
            assert _exited_within(pid, 30) == 0


WORKER = """
import os, sys, time
import distlock

url, name, ready = sys.argv[1:4]
store = distlock.connect(url)
parents = store.lock(name, ttl=2)
assert parents.acquire(timeout=10)
pid = os.fork()
if pid == 0:
    # the worker: takes a lock of its own through the store it inherited, and holds it (renewed)
    own = store.lock(name + "/worker", ttl=2)
    assert own.acquire(timeout=10)
    with open(ready, "w") as f:
        f.write("ready")
    time.sleep(60)
    os._exit(0)
print(pid, flush=True)
time.sleep(60)
"""


def test_a_killed_parents_lock_is_not_kept_alive_by_its_forked_worker(
    redis_url: str, name: str, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    parent = subprocess.Popen(
        [sys.executable, "-c", WORKER, redis_url, name, str(ready)], stdout=subprocess.PIPE, text=True
    )
    worker = 0
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert until(ready.exists, seconds=20)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        with distlock.connect(redis_url) as other:
            # the parent's lease (2 s) runs out: the name is free long before a renewing worker would let it go
            assert other.lock(name, ttl=5).acquire(timeout=15), "the worker kept the dead parent's lock alive"
            # while the worker's own lock, renewed by the worker, is still held past its 2 s lease
            time.sleep(3)
            assert not other.lock(name + "/worker", ttl=5).acquire(blocking=False)
    finally:
        if worker:
            os.kill(worker, signal.SIGKILL)
        parent.kill()
        parent.wait(timeout=10)
        if parent.stdout is not None:
            parent.stdout.close()


@pytest.mark.parametrize("row", ["sqlite", "zookeeper"])  # ZooKeeper's is Curator's layout (ephemeral members)
def test_a_forked_child_cannot_leave_its_parents_double_barrier(
    row: str, name: str, request: pytest.FixtureRequest
) -> None:
    """A double barrier entered by the parent: the child's copy of the object must not leave it (that would take
    the parent's member off, and the others would leave while the parent is still inside), and a latch the
    child inherited counts down through connections of its own."""
    url = str(request.getfixturevalue(f"{row}_url"))
    with distlock.connect(url) as store, distlock.connect(url) as other:
        gate, peer = store.double_barrier(name, 2), other.double_barrier(name, 2)
        latch = store.latch(name + "/done", 2)
        assert latch.count() == 2
        entered: list[bool] = []
        t = threading.Thread(target=lambda: entered.append(peer.enter(timeout=10)))
        t.start()
        assert gate.enter(timeout=10)
        t.join(10)
        assert entered == [True]

        def child() -> None:
            with pytest.raises(distlock.ConfigError, match="before a fork"):
                gate.leave(timeout=1)
            assert latch.count_down() == 1

        assert _in_a_child(child) == 0
        assert not peer.leave(timeout=0.5)  # the parent is still inside
        assert gate.leave(timeout=5)
        assert latch.count() == 1

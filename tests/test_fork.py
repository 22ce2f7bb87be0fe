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

import os
import signal
import subprocess
import sys
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
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -1
        time.sleep(0.01)


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

"""Mutual exclusion and faults across real OS processes, on every file/server backend.

These run the child in ``tests/proc_worker.py``; the memory backend is in-process only and is skipped.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import distlock

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cross_process_url(backend_url: str, backend: str) -> str:
    if backend == "memory":
        pytest.skip("memory:// is in-process only")
    return backend_url


def lease_bound(store: distlock.Store, ttl: float) -> float:
    """How long a dead holder may keep a lock: its TTL (+ margin), or the session timeout where locks hang off
    a session (ZooKeeper), which the store does not take from the lock's TTL."""
    return ttl + 5.0 if store.capabilities.needs_renewal else 30.0


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.proc_worker", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 30.0) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line.split(maxsplit=1)[1].strip()
        if not line and proc.poll() is not None:
            break
    err = proc.stderr.read() if proc.stderr else ""
    raise AssertionError(f"child never printed {prefix!r}; stderr:\n{err}")


def test_four_processes_never_overlap(cross_process_url: str, name: str, tmp_path: Path) -> None:
    (tmp_path / "counter").write_text("0")
    n, workers = 40, 4
    procs = [spawn("counter", cross_process_url, name, str(n), str(tmp_path), str(i)) for i in range(workers)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    assert int((tmp_path / "counter").read_text()) == n * workers  # no lost update
    spans = []
    for i in range(workers):
        for line in (tmp_path / f"log-{i}").read_text().splitlines():
            start, end, fence = line.split()
            spans.append((float(start), float(end), int(fence)))
    spans.sort()
    assert len(spans) == n * workers
    for (_s1, e1, f1), (s2, _e2, f2) in itertools.pairwise(spans):
        assert e1 <= s2, "two processes held the lock at once"
        assert f2 > f1, "fences must strictly increase in acquisition order"


def test_kill_9_holder_frees_lock_within_ttl(cross_process_url: str, name: str, tmp_path: Path) -> None:
    ttl = 2.0
    holder = spawn("hold", cross_process_url, name, str(ttl), str(tmp_path))
    try:
        first_fence = int(read_line(holder, "ACQUIRED"))
        holder.kill()
        holder.wait(10)
        killed_at = time.monotonic()
        with distlock.connect(cross_process_url) as store:
            bound = lease_bound(store, ttl)
            lock = store.lock(name, ttl=10)
            assert lock.acquire(timeout=bound + 10)
            waited = time.monotonic() - killed_at
            assert lock.fence is not None and lock.fence > first_fence
            lock.release()
        assert waited <= bound, f"freed after {waited:.1f}s, TTL {ttl}s"
    finally:
        holder.kill()
        holder.communicate()


def test_sigstop_past_ttl_then_lost_and_release_raises(cross_process_url: str, name: str, tmp_path: Path) -> None:
    ttl = 1.0
    holder = spawn("hold", cross_process_url, name, str(ttl), str(tmp_path))
    try:
        first_fence = int(read_line(holder, "ACQUIRED"))
        os.kill(holder.pid, signal.SIGSTOP)
        with distlock.connect(cross_process_url) as store:
            lock = store.lock(name, ttl=30)
            assert lock.acquire(timeout=lease_bound(store, ttl) + 10)  # the paused holder's lease runs out
            assert lock.fence is not None and lock.fence > first_fence
            os.kill(holder.pid, signal.SIGCONT)
            (tmp_path / "stop").write_text("")
            assert read_line(holder, "LOST") == "1"
            assert read_line(holder, "RELEASE") == "LockLost"
            assert lock.owned(), "the paused holder's release must not touch the new holder"
            lock.release()
        assert holder.wait(30) == 0
    finally:
        os.kill(holder.pid, signal.SIGCONT) if holder.poll() is None else None
        holder.kill()
        holder.communicate()

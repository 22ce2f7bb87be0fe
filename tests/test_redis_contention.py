"""The contention test over real processes, with pause and kill faults: distlock's Redis lock (with fenced
reads and writes) loses no update and keeps going; each of the seeds' wrong locks is caught failing.

This is the proof that the test can fail: the same workload and faults that the correct lock passes
find a lost update (or a dead lock) in every broken baseline (``distlock.checker.broken``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.redis_contention import COUNTER

ROOT = Path(__file__).resolve().parent.parent
TTL = 0.6
WORKERS = 3


@dataclass
class Outcome:
    final: int  # the counter at the end
    accepted: int  # writes the counter accepted, summed over the workers that lived to report
    progress_after_kill: int | None  # increments in the 2*TTL+ after a holder was killed


def spawn(algorithm: str, url: str, name: str, workdir: Path, ident: int, role: str = "") -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "tests.redis_contention", algorithm, url, name, str(TTL), str(workdir), str(ident)]
    return subprocess.Popen(
        [*args, role] if role else args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(proc: subprocess.Popen[str], word: str, timeout: float = 30.0) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.strip() == word:
            return
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"worker never printed {word}: {proc.stderr.read() if proc.stderr else ''}")


def run(algorithm: str, fault: str, url: str, name: str, workdir: Path) -> Outcome:
    counter = redis.Redis.from_url(url)

    def value() -> int:
        return int(counter.get(COUNTER % name) or 0)

    role = {"pause": "hold", "kill": "hold", "kill-in-window": "window"}[fault]
    victim = spawn(algorithm, url, name, workdir, 0, role)
    others = [spawn(algorithm, url, name, workdir, i) for i in range(1, WORKERS)]
    progress = None
    try:
        wait_for(victim, role.upper())
        if fault == "pause":  # SIGSTOP the holder past its lease (GC pause, VM freeze: F1 in docs/safety.md)
            os.kill(victim.pid, signal.SIGSTOP)
            before = value()
            time.sleep(TTL + 1.0)
            # until the others took the lock and wrote: on a busy machine they may still be starting (then the
            # resumed holder's stale write would overwrite nothing, and a broken lock would look sound)
            moved_by = time.monotonic() + 30
            while value() == before and time.monotonic() < moved_by:
                time.sleep(0.05)
            os.kill(victim.pid, signal.SIGCONT)
            time.sleep(0.5)
        else:  # kill -9 the holder (inside the broken lock's window for "kill-in-window")
            victim.kill()
            victim.wait(10)
            before = value()
            time.sleep(2 * TTL + 0.6)
            progress = value() - before
    finally:
        (workdir / "stop").write_text("")
    accepted = 0
    for p in [victim, *others]:
        out, err = p.communicate(timeout=60)
        if p is victim and fault != "pause":
            continue
        assert p.returncode == 0, err
        accepted += int(out.strip().splitlines()[-1].split()[1])
    final = value()
    counter.close()
    return Outcome(final, accepted, progress)


def test_distlock_survives_a_paused_holder(redis_url: str, name: str, tmp_path: Path) -> None:
    out = run("distlock", "pause", redis_url, name, tmp_path)
    assert out.accepted > 0
    assert out.final == out.accepted, "a lost update: the paused holder's stale write got through"


def test_distlock_survives_a_killed_holder(redis_url: str, name: str, tmp_path: Path) -> None:
    out = run("distlock", "kill", redis_url, name, tmp_path)
    assert out.progress_after_kill is not None and out.progress_after_kill > 0  # freed within the TTL


@pytest.mark.parametrize("algorithm", ["setnx-expire", "getset", "del-no-owner"])
def test_broken_locks_lose_updates_when_a_holder_pauses(
    redis_url: str, name: str, tmp_path: Path, algorithm: str
) -> None:
    out = run(algorithm, "pause", redis_url, name, tmp_path)
    assert out.final < out.accepted, f"{algorithm} was expected to lose updates: {out}"


def test_setnx_then_expire_deadlocks_when_the_holder_dies_in_between(redis_url: str, name: str, tmp_path: Path) -> None:
    out = run("setnx-expire", "kill-in-window", redis_url, name, tmp_path)
    assert out.progress_after_kill == 0, f"expected a lock without TTL to block everyone: {out}"
    redis.Redis.from_url(redis_url).delete(name)

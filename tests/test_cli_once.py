"""``distlock run --once``: a scheduled job on several hosts runs at most once. Real subprocesses on SQLite."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

PY = sys.executable


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/locks.db"


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "distlock", "--url", url, *args], capture_output=True, text=True, timeout=60)


def test_run_once_skips_while_held_and_until_at_least(url: str) -> None:
    # "nightly" keeps its name for at least 60 s: every later run within that is skipped (no tight timing: three
    # interpreter starts on a busy machine took more than a short at_least)
    first = cli(
        url, "run", "--once", "--at-least", "60", "--at-most", "120", "nightly", "--", "sh", "-c", "echo ran; exit 7"
    )
    assert (first.returncode, first.stdout) == (7, "ran\n"), first.stderr  # CMD's own exit code
    # within at_least: skipped, CMD not run; exit 0, or -E CODE with a one-line message
    skipped = cli(url, "run", "--once", "nightly", "--", "echo", "again")
    assert (skipped.returncode, skipped.stdout, skipped.stderr) == (0, "", "")
    coded = cli(url, "run", "--once", "-E", "3", "nightly", "--", "echo", "again")
    assert (coded.returncode, coded.stdout) == (3, "")
    assert coded.stderr.count("\n") == 1 and "skipped" in coded.stderr
    status = cli(url, "status", "-q", "nightly")
    assert status.returncode == 0  # still held by nobody's process: the lease ends by itself
    # "hourly" keeps it 2.5 s: the name is free again from the start + at_least, not before
    began = time.monotonic()
    assert cli(url, "run", "--once", "--at-least", "2.5", "hourly", "--", "true").returncode == 0
    while True:
        again = cli(url, "run", "--once", "hourly", "--", "sh", "-c", 'echo "$DISTLOCK_FENCE"')
        if again.returncode == 0 and again.stdout:
            break
        assert time.monotonic() - began < 30
        time.sleep(0.1)
    assert time.monotonic() - began >= 2.5
    assert int(again.stdout) > 0


def test_run_once_skips_while_the_job_runs(url: str, tmp_path: Path) -> None:
    flag = tmp_path / "started"
    job = subprocess.Popen(
        [PY, "-m", "distlock", "--url", url, "run", "--once", "job", "--", "sh", "-c", f"touch {flag}; sleep 30"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not flag.exists():
            assert time.monotonic() < deadline and job.poll() is None
            time.sleep(0.05)
        skipped = cli(url, "run", "--once", "-E", "9", "job", "--", "echo", "no")
        assert (skipped.returncode, skipped.stdout) == (9, "")
    finally:
        job.terminate()
        job.wait(20)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--at-least", "3", "job", "true"], "--once"),
        (["--once", "--at-least", "5", "--at-most", "2", "job", "true"], "--at-least"),
        (["--once", "-w", "1", "job", "true"], "never waits"),
        (["--once", "--ttl", "5", "job", "true"], "--at-most"),
        (["--once", "--at-most", "-1", "job", "true"], "--at-most"),
        (["--once", "job"], "CMD"),
    ],
)
def test_run_once_bad_usage_is_one_line_exit_2(url: str, args: list[str], says: str) -> None:
    out = cli(url, "run", *args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and says in out.stderr

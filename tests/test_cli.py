"""The command line, run as a real subprocess (``python -m distlock``) against a SQLite store."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import distlock


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/locks.db"


def cli(url: str | None, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    pre = ["--url", url] if url else []
    return subprocess.run(
        [sys.executable, "-m", "distlock", *pre, *args], capture_output=True, text=True, timeout=timeout
    )


def test_run_exports_fence_and_passes_exit_code(url: str) -> None:
    r = cli(url, "run", "job", "--", sys.executable, "-c",
            "import os,sys; print(os.environ['DISTLOCK_NAME'], os.environ['DISTLOCK_FENCE']); sys.exit(3)")  # fmt: skip
    assert r.returncode == 3, r.stderr
    name, fence = r.stdout.split()
    assert name == "job" and int(fence) >= 1
    r2 = cli(url, "run", "job", "--", sys.executable, "-c", "import os; print(os.environ['DISTLOCK_FENCE'])")
    assert r2.returncode == 0 and int(r2.stdout) > int(fence)


def test_run_exits_75_when_not_acquired(url: str) -> None:
    with distlock.connect(url) as store, store.lock("busy", ttl=30):
        r = cli(url, "run", "--timeout", "0.3", "busy", "--", "true")
    assert r.returncode == 75
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_bad_usage_and_urls_exit_2_with_one_line(url: str) -> None:
    for args in (
        ("--url", "bogus://x", "status", "a"),
        ("--url", "redis://h:notaport", "status", "a"),
        ("--url", url, "release", "a"),  # without --force
        ("--url", url, "run", "--ttl", "0", "a", "--", "true"),
        ("--url", url, "run", "--ttl", "nan", "a", "--", "true"),
        ("--url", url, "run", "--bogus", "a", "true"),  # an unknown option is not taken as NAME
        ("--url", url, "run", "--", "-a", "true"),  # a NAME that starts with "-"
        ("--url", url, "status", "--bogus", "a"),
        ("--url", url, "status", ""),
    ):
        r = cli(None, *args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr, r.stderr


def test_unreachable_backend_exits_69(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where a directory should be: the store cannot be opened
    r = cli(f"sqlite:///{blocker}/sub/locks.db", "status", "a")
    assert r.returncode == 69, r.stderr
    assert "Traceback" not in r.stderr


def test_credentials_never_printed() -> None:
    r = cli("bogus://user:s3cret@h/x", "status", "a")
    assert r.returncode == 2 and "s3cret" not in r.stderr + r.stdout


def test_status_list_release_json(url: str) -> None:
    with distlock.connect(url) as store:
        lock = store.lock("app/one", ttl=30)
        lock.acquire()
        st = json.loads(cli(url, "status", "app/one", "--json").stdout)
        assert st["held"] is True and st["kind"] == "lock"
        assert st["holders"][0]["fence"] == lock.fence and 0 < st["holders"][0]["ttl_left"] <= 30
        listed = json.loads(cli(url, "list", "app/", "--json").stdout)
        assert [x["name"] for x in listed] == ["app/one"]
        r = cli(url, "release", "app/one", "--force")
        assert r.returncode == 0 and "released" in r.stdout
        assert not lock.owned() and lock.lost.is_set()
    st = json.loads(cli(url, "status", "app/one", "--json").stdout)
    assert st == {"name": "app/one", "held": False, "kind": None, "waiters": 0, "holders": []}


def test_request_release_asks_the_holder_and_says_when_nobody_holds(url: str) -> None:
    with distlock.connect(url) as store:
        lock = store.lock("app/asked", ttl=1.5)
        assert lock.acquire()
        r = cli(url, "request-release", "app/asked", "--reason", "deploy")
        assert r.returncode == 0 and "asked" in r.stdout, r.stderr
        assert lock.revoke_requested.wait(10) and lock.revoke_reason == "deploy"
        assert lock.owned()  # asked, not broken
        lock.release()
    r = cli(url, "request-release", "app/asked")
    assert r.returncode == 1 and "not held" in r.stdout


def test_lost_lock_sends_sigterm_to_child(url: str, tmp_path: Path) -> None:
    marker = tmp_path / "got-term"
    child = (
        "import signal,sys,time,pathlib\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(marker)!r}).write_text('x'), sys.exit(0)))\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "distlock",
            "--url",
            url,
            "run",
            "--ttl",
            "1",
            "victim",
            "--",
            sys.executable,
            "-c",
            child,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    with distlock.connect(url) as store:
        assert store.break_lock("victim")
    started = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 70, err
    assert marker.exists(), "the command was not sent SIGTERM"
    assert "lost" in err and err.strip().count("\n") == 0
    assert time.monotonic() - started < 20


def test_init_checks_the_url_and_says_what_it_did(url: str) -> None:
    """``distlock init`` (SQL: creates the tables, see tests/test_access_sql.py); elsewhere it only checks the
    URL. A URL that does not answer is one line without its password, exit 69."""
    r = cli(url, "init")
    assert r.returncode == 0, r.stderr
    assert "nothing to create on sqlite://" in r.stdout
    bad = cli("postgresql://admin:hunter2-pw@127.0.0.1:1/db?connect_timeout=1", "init")
    assert bad.returncode == 69
    assert bad.stderr.count("\n") == 1 and "hunter2-pw" not in bad.stderr, bad.stderr


def test_run_permits_takes_a_semaphore_permit(url: str) -> None:
    # two permits of "pool" are held by the library; `run --permits 3` gets the third, the fourth waits in vain
    with distlock.connect(url) as store:
        sem = store.semaphore("pool", permits=3, ttl=30)
        with sem, sem:
            r = cli(url, "run", "-n", "--permits", "3", "pool", "--", sys.executable, "-c",
                    "import os; print(os.environ['DISTLOCK_FENCE'])")  # fmt: skip
            assert r.returncode == 0, r.stderr
            assert int(r.stdout) >= 1
            with sem:  # all three taken now
                r = cli(url, "run", "-n", "--permits", "3", "pool", "--", "true")
                assert r.returncode == 75, r.stderr
                assert "held by another owner" in r.stderr
        # every permit given back: the name is free for any kind again
        assert cli(url, "run", "-n", "pool", "--", "true").returncode == 0
    for bad in (("--permits", "0"), ("--permits", "2", "-s"), ("--permits", "2", "-x"), ("--once", "--permits", "2")):
        r = cli(url, "run", *bad, "pool", "--", "true")
        assert r.returncode == 2, (bad, r.stderr)
        assert r.stderr.strip().count("\n") == 0 and "--permits" in r.stderr, r.stderr


def test_latch_and_barrier_commands_count_down_wait_and_time_out(url: str) -> None:
    assert cli(url, "latch", "--count", "2", "deploy").stdout == "2\n"
    assert cli(url, "latch", "--down", "deploy").stdout == "1\n"
    short = cli(url, "latch", "--wait", "-w", "0.3", "deploy")
    assert short.returncode == 75 and "not at zero" in short.stderr, short.stderr
    done = cli(url, "latch", "--down", "--wait", "-w", "10", "deploy")
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    assert cli(url, "barrier", "--parties", "2", "-w", "0.3", "-E", "9", "gate").returncode == 9
    pre = [sys.executable, "-m", "distlock", "--url", url, "barrier", "--parties", "2", "-w", "20", "gate"]
    with subprocess.Popen(pre, stderr=subprocess.DEVNULL) as other:
        assert cli(url, "barrier", "--parties", "2", "-w", "20", "gate").returncode == 0
        assert other.wait(30) == 0  # the timed-out arrival above was withdrawn: it released nobody
    bad = cli(url, "latch", "--count", "0", "x")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr


def test_status_shows_each_semaphore_holdings_permits(url: str) -> None:
    # MODE says what each holding takes of the capacity in force: one weighted holding of 2, one of 1
    with distlock.connect(url) as store:
        big, small = store.semaphore("pool", permits=5, ttl=30), store.semaphore("pool", permits=5, ttl=30)
        assert big.acquire(permits=2) and small.acquire()
        r = cli(url, "status", "pool")
        assert r.returncode == 0, r.stderr
        modes = sorted(line.split()[4:8] for line in r.stdout.splitlines()[1:])
        assert modes == [["1", "of", "5", "permits"], ["2", "of", "5", "permits"]], r.stdout
        listed = cli(url, "list")
        assert "2 of 5 permits" in listed.stdout and "1 of 5 permits" in listed.stdout, listed.stdout
        big.release()
        small.release()

"""``distlock run`` / ``hold`` as dependable as flock(1): a table of flock-style invocations, a child that ignores
SIGTERM when the lock is lost, ``kill -9`` of ``run`` itself, nothing of a shell's tree outliving ``run`` (killed,
lost, ended, SIGTERM), Ctrl-C while waiting. Real subprocesses on SQLite."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import distlock

PY = sys.executable


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/locks.db"


def distlock_cmd(url: str, *args: str) -> list[str]:
    return [PY, "-m", "distlock", "--url", url, *args]


def cli(url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(distlock_cmd(url, *args), capture_output=True, text=True, timeout=timeout)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


# (arguments after `run`, whether another owner holds NAME, expected exit code, expected stdout)
TABLE = [
    # CMD after NAME is verbatim: options of CMD stay CMD's (used to be eaten by distlock)
    (["job", "echo", "--timeout", "5", "hello"], False, 0, "--timeout 5 hello"),
    (["job", "--", "echo", "-n", "x"], False, 0, "x"),
    (["-n", "job", "echo", "ok"], False, 0, "ok"),
    (["--nonblock", "job", "--", "echo", "ok"], False, 0, "ok"),
    (["-n", "job", "echo", "never"], True, 75, ""),
    (["-n", "-E", "9", "job", "echo", "never"], True, 9, ""),
    (["--conflict-exit-code", "0", "-n", "job", "echo", "never"], True, 0, ""),
    (["-w", "0.3", "job", "echo", "never"], True, 75, ""),
    (["-w", "0.3", "-E", "3", "job", "echo", "never"], True, 3, ""),
    (["-w", "5", "job", "echo", "ok"], False, 0, "ok"),
    (["job", "-c", "echo $DISTLOCK_NAME; exit 4"], False, 4, "job"),
    (["-c", "echo before-name", "job"], False, 0, "before-name"),
    (["-x", "job", "echo", "x"], False, 0, "x"),
    (["-s", "job", "echo", "s"], False, 0, "s"),
    (["--ttl", "5", "--kill-after", "1", "job", "sh", "-c", "exit 3"], False, 3, ""),
    (["job", "sh", "-c", "kill -9 $$"], False, 128 + 9, ""),
    (["job", "/nonexistent/cmd"], False, 127, ""),
    # bad usage: exit 2, nothing run
    (["-n", "x"], False, 0, "x 1"),  # `run NAME` with no CMD holds; -n takes it at once (stopped below)
    (["--bogus", "job", "echo", "never"], False, 2, ""),
    (["--", "-job", "echo", "never"], False, 2, ""),
    (["-n", "-w", "1", "job", "echo", "never"], False, 2, ""),
    (["-s", "-x", "job", "echo", "never"], False, 2, ""),
    (["job", "-c", "echo a", "extra"], False, 2, ""),
    (["--ttl", "0", "job", "echo", "never"], False, 2, ""),
    (["--kill-after", "-1", "job", "echo", "never"], False, 2, ""),
]


@pytest.mark.parametrize(("args", "busy", "code", "out"), TABLE, ids=[" ".join(t[0]) for t in TABLE])
def test_flock_style_invocations(url: str, args: list[str], busy: bool, code: int, out: str) -> None:
    if args == ["-n", "x"]:  # `run NAME` without CMD = hold: prints "NAME FENCE", holds until interrupted
        proc = subprocess.Popen(distlock_cmd(url, "run", *args), stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == out
        with distlock.connect(url) as store:
            assert not store.lock("x").acquire(blocking=False)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        assert proc.returncode == 0
        return
    with distlock.connect(url) as store:
        other = store.rwlock("job", ttl=30).write if busy and "-s" in args else store.lock("job", ttl=30)
        if busy:
            other.acquire()
        r = cli(url, "run", *args)
        if busy:
            other.release()
    assert r.returncode == code, (args, r.stdout, r.stderr)
    assert r.stdout.strip() == out, (args, r.stdout)
    if code not in (0, 3, 4, 128 + 9) or (busy and code == 0):
        assert r.stdout == "" or not busy
        assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr, r.stderr


def test_shared_holders_coexist_and_exclusive_waits(url: str) -> None:
    with distlock.connect(url) as store:
        rw = store.rwlock("cfg", ttl=30)
        with rw.read:
            assert cli(url, "run", "-s", "-n", "cfg", "true").returncode == 0
            assert cli(url, "run", "-x", "-n", "cfg", "true").returncode == 75
        with rw.write:
            assert cli(url, "run", "-s", "-n", "cfg", "true").returncode == 75


def test_lost_lock_sigterm_then_sigkill_for_a_child_that_ignores_sigterm(url: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    child = (
        "import os,signal,sys,time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(pidfile)!r},'w').write(str(os.getpid()))\n"
        "print('started', flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        distlock_cmd(url, "run", "--ttl", "2", "--kill-after", "1", "victim", PY, "-c", child),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    pid = int(pidfile.read_text())
    with distlock.connect(url) as store:
        assert store.break_lock("victim")
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 70, err
        assert "lost" in err and "SIGKILL" in err and err.strip().count("\n") == 0
        alive = pid_alive(pid)
        if alive:  # do not leak it when the test fails
            os.kill(pid, signal.SIGKILL)
        assert not alive, "the SIGTERM-ignoring child outlived the lock"
        # and the next holder can take it while nothing of the old command runs
        assert store.lock("victim").acquire(timeout=10)


def test_child_dies_when_run_is_killed_with_sigkill(url: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    child = (
        "import os,signal,time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(pidfile)!r},'w').write(str(os.getpid()))\n"
        "print('started', flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        distlock_cmd(url, "run", "--ttl", "30", "job", PY, "-c", child), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    pid = int(pidfile.read_text())
    assert pid_alive(pid)
    proc.kill()  # kill -9 of run: no handler of ours runs
    proc.communicate(timeout=10)
    try:
        assert wait_dead(pid), "CMD kept running after run was killed with SIGKILL"
    finally:
        if pid_alive(pid):  # do not leak it when the test fails
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_while_waiting_exits_130_and_sigterm_143(url: str) -> None:
    with distlock.connect(url) as store, store.lock("busy", ttl=30):
        for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            proc = subprocess.Popen(
                distlock_cmd(url, "run", "-v", "busy", "echo", "never"), stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            # a signal before the command waits (still importing, on a busy machine) would kill it plainly: -v
            # says when it waits
            assert proc.stderr is not None
            end = time.monotonic() + 60
            while b"waiting for 'busy'" not in proc.stderr.readline() and time.monotonic() < end:
                pass
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == code, err
            assert out == b"" and b"Traceback" not in err


def test_hold_prints_name_and_fence_and_releases_on_sigterm(url: str) -> None:
    proc = subprocess.Popen(distlock_cmd(url, "hold", "--ttl", "5", "svc"), stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    name, fence = proc.stdout.readline().split()
    assert name == "svc" and int(fence) >= 1
    assert cli(url, "status", "-q", "svc").returncode == 0
    assert cli(url, "run", "-n", "svc", "true").returncode == 75
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert cli(url, "status", "-q", "svc").returncode == 1
    r = cli(url, "status", "-q", "svc")
    assert r.stdout == "" and r.stderr == ""


def test_hold_exits_70_when_lost(url: str) -> None:
    proc = subprocess.Popen(
        distlock_cmd(url, "hold", "--ttl", "2", "svc"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("svc ")
    with distlock.connect(url) as store:
        assert store.break_lock("svc")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 70 and "lost" in err


# --- nothing CMD starts outlives run (Linux: the keeper of CMD's group and run as child subreaper) ---

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the process tree is Linux-only")


@pytest.fixture
def marker() -> Iterator[str]:
    """A number no other process has in its argv (a `sleep` argument); every process left with it is killed."""
    mark = f"{7000 + secrets.randbelow(1000)}.{secrets.randbelow(10**6):06d}{os.getpid()}"
    yield mark
    for pid in marked(mark):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def marked(mark: str, program: str = "") -> list[int]:
    """The living processes (not zombies) with ``mark`` in their argv, whose argv[0] ends with ``program``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(mark.encode() in arg for arg in argv) and argv[0].decode().endswith(program) and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def wait_for(check: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


@linux_only
def test_kill_9_of_run_kills_every_process_its_shell_started(url: str, tmp_path: Path, marker: str) -> None:
    after = tmp_path / "after"
    script = f"sleep {marker} & sleep {marker}; echo after > {after}"  # one in the background, one in front
    proc = subprocess.Popen(distlock_cmd(url, "run", "job", "-c", script))
    assert wait_for(lambda: len(marked(marker, "sleep")) == 2), "the shell did not start its two sleeps"
    proc.kill()  # kill -9 of run: no handler of ours runs
    proc.wait(timeout=10)
    assert wait_for(lambda: not marked(marker), timeout=20), f"left behind: {marked(marker)}"
    time.sleep(0.5)
    assert not after.exists(), "the shell went on after run was killed"


@linux_only
def test_lost_lock_kills_the_whole_tree_even_what_left_the_group(url: str, marker: str) -> None:
    # a daemon in a session of its own, one that ignores SIGTERM, one in front
    script = f'setsid sleep {marker} & (trap "" TERM; exec sleep {marker}) & sleep {marker}; echo after'
    proc = subprocess.Popen(
        distlock_cmd(url, "run", "--ttl", "2", "--kill-after", "1", "victim", "-c", script),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert wait_for(lambda: len(marked(marker, "sleep")) == 3), "the shell did not start its three sleeps"
    with distlock.connect(url) as store:
        assert store.break_lock("victim")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 70 and "lost" in err, err
        assert "after" not in out
        assert wait_for(lambda: not marked(marker), timeout=20), f"left behind: {marked(marker)}"
        assert store.lock("victim").acquire(timeout=10)


@linux_only
def test_cmd_ending_stops_what_it_left_behind_and_run_keeps_its_code(url: str, marker: str) -> None:
    script = f'setsid sleep {marker} & (trap "" TERM; exec sleep {marker}) & sleep {marker} & echo started; exit 3'
    r = cli(url, "run", "--kill-after", "1", "job", "-c", script)
    assert r.returncode == 3 and r.stdout.strip() == "started", (r.stdout, r.stderr)
    assert r.stderr == ""
    time.sleep(0.5)  # anything still on its way would show up by now
    assert wait_for(lambda: not marked(marker), timeout=10), f"left behind after run exited: {marked(marker)}"
    assert cli(url, "run", "-n", "job", "true").returncode == 0  # and the lock is free


@linux_only
def test_sigterm_to_run_is_forwarded_and_the_rest_of_the_tree_goes_too(url: str, marker: str) -> None:
    script = f'trap "exit 5" TERM; (trap "" TERM; exec sleep {marker}) & sleep {marker} & wait'
    proc = subprocess.Popen(distlock_cmd(url, "run", "--kill-after", "1", "job", "-c", script))
    assert wait_for(lambda: len(marked(marker, "sleep")) == 2), "the shell did not start its two sleeps"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 5  # the shell's own exit code, from its trap
    assert wait_for(lambda: not marked(marker), timeout=20), f"left behind: {marked(marker)}"

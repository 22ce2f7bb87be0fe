"""SQLite frees the holdings of a local process that provably ended (``kill -9``) at the next acquire, for every
kind of lock, with a higher fence; a waiter gets in at its next re-check, not at the TTL. A live holder, a holder
of another boot or pid namespace, and a row with no recorded process are never freed early. The judgement
itself (``distlock/_backends/sqlite/procs.py``) is unit-tested on an injected ``/proc``: a reused pid, a zombie, doubt."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import distlock
from distlock._backends.sqlite import procs

linux_proc = pytest.mark.skipif(procs.identity(procs.LinuxProc(), os.getpid()) is None, reason="needs Linux /proc")

#: holds one of each kind on the file, prints the largest fence, then sleeps until killed
HOLDER = """
import sys, time, distlock
s = distlock.connect(sys.argv[1])
held = [s.lock("mutex", ttl=60), s.rlock("re", ttl=60), s.rwlock("rw", ttl=60).read, s.rwlock("rw", ttl=60).read,
        s.semaphore("sem", 2, ttl=60), s.semaphore("sem", 2, ttl=60)]
for lock in held:
    assert lock.acquire(timeout=10)
assert held[1].acquire(timeout=10)  # reentered
election = s.election("boss", ttl=60)
assert election.campaign("dead-one", timeout=10)
print(max([lock.fence for lock in held] + [election.term]), flush=True)
time.sleep(600)
"""


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'locks.db'}"


@pytest.fixture
def holder(url: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A process holding a mutex, a reentrant lock (twice), two read holdings of an rwlock, both permits of a
    semaphore and an election's leadership, all with ttl=60; and its largest fence."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.strip().isdigit(), "the holder did not start"
        yield proc, int(line)
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def kill(proc: subprocess.Popen[str]) -> None:
    """``kill -9``, not reaped: the holder stays a zombie, which is gone all the same."""
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while procs.parse_stat(Path(f"/proc/{proc.pid}/stat").read_text()).state != "Z":  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.01)


@linux_proc
def test_the_next_acquirer_frees_every_kind_of_holding_of_a_killed_process_with_higher_fences(
    url: str, holder: tuple[subprocess.Popen[str], int]
) -> None:
    proc, dead_fence = holder
    with distlock.connect(url) as s:
        assert not s.lock("mutex", ttl=60).acquire(timeout=0.5)  # alive: held
        kill(proc)
        start = time.monotonic()
        took = [
            s.lock("mutex", ttl=60),
            s.rlock("re", ttl=60),
            s.rwlock("rw", ttl=60).write,
            s.semaphore("sem", 2, ttl=60),
            s.semaphore("sem", 2, ttl=60),
        ]
        for lock in took:
            assert lock.acquire(timeout=20), lock
        election = s.election("boss", ttl=60)
        assert election.campaign("heir", timeout=20)
        assert time.monotonic() - start < 15  # the dead holdings had 60 s to run
        assert all((lock.fence or 0) > dead_fence for lock in took)
        assert (election.term or 0) > dead_fence
        leader = s.leader("boss")
        assert leader is not None and leader.value == "heir"


@linux_proc
def test_a_waiter_gets_the_lock_of_a_killed_holder_at_its_next_check(
    url: str, holder: tuple[subprocess.Popen[str], int]
) -> None:
    proc, dead_fence = holder
    with distlock.connect(url) as s:
        got: list[tuple[float, int]] = []
        waiting = threading.Event()

        def waiter() -> None:
            lock = s.lock("mutex", ttl=60)
            waiting.set()
            if lock.acquire(timeout=30):
                got.append((time.monotonic(), lock.fence or 0))
                lock.release()

        t = threading.Thread(target=waiter)
        t.start()
        assert waiting.wait(5)
        time.sleep(0.5)  # it waits (the holder is alive)
        assert not got
        killed = time.monotonic()
        kill(proc)
        t.join(40)
        assert got and got[0][0] - killed < 15  # not the 60 s of the lease
        assert got[0][1] > dead_fence


@linux_proc
def test_of_acquirers_racing_for_a_killed_holders_lock_one_wins(
    url: str, holder: tuple[subprocess.Popen[str], int]
) -> None:
    proc, _ = holder
    stores = [distlock.connect(url) for _ in range(4)]
    try:
        kill(proc)
        won: list[bool] = []
        start = threading.Barrier(len(stores))

        def race(s: distlock.Store) -> None:
            lock = s.lock("mutex", ttl=60)
            start.wait()
            won.append(lock.acquire(timeout=2))

        threads = [threading.Thread(target=race, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(won) == [False, False, False, True]  # the reclaim and the grant are one transaction
    finally:
        for s in stores:
            s.close()


def test_a_live_holder_is_never_freed(url: str) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip().isdigit()
        os.kill(proc.pid, signal.SIGSTOP)  # alive, only stopped
        with distlock.connect(url) as s:
            assert not s.lock("mutex", ttl=60).acquire(timeout=1.5)
            assert not s.rwlock("rw", ttl=60).write.acquire(timeout=0.5)
            info = s.inspect("sem")
            assert info is not None and len(info.holders) == 2
    finally:
        stop(proc)


@linux_proc
@pytest.mark.parametrize("proc_of", ["another boot", "another pid namespace", "not recorded", "foreign layout"])
def test_a_dead_holder_that_cannot_be_judged_here_keeps_its_lease(
    url: str, tmp_path: Path, holder: tuple[subprocess.Popen[str], int], proc_of: str
) -> None:
    proc, _ = holder
    conn = sqlite3.connect(str(tmp_path / "locks.db"))
    with conn:
        (recorded,) = conn.execute("SELECT proc FROM distlock_holders WHERE name = 'mutex'").fetchone()
        who = procs.Identity.parse(recorded)
        assert who is not None and who.pid == proc.pid
        forged = {
            "another boot": str(procs.Identity("0" * 8 + who.boot[8:], who.ns, who.pid, who.start)),
            "another pid namespace": str(procs.Identity(who.boot, "1.2", who.pid, who.start)),
            "not recorded": None,
            "foreign layout": "linux9" + recorded[len(procs.LAYOUT) :],
        }[proc_of]
        conn.execute("UPDATE distlock_holders SET proc = ? WHERE name = 'mutex'", (forged,))
    conn.close()
    kill(proc)
    with distlock.connect(url) as s:
        assert not s.lock("mutex", ttl=60).acquire(timeout=1.5)  # the dead one's lease runs on
        assert s.lock("sem", ttl=60).acquire(timeout=10)  # its rows recorded as ours are freed


ONCE = """
import sys, distlock
with distlock.connect(sys.argv[1]) as s, s.once("nightly", at_most=60, at_least=30) as ran:
    assert ran
"""


@linux_proc
def test_an_at_most_once_job_left_to_its_at_least_is_not_freed_when_its_process_has_ended(url: str) -> None:
    subprocess.run([sys.executable, "-c", ONCE, url], check=True, timeout=60)  # ended: its process is gone
    with distlock.connect(url) as s:
        assert not s.lock("nightly", ttl=5).acquire(timeout=1.5)  # held until 30 s after its start
        with s.once("nightly", at_most=60) as ran:
            assert not ran


def test_a_file_made_before_holders_recorded_their_process_gets_the_column(tmp_path: Path) -> None:
    path = tmp_path / "locks.db"
    conn = sqlite3.connect(str(path))
    conn.executescript(
        """CREATE TABLE distlock_holders (token TEXT PRIMARY KEY, name TEXT NOT NULL, owner TEXT NOT NULL,
               mode TEXT NOT NULL, fence INTEGER NOT NULL, expires_at REAL NOT NULL, acquired_at REAL NOT NULL);
           INSERT INTO distlock_holders VALUES ('t', 'old', 'h:1:x', 'lock', 7, 1e12, 0);"""
    )
    conn.close()
    with distlock.connect(f"sqlite:///{path}") as s:
        assert not s.lock("old", ttl=5).acquire(timeout=0.3)  # no process recorded: never freed early
        with s.lock("new", ttl=5):
            pass
    conn = sqlite3.connect(str(path))
    assert "proc" in {row[1] for row in conn.execute("PRAGMA table_info(distlock_holders)")}
    conn.close()


# -- the judgement, on an injected /proc --------------------------------------------------------------------


def stat_line(pid: int, state: str, start: int, threads: int = 1, comm: str = "python") -> str:
    fields = [state, "1", str(pid)] + ["0"] * 14 + [str(threads), "0", str(start)] + ["0"] * 30
    return f"{pid} ({comm}) " + " ".join(fields) + "\n"


class FakeProc:
    def __init__(self, boot: str = "b00t", ns: str = "4.4026531836") -> None:
        self.boot, self.ns = boot, ns
        self.stats: dict[int, str | OSError] = {}

    def boot_id(self) -> str | None:
        return self.boot

    def pid_ns(self) -> str | None:
        return self.ns

    def stat(self, pid: int) -> str | None:
        found = self.stats.get(pid)
        if isinstance(found, OSError):
            raise found
        return found


def test_stat_fields_are_counted_from_the_last_parenthesis() -> None:
    assert procs.parse_stat(stat_line(9, "S", 1234, threads=3, comm="a) (b c")) == procs.Stat("S", 3, 1234)
    assert procs.parse_stat("9 (x) S 1 2") is None
    assert procs.parse_stat("garbage") is None


def test_a_holder_is_gone_only_on_proof() -> None:
    view = FakeProc()
    recorded = procs.identity(view, 42)
    assert recorded is None  # no /proc/42: nothing to record
    view.stats[42] = stat_line(42, "S", 1000)
    recorded = procs.identity(view, 42)
    assert recorded == f"{procs.LAYOUT}:b00t:4.4026531836:42:1000"
    assert not procs.gone(recorded, view)  # alive
    view.stats[42] = stat_line(42, "R", 5000)
    assert procs.gone(recorded, view)  # the pid was reused by a later process
    view.stats[42] = stat_line(42, "Z", 1000)
    assert procs.gone(recorded, view)  # exited, not reaped yet
    view.stats[42] = stat_line(42, "Z", 1000, threads=2)
    assert not procs.gone(recorded, view)  # its main thread ended, another runs on
    del view.stats[42]
    assert procs.gone(recorded, view)  # no such process
    view.stats[42] = PermissionError("denied")
    assert not procs.gone(recorded, view)  # cannot tell
    view.stats[42] = "42 (python) S"
    assert not procs.gone(recorded, view)  # cannot parse
    del view.stats[42]
    assert not procs.gone(recorded, FakeProc(boot="other"))  # another boot (or host)
    assert not procs.gone(recorded, FakeProc(ns="4.1"))  # another pid namespace (a container)
    assert not procs.gone(None, view)
    assert not procs.gone("h:42:thread-1", view)  # an owner id, not an identity


def test_this_process_never_judges_itself_gone() -> None:
    view = FakeProc()
    local = procs.Local(view)
    view.stats[os.getpid()] = stat_line(os.getpid(), "Z", 7)  # even if /proc said so
    own = local.own()
    assert own is not None and not local.gone(own)


def test_a_proc_of_another_pid_namespace_tells_nothing(tmp_path: Path) -> None:
    for pid in (os.getpid(), 1):
        (tmp_path / str(pid) / "ns").mkdir(parents=True)
        (tmp_path / str(pid) / "ns" / "pid").write_text("")
    (tmp_path / "self").symlink_to(str(os.getpid()))
    assert procs.LinuxProc(str(tmp_path)).pid_ns() is not None
    (tmp_path / "self").unlink()
    (tmp_path / "self").symlink_to("1")  # this process is not pid 1 in the namespace of that /proc
    view = procs.LinuxProc(str(tmp_path))
    assert view.pid_ns() is None and procs.identity(view, os.getpid()) is None


def test_a_process_that_proc_does_not_show_is_not_gone(tmp_path: Path) -> None:
    hidden = procs.LinuxProc(str(tmp_path))  # a /proc that shows nothing, as hidepid=2 shows other users'
    with pytest.raises(OSError):
        hidden.stat(os.getpid())  # it exists: the kernel says so
    recorded = str(procs.Identity("b", "n", os.getpid(), 1))
    view = FakeProc(boot="b", ns="n")
    view.stat = hidden.stat  # type: ignore[method-assign]
    assert not procs.gone(recorded, view)
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # reaped: its pid names no process (until reused)
    assert hidden.stat(ended.pid) is None
    assert procs.Identity.parse(f"{procs.LAYOUT}:b:n:0:1") is None  # pid 0 would be a process group to kill()

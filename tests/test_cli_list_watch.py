"""``distlock list --watch``: the live table in a real pseudo-terminal (another process's lock appears with its
fence and goes when released; ``q`` and Ctrl-C quit with exit 0 and give the terminal back as it was), JSON
lines on a pipe (a line per change, none for renewals), on SQLite (polled) and etcd (pushed by a prefix watch)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import distlock
from tests.test_run import distlock_cmd

ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]|[\x0e\x0f]")
WAIT = 30.0  # deadline for anything to show (a loaded CI machine); the usual is well under a second


@pytest.fixture(params=["sqlite", "etcd"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/locks.db"
    return str(request.getfixturevalue("etcd_url"))


@pytest.fixture
def prefix(name: str) -> str:
    return name + "/"


class Terminal:
    """``distlock list --watch`` with a pseudo-terminal as its controlling terminal, and what it drew."""

    def __init__(self, url: str, *args: str) -> None:
        self.master, self.slave = pty.openpty()
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 200, 0, 0))
        self.settings = termios.tcgetattr(self.slave)
        self.text = ""
        self.proc = subprocess.Popen(
            distlock_cmd(url, "list", "--watch", *args),
            stdin=self.slave,
            stdout=self.slave,
            stderr=self.slave,
            start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # so Ctrl-C is a SIGINT
            env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "40"},
        )

    def _read(self, timeout: float) -> None:
        if select.select([self.master], [], [], timeout)[0]:
            try:
                self.text += ANSI.sub("", os.read(self.master, 65536).decode("utf-8", "replace"))
            except OSError:  # EIO: the other side is closed
                time.sleep(timeout)

    def until(self, what: str, check: Callable[[str], bool]) -> None:
        deadline = time.monotonic() + WAIT
        while not check(self.text):
            assert time.monotonic() < deadline, f"no {what} within {WAIT}s; drew:\n{self.text[-3000:]}"
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n{self.text[-3000:]}"
            self._read(0.1)

    def since(self, mark: str) -> str:
        return self.text[self.text.rfind(mark) :] if mark in self.text else ""

    def quits(self, key: bytes) -> None:
        os.write(self.master, key)
        deadline = time.monotonic() + WAIT
        while self.proc.poll() is None:
            assert time.monotonic() < deadline, "did not quit"
            self._read(0.05)
        assert self.proc.returncode == 0, self.text[-3000:]
        assert termios.tcgetattr(self.slave) == self.settings  # echo and line mode are back

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


@pytest.fixture
def terminal() -> Iterator[Callable[..., Terminal]]:
    made: list[Terminal] = []

    def make(url: str, *args: str) -> Terminal:
        made.append(Terminal(url, *args))
        return made[-1]

    yield make
    for t in made:
        t.close()


def _row(text: str, lock: str) -> list[str]:
    """The cells of the table row of ``lock`` in ``text`` ([] if none)."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if lock in cells:
            return cells
    return []


def test_terminal_table_shows_another_process_lock_then_its_release_and_q_quits(
    url: str, prefix: str, terminal: Callable[..., Terminal]
) -> None:
    term = terminal(url, prefix)
    term.until("empty table", lambda t: "0 held" in t)
    lock = prefix + "job"
    with subprocess.Popen(distlock_cmd(url, "hold", "--ttl", "10", lock), stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout is not None
        shown, fence = holder.stdout.readline().split()
        assert shown == lock
        term.until("the holder's row", lambda t: _row(t.split("1 held")[-1], lock)[4:5] == [fence])
        cells = _row(term.since("1 held"), lock)
        assert cells[2] == "lock" and ":" in cells[3] and cells[5] == "lock", cells  # kind, owner, mode
        assert 0 < float(cells[6]) <= 10 and cells[7] == "0", cells  # seconds left, waiters
        holder.send_signal(signal.SIGTERM)  # `hold` releases on SIGTERM
        assert holder.wait(timeout=WAIT) == 0
    term.until("the release", lambda t: "0 held" in t.split("1 held")[-1])
    term.quits(b"q")


def test_ctrl_c_quits_with_exit_0_and_restores_the_terminal(tmp_path: Path, terminal: Callable[..., Terminal]) -> None:
    term = terminal(f"sqlite:///{tmp_path}/locks.db")
    term.until("empty table", lambda t: "0 held" in t)
    term.quits(b"\x03")


def _lines(proc: subprocess.Popen[str]) -> Iterator[list[dict[str, object]]]:
    assert proc.stdout is not None
    for line in proc.stdout:
        yield json.loads(line)


def _quiet_for(proc: subprocess.Popen[str], seconds: float) -> bool:
    assert proc.stdout is not None
    return not select.select([proc.stdout], [], [], seconds)[0]


def test_pipe_prints_json_lines_only_on_changes(url: str, prefix: str) -> None:
    with (
        subprocess.Popen(
            distlock_cmd(url, "list", "--watch", "--json", prefix), stdout=subprocess.PIPE, text=True
        ) as proc,
        distlock.connect(url) as store,
    ):
        try:
            lines = _lines(proc)
            assert next(lines) == []
            lock = store.lock(prefix + "a", ttl=1.0)  # renewed every 0.33 s: seconds left change, nothing else
            assert lock.acquire(timeout=10)
            first = next(lines)
            assert [(i["name"], [h["fence"] for h in i["holders"]]) for i in first] == [(prefix + "a", [lock.fence])]  # type: ignore[attr-defined]
            assert store.lock(prefix[:-1] + "-outside", ttl=5).acquire(timeout=10)
            assert _quiet_for(proc, 1.5)  # neither the renewals nor a lock outside the prefix are changes
            lock.release()
            assert next(lines) == []
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=WAIT)
    assert proc.returncode == 0


def test_plain_snapshot_on_a_pipe(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/locks.db"
    with (
        subprocess.Popen(distlock_cmd(url, "list", "--watch", "w/"), stdout=subprocess.PIPE, text=True) as proc,
        distlock.connect(url) as store,
        store.lock("w/x", ttl=30) as lock,
    ):
        assert proc.stdout is not None
        try:
            # the first snapshot may be from before the lock was taken: a header alone, then a blank line
            assert proc.stdout.readline().split() == ["NAME", "KIND", "OWNER", "FENCE", "MODE", "LEFT", "WAITERS", "CLIENT"]
            while (line := proc.stdout.readline()).startswith(("NAME", "\n")):
                pass
            cells = line.split()
            assert cells[0] == "w/x" and cells[3] == str(lock.fence), line
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=WAIT)
    assert proc.returncode == 0


def test_etcd_prefix_watch_is_pushed(etcd_url: str, prefix: str) -> None:
    """The etcd watch says nothing until a key under the prefix changes (a poll would say "read" every 0.5 s),
    and then says it at once."""
    with distlock.connect(etcd_url) as store:
        watch = store._backend.watch_prefix(prefix)  # type: ignore[attr-defined]
        try:
            outside = store.lock(prefix[:-1] + "-outside", ttl=5)
            assert outside.acquire(timeout=10)
            assert watch.wait(1.0) is False  # a lock outside the prefix is not an event
            timer = threading.Timer(0.3, lambda: store.lock(prefix + "in", ttl=5).acquire(timeout=10))
            timer.start()
            assert watch.wait(WAIT) is True
            timer.join()
            outside.release()
        finally:
            watch.close()


async def test_watch_list_from_python_sees_a_grant_and_a_release(tmp_path: Path) -> None:
    """``store.watch_list(prefix)``, the API under the command: a snapshot per change, a lock outside the
    prefix unseen."""
    store = await distlock.connect_async(f"sqlite:///{tmp_path}/locks.db")
    try:
        snaps = store.watch_list("jobs/")
        first = await anext(snaps)
        assert first.locks == ()
        other = store.lock("elsewhere", ttl=30)
        lock = store.lock("jobs/a", ttl=30)
        assert await other.acquire() and await lock.acquire()
        held = await asyncio.wait_for(anext(snaps), WAIT)
        assert [(i.name, i.holders[0].fence) for i in held.locks] == [("jobs/a", lock.fence)] and held.changed
        await lock.release()
        gone = await asyncio.wait_for(anext(snaps), WAIT)
        assert gone.locks == ()
        await snaps.aclose()  # type: ignore[attr-defined]
        await other.release()
    finally:
        await store.aclose()

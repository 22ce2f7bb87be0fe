"""What ``run``, ``hold`` and ``elect`` say while they wait (``-v``, ``-q``, a terminal or not), and the client
name of another process's holding in ``status``: real subprocesses (``python -m distlock``) on SQLite, and on
PostgreSQL for a URL with a password."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

WAIT = 60.0  # a generous bound on one command


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/locks.db"


def _env(client_name: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISTLOCK_URL", "DISTLOCK_CLIENT_NAME")}
    if client_name is not None:
        env["DISTLOCK_CLIENT_NAME"] = client_name
    return env


def cli(*args: str, client_name: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distlock", *args], capture_output=True, text=True, timeout=WAIT, env=_env(client_name)
    )


@contextlib.contextmanager
def held_by(url: str, *command: str, client_name: str = "web-1") -> Iterator[str]:
    """Another process holding (``hold NAME`` or ``elect NAME VALUE``) with ``client_name``; yields its fence."""
    argv = [sys.executable, "-m", "distlock", "--url", url, *command]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=_env(client_name)) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # "NAME FENCE" once it holds
            assert line.strip(), "the holder exited before holding"
            yield line.split()[1]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=WAIT)


def test_verbose_says_which_store_what_it_waits_for_and_who_holds_it_and_only_verbose_off_a_terminal(url: str) -> None:
    with held_by(url, "hold", "busy") as fence:
        r = cli("--url", url, "run", "-w", "1.5", "busy", "--", "true")  # off a terminal: nothing without -v
        assert r.returncode == 75 and r.stderr == "distlock: lock 'busy' not acquired within 1.5s\n", r.stderr
        r = cli("-v", "--url", url, "run", "-w", "1.5", "busy", "--", "true")
        assert r.returncode == 75, r.stderr
        lines = r.stderr.splitlines()
        assert lines[0] == f"distlock: store {url}", r.stderr
        waiting = [line for line in lines if line.startswith("distlock: waiting for 'busy' (")]
        assert waiting and f"of 1.5s): held by web-1 (fence {fence}), " in waiting[0], r.stderr
        assert "s left; owner " in waiting[0] and waiting[0].count(":") >= 3, r.stderr  # host:pid:thread
        assert lines[-1] == "distlock: lock 'busy' not acquired within 1.5s", r.stderr
        # after the command as well as before it; and hold says the same
        r = cli("hold", "--verbose", "--url", url, "-w", "1", "busy")
        assert r.returncode == 75 and "waiting for 'busy'" in r.stderr and "held by web-1" in r.stderr, r.stderr
        # another process's status shows the holder's client name (last column), and its JSON
        rows = cli("--url", url, "status", "busy").stdout.splitlines()
        assert rows[0].split()[-1] == "CLIENT" and rows[1].split()[-1] == "web-1", rows
        holder = json.loads(cli("--url", url, "status", "--json", "busy").stdout)["holders"][0]
        assert holder["client_name"] == "web-1" and "web-1" not in holder["owner"], holder
    r = cli("-v", "--url", url, "run", "busy", "--", "true")  # free: acquired at once, and said so
    assert r.returncode == 0 and "distlock: acquired 'busy' (fence " in r.stderr, r.stderr
    assert "waiting for" not in r.stderr, r.stderr


def _on_a_terminal(*args: str) -> str:
    """What the command writes to its stderr when that is a terminal (a pseudo-terminal here)."""
    parent, child = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "distlock", *args], stdout=subprocess.DEVNULL, stderr=child, env=_env()
        )
        os.close(child)
        out = b""
        with contextlib.suppress(OSError):  # EIO once the command exited and closed its end
            while chunk := os.read(parent, 4096):
                out += chunk
        proc.wait(timeout=WAIT)
    finally:
        os.close(parent)
    return out.decode()


def test_on_a_terminal_a_status_line_shows_after_a_second_and_quiet_silences_it(url: str) -> None:
    with held_by(url, "hold", "busy") as fence:
        out = _on_a_terminal("--url", url, "run", "-w", "3", "busy", "--", "true")
        shown = re.search(r"\r\x1b\[Kdistlock: waiting for 'busy' \((\d)s of 3s\): held by web-1 \(fence (\d+)\)", out)
        assert shown is not None and shown[1] != "0" and shown[2] == fence, repr(out)  # not before a second
        assert "store " not in out  # that is for --verbose
        # the status line is wiped before the error is printed
        assert out.endswith("\r\x1b[Kdistlock: lock 'busy' not acquired within 3s\r\n"), repr(out)
        out = _on_a_terminal("--url", url, "run", "-q", "-w", "2", "busy", "--", "true")
        assert out == "distlock: lock 'busy' not acquired within 2s\r\n", repr(out)


def test_elect_verbose_names_the_leader(url: str) -> None:
    with held_by(url, "elect", "jobs", "10.0.0.7:8080"):
        r = cli("--url", url, "elect", "-v", "-w", "1.5", "jobs", "10.0.0.8:8080")
        assert r.returncode == 75, r.stderr
        assert "distlock: waiting for leadership of 'jobs' (" in r.stderr, r.stderr
        assert "leader 10.0.0.7:8080 (web-1, term " in r.stderr, r.stderr


def test_verbose_masks_the_credentials_of_the_store_url(postgres_url: str) -> None:
    password = postgres_url.split("@")[0].rsplit(":", 1)[1]
    assert password
    name = f"feedback-{os.getpid()}"
    with held_by(postgres_url, "hold", name):
        r = cli("--verbose", "--url", postgres_url, "run", "-w", "1", name, "--", "true")
    assert r.returncode == 75 and "held by web-1" in r.stderr, r.stderr
    assert password not in r.stderr and ":***@" in r.stderr.splitlines()[0], r.stderr

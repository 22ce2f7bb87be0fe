"""A CLI that forgives a new user's stumbles: global options after the command, a bad URL that says where it
came from and what was probably meant, durations without float noise, ``hold`` pointing to ``run``, help text
without reST markup, and one table of locks for ``status``, ``list`` and ``list --watch``."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import distlock
from distlock._core.text import closest, did_you_mean, seconds
from distlock.cli import cli as group
from distlock.cli.table import COLUMNS

WAIT = 60.0


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/locks.db"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "DISTLOCK_URL"}
    return subprocess.run(
        [sys.executable, "-m", "distlock", *args],
        capture_output=True,
        text=True,
        timeout=WAIT,
        env={**environ, **(env or {})},
    )


def one_line_usage_error(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr, r.stderr
    return r.stderr


# -- the helpers ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (4.999998995999931, "5s"),
        (0.49999884799944994, "0.5s"),
        (0.25, "0.25s"),
        (12.3456, "12.3s"),
        (600.0, "600s"),
        (1234.5, "1234s"),
        (0.0, "0s"),
    ],
)
def test_seconds_are_rounded_for_people(value: float, shown: str) -> None:
    assert seconds(value) == shown


def test_did_you_mean_picks_the_closest_name_or_none() -> None:
    assert closest("reddis", ["redis", "rediss", "etcd"]) == "redis"
    assert did_you_mean("sslmod", ["sslmode", "cafile"]) == " (did you mean 'sslmode'?)"
    assert did_you_mean("zzz", ["redis", "etcd"]) == ""
    assert did_you_mean("redis", ["redis"]) == ""  # a known name is no typo


# -- 1. global options anywhere -----------------------------------------------------------------------------------


def _commands() -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for name, cmd in group.commands.items():
        out.append((name,))
        out.extend((name, sub) for sub in getattr(cmd, "commands", {}))
    return out


@pytest.mark.parametrize("path", _commands(), ids=" ".join)
def test_every_command_takes_the_global_options(path: tuple[str, ...]) -> None:
    cmd = group
    for part in path:
        cmd = cmd.commands[part]  # type: ignore[attr-defined]
    opts = {opt for param in cmd.params for opt in param.opts}
    assert {"--url", "--debug"} <= opts, path


@pytest.mark.parametrize("path", _commands(), ids=" ".join)
def test_version_after_any_command(path: tuple[str, ...]) -> None:
    r = CliRunner().invoke(group, [*path, "--version"], prog_name="distlock")
    assert r.exit_code == 0 and r.output.startswith("distlock, version "), (path, r.output)


def test_global_options_after_the_command(url: str) -> None:
    r = run_cli("run", "--url", url, "job", "--", sys.executable, "-c", "import os; print(os.environ['DISTLOCK_FENCE'])")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) >= 1
    with distlock.connect(url) as store, store.lock("held", ttl=30):
        r = run_cli("status", "held", "--url", url, "--json")
        assert r.returncode == 0 and '"held": true' in r.stdout, r.stderr
        r = run_cli("list", "--url", url, "--debug", "--json")
        assert r.returncode == 0 and '"held"' in r.stdout, r.stderr
    r = run_cli("init", "--url", url)
    assert r.returncode == 0 and "sqlite" in r.stdout, r.stderr
    # ... and still before it, where $DISTLOCK_URL is overridden by either
    r = run_cli("--url", url, "status", "held", env={"DISTLOCK_URL": "bogus://x"})
    assert r.returncode == 0 and "free" in r.stdout, r.stderr
    r = run_cli("status", "--url", url, "held", env={"DISTLOCK_URL": "bogus://x"})
    assert r.returncode == 0 and "free" in r.stdout, r.stderr


def test_run_keeps_what_follows_name_as_the_command(url: str) -> None:
    # after NAME everything is CMD, verbatim (flock(1)): a --url there is the command's, not distlock's
    r = run_cli("--url", url, "run", "job", sys.executable, "-c", "import sys; print(sys.argv[1:])", "--url", "x")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['--url', 'x']"


# -- 2. a bad URL says where it came from and what was meant --------------------------------------------------------


def test_bad_scheme_names_its_source_and_the_closest_scheme(url: str) -> None:
    err = one_line_usage_error(run_cli("status", "x", env={"DISTLOCK_URL": "reddis://u:s3cret@h/x"}))
    assert "$DISTLOCK_URL" in err and "did you mean 'redis'?" in err and "s3cret" not in err
    err = one_line_usage_error(run_cli("status", "--url", "reddis://h", "x"))
    assert "--url" in err and "$DISTLOCK_URL" not in err and "did you mean 'redis'?" in err


@pytest.mark.parametrize(
    ("bad", "meant"),
    [
        ("redis://u:s3cret@127.0.0.1:1/?socket_timout=1", "socket_timeout"),
        ("redis+sentinel://u:s3cret@127.0.0.1:1/svc?sentinel_pasword=x", "sentinel_password"),
        ("postgresql://u:s3cret@127.0.0.1:1/db?sslmod=require", "sslmode"),
        ("mysql://u:s3cret@127.0.0.1:1/db?conect_timeout=1", "connect_timeout"),
        ("etcd://u:s3cret@127.0.0.1:1?tmeout=1", "timeout"),
        ("zookeeper://127.0.0.1:1?session_timout=1", "session_timeout"),
        ("sqlite:///{tmp}/l.db?busy_timout=1", "busy_timeout"),
    ],
)
def test_unknown_url_option_suggests_the_backends_own_name(tmp_path: Path, bad: str, meant: str) -> None:
    bad = bad.format(tmp=tmp_path)
    with pytest.raises(distlock.ConfigError, match="unknown URL option") as info:
        distlock.connect(bad)
    assert f"did you mean {meant!r}?" in str(info.value) and "s3cret" not in str(info.value)
    err = one_line_usage_error(run_cli("status", "x", env={"DISTLOCK_URL": bad}))
    assert "$DISTLOCK_URL" in err and f"did you mean {meant!r}?" in err and "s3cret" not in err


def test_unknown_keyword_option_is_called_one_and_gets_a_hint() -> None:
    with pytest.raises(distlock.ConfigError, match="unknown keyword option") as info:
        distlock.connect("postgresql://u:s3cret@127.0.0.1:1/db", conect_timeout=1)
    assert "did you mean 'connect_timeout'?" in str(info.value) and "s3cret" not in str(info.value)


# -- 3. durations without float noise ----------------------------------------------------------------------------


def test_timeouts_in_messages_are_rounded() -> None:
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = run_cli("--url", f"etcd://127.0.0.1:{port}?timeout=0.5&connect_timeout=0.2", "status", "x")
    assert r.returncode == 69, r.stderr
    assert "within 0.5s" in r.stderr and not re.search(r"\d\.\d{4,}", r.stderr), r.stderr


# -- 4. hold takes no command -------------------------------------------------------------------------------------


def test_hold_with_a_command_points_to_run(url: str) -> None:
    err = one_line_usage_error(run_cli("--url", url, "hold", "job", "echo", "hi there"))
    assert "hold takes no command" in err and "distlock run job -- echo 'hi there'" in err
    with distlock.connect(url) as store:
        assert store.inspect("job") is None  # nothing was taken


# -- 5. help without reST -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [(), *_commands()], ids=lambda p: " ".join(p) or "distlock")
def test_help_has_no_rest_markup(path: tuple[str, ...]) -> None:
    r = CliRunner().invoke(group, [*path, "--help"], prog_name="distlock")
    assert r.exit_code == 0, r.output
    assert "``" not in r.output and not re.search(r":[a-z]+:`", r.output), r.output


# -- 6. one table of locks ----------------------------------------------------------------------------------------


def _table(text: str) -> list[list[str]]:
    lines = [line.split() for line in text.splitlines() if line.strip()]
    assert lines[0] == list(COLUMNS), text
    return [row[:5] + row[6:] for row in lines[1:]]  # all but LEFT, which counts down


def test_list_status_and_watch_print_the_same_table(url: str) -> None:
    with distlock.connect(url) as store, store.lock("w/x", ttl=30) as lock:
        listed = _table(run_cli("--url", url, "list", "w/").stdout)
        status = _table(run_cli("--url", url, "status", "w/x").stdout)
        assert listed == status and listed[0][0] == "w/x" and listed[0][3] == str(lock.fence)
        cmd = [sys.executable, "-m", "distlock", "--url", url, "list", "--watch", "w/"]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            assert proc.stdout is not None
            try:
                snapshot = ""
                while (line := proc.stdout.readline()) != "\n":
                    snapshot += line
                assert _table(snapshot) == listed
            finally:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=WAIT)

"""The default store is the host's: ``$DISTLOCK_HOME/locks.db`` (``/var/tmp/distlock`` unless set), made writable
by every user whatever the umask (directory, database, its ``-wal``/``-shm`` and wake-up sockets), so the
processes of different users exclude each other; where it cannot be made or written, the user's own file, with
a note (a warning logged once; the CLI prints it). ``distlock status`` names the store it looked at."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import distlock
from distlock import _url


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No DISTLOCK_URL; the host store's directory in ``tmp_path / "host"``, the state dir beside it."""
    monkeypatch.delenv("DISTLOCK_URL", raising=False)
    monkeypatch.setenv("DISTLOCK_HOME", str(tmp_path / "host"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(_url, "_noted", set())
    return tmp_path


@pytest.fixture
def tight_umask() -> Iterator[None]:
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def short_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A host store directory with a path short enough for wake-up sockets (``tmp_path``'s is too long)."""
    top = Path(tempfile.mkdtemp(prefix="dl-"))
    try:
        os.chmod(top, 0o755)  # another user reaches the directory in it
        monkeypatch.setenv("DISTLOCK_HOME", str(top / "host"))
        yield top / "host"
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_the_host_store_is_made_writable_by_every_user_whatever_the_umask(
    env: Path, short_home: Path, tight_umask: None
) -> None:
    url, note = _url.default_store()
    home = short_home
    assert (url, note) == (f"sqlite:///{home}/locks.db", None)
    assert mode(home) == 0o777 and mode(home / "locks.db") == 0o666
    with distlock.connect() as a, distlock.connect() as b:
        assert repr(a) == f"<Store {url}>"
        lock = a.lock("x", ttl=10)
        assert lock.acquire(timeout=5)
        # a waiter binds its wake-up socket: every user's too, or another user's release could not reach it
        waiter = threading.Thread(target=b.lock("x", ttl=10).acquire, kwargs={"timeout": 30})
        waiter.start()
        wake = home / "locks.db.wake"
        while not wake.is_dir() or not any(wake.iterdir()):
            time.sleep(0.01)
        assert mode(wake) == 0o777 and all(mode(s) & 0o666 == 0o666 for s in wake.iterdir())
        for suffix in ("-wal", "-shm"):  # SQLite gives them the database file's mode
            assert mode(home / f"locks.db{suffix}") == 0o666
        lock.release()
        waiter.join(30)
    assert not list(home.glob("*.tmp"))  # nothing left of making them


def test_a_directory_made_by_an_admin_keeps_its_mode(env: Path) -> None:
    home = env / "host"
    home.mkdir(mode=0o750)
    os.chmod(home, 0o750)  # a group's, say
    assert _url.default_store() == (f"sqlite:///{home}/locks.db", None)
    assert mode(home) == 0o750


def test_an_unusable_host_store_falls_back_to_the_users_with_a_note_logged_once(
    env: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = env / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("DISTLOCK_HOME", str(blocker / "host"))  # under a regular file: cannot be made, even by root
    with caplog.at_level(logging.WARNING, logger="distlock"):
        for _ in range(3):
            url, note = _url.default_store()
            assert url == f"sqlite:///{env}/state/distlock/locks.db"
            assert note is not None and f"{blocker} is not a directory" in note and "DISTLOCK_HOME" in note
    assert [r.getMessage() for r in caplog.records] == [note]
    with distlock.connect() as s, s.lock("x", ttl=5) as lock:
        assert lock.fence
    assert (env / "state" / "distlock" / "locks.db").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a mode 0555 directory all the same")
def test_a_read_only_host_directory_falls_back(env: Path) -> None:
    home = env / "host"
    home.mkdir()
    os.chmod(home, 0o555)
    try:
        url, note = _url.default_store()
    finally:
        os.chmod(home, 0o755)
    assert url.endswith("/state/distlock/locks.db") and note is not None and "Permission denied" in note


def cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "distlock", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
    )


def test_status_names_the_store_and_the_cli_says_when_it_is_not_the_hosts(env: Path) -> None:
    base = {k: v for k, v in os.environ.items() if k != "DISTLOCK_URL"}
    r = cli("status", "x", env={**base, "DISTLOCK_HOME": str(env / "host")}, cwd=env)
    assert r.returncode == 0 and r.stdout == "x: free\n"
    assert r.stderr == f"store: sqlite:///{env}/host/locks.db\n"
    blocker = env / "a-file"
    blocker.write_text("")
    fallback = {**base, "DISTLOCK_HOME": str(blocker / "host"), "XDG_STATE_HOME": str(env / "state")}
    r = cli("status", "x", env=fallback, cwd=env)
    lines = r.stderr.splitlines()
    assert r.returncode == 0 and len(lines) == 2, r.stderr
    assert lines[0].startswith("distlock: note: the host-wide store") and "is not a directory" in lines[0]
    assert lines[1] == f"store: sqlite:///{env}/state/distlock/locks.db"
    r = cli("--url", "redis://user:s3cret@127.0.0.1:1/0", "status", "x", env=base, cwd=env)  # never reached: no line
    assert "s3cret" not in r.stderr
    rel = cli("--url", "sqlite:///rel.db", "status", "x", env=base, cwd=env)
    assert rel.stderr == f"store: sqlite:///rel.db ({env}/rel.db)\n"


#: started as root (the interpreter lives in root's home), it drops to nobody before it opens the default store
HOLD_AS_NOBODY = """
import os, sys
import distlock, distlock._backends.sqlite._sync
os.setgroups([]); os.setgid(65534); os.setuid(65534)
with distlock.connect() as s:
    print(s.lock("shared", ttl=30).acquire(timeout=float(sys.argv[1])), flush=True)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="another user's process needs root to start")
def test_root_and_another_user_exclude_each_other_on_the_default_store(env: Path, short_home: Path) -> None:
    child_env = {k: v for k, v in os.environ.items() if k != "DISTLOCK_URL"}
    child_env.update(DISTLOCK_HOME=str(short_home), XDG_STATE_HOME=str(env / "nobody-state"))
    with distlock.connect() as s:
        with s.lock("shared", ttl=30):
            r = subprocess.run([sys.executable, "-c", HOLD_AS_NOBODY, "0.5"], capture_output=True, text=True,
                               env=child_env, timeout=60)  # fmt: skip
            assert r.stdout == "False\n", r.stderr  # excluded: not on a store of its own
            waiter = subprocess.Popen([sys.executable, "-c", HOLD_AS_NOBODY, "30"], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=child_env)  # fmt: skip
            while not (short_home / "locks.db.wake").is_dir() or not any((short_home / "locks.db.wake").iterdir()):
                assert waiter.poll() is None, waiter.communicate()
                time.sleep(0.01)  # until it waits (its wake-up socket is bound)
        out, err = waiter.communicate(timeout=60)  # woken by root's release
        assert out == "True\n", err
        assert not (env / "nobody-state").exists()
        with s.lock("shared", ttl=30) as lock:  # root opens what the other user made (its -wal, -shm)
            assert lock.fence


def test_a_store_made_by_another_process_at_the_same_moment_is_used_as_it_is(env: Path, tight_umask: None) -> None:
    results: list[tuple[str, str | None]] = []
    threads = [threading.Thread(target=lambda: results.append(_url.default_store())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and results[0][1] is None
    assert mode(env / "host") == 0o777 and mode(env / "host" / "locks.db") == 0o666


# -- a directory every user writes is one every user can tamper with ------------------------------------------


@pytest.fixture
def default_home(env: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The host store's directory as the built-in default (no $DISTLOCK_HOME), moved into ``env``."""
    monkeypatch.delenv("DISTLOCK_HOME")
    monkeypatch.setattr(_url, "HOST_HOME", str(env / "host"))
    return env / "host"


def test_a_default_directory_that_is_a_link_is_not_followed(default_home: Path, env: Path) -> None:
    elsewhere = env / "elsewhere"
    elsewhere.mkdir()
    default_home.symlink_to(elsewhere)  # what another user could put in the place of the directory
    url, note = _url.default_store()
    assert url.endswith("/state/distlock/locks.db") and note is not None and "symbolic link" in note
    assert not list(elsewhere.iterdir())  # nothing made there


def test_a_store_file_that_is_a_link_is_not_followed(default_home: Path, env: Path) -> None:
    default_home.mkdir()
    target = env / "target"
    target.write_bytes(b"")
    (default_home / "locks.db").symlink_to(target)
    _, note = _url.default_store()
    assert note is not None and "locks.db is a symbolic link" in note
    os.chmod(target, 0o666)  # and a world-writable database is used only if no link led to it
    with pytest.raises(distlock.BackendError):
        distlock.connect(f"sqlite:///{default_home / 'locks.db'}")
    assert target.read_bytes() == b""


@pytest.mark.skipif(os.geteuid() != 0, reason="only root takes the directory over")
def test_root_makes_a_directory_another_user_made_its_own(default_home: Path) -> None:
    default_home.mkdir()
    os.chmod(default_home, 0o777)
    os.chown(default_home, 65534, 65534)  # made by another user: who could rename it and put a link there
    assert _url.default_store()[1] is None
    assert default_home.stat().st_uid == 0 and mode(default_home) == 0o777


def test_a_sockets_mode_is_never_set_through_a_link(tmp_path: Path) -> None:
    from distlock._backends.sqlite import hostdir

    target = tmp_path / "target"
    target.write_text("")
    os.chmod(target, 0o600)
    (tmp_path / "sock").symlink_to(target)
    hostdir.share_socket(tmp_path / "sock")
    assert mode(target) == 0o600

"""The log events of a lock's life (``distlock._events``): DEBUG steps and a WARNING on loss, each with its
structured fields, and never a credential; on a real PostgreSQL whose URL carries a password."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import distlock


def test_each_step_is_logged_with_its_fields_and_no_credential(
    postgres_url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    password = urlsplit(postgres_url).password
    assert password  # the test server's URL has one
    caplog.set_level(logging.DEBUG, logger="distlock")
    with distlock.connect(postgres_url) as store, distlock.connect(postgres_url) as other:
        holder = store.lock(name, ttl=0.9)
        assert holder.acquire(timeout=5)
        waiter = other.lock(name, ttl=5)
        got = threading.Event()
        t = threading.Thread(target=lambda: waiter.acquire(timeout=10) and got.set())
        t.start()
        time.sleep(0.7)  # the waiter waits; the holder's lease is renewed (every ttl/3)
        fence = holder.fence
        holder.release()
        t.join(10)
        assert got.is_set()
        assert other.break_lock(name)  # the waiter, now holder, is told it lost the lock
        assert waiter.lost.wait(10)
    records = [r for r in caplog.records if getattr(r, "event", None)]
    by_event = {r.event: r for r in records}  # type: ignore[attr-defined]
    assert {"grant", "wait", "renew", "release", "lost"} <= set(by_event), sorted(by_event)
    grant = by_event["grant"]
    assert grant.levelno == logging.DEBUG and grant.lock == name and grant.backend == "postgresql"  # type: ignore[attr-defined]
    assert isinstance(grant.fence, int) and grant.wait_ms >= 0  # type: ignore[attr-defined]
    assert by_event["renew"].count >= 1 and by_event["renew"].backend == "postgresql"  # type: ignore[attr-defined]
    releases = [(r.lock, r.fence) for r in records if r.event == "release"]  # type: ignore[attr-defined]
    assert (name, fence) in releases, releases
    lost = by_event["lost"]
    assert lost.levelno == logging.WARNING and lost.lock == name and lost.reason  # type: ignore[attr-defined]
    for r in caplog.records:
        text = r.getMessage() + " " + " ".join(str(v) for v in vars(r).values())
        assert password not in text, r.getMessage()


def test_nothing_is_formatted_when_debug_is_off(name: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="distlock")
    with distlock.connect("memory://") as store:
        with store.lock(name):
            pass
    assert [r for r in caplog.records if getattr(r, "event", None)] == []


def test_the_cli_shows_them_with_debug(tmp_path: Path, name: str) -> None:
    url = f"sqlite:///{tmp_path / 'locks.db'}"
    r = subprocess.run(
        [sys.executable, "-m", "distlock", "--debug", "--url", url, "run", name, "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert f"acquired {name!r}, fence 1" in r.stderr and f"released {name!r}, fence 1" in r.stderr, r.stderr
    quiet = subprocess.run(
        [sys.executable, "-m", "distlock", "--url", url, "run", name, "--", "true"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert quiet.returncode == 0 and "acquired" not in quiet.stderr

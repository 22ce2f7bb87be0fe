"""Leader election on the SQL backends beyond the conformance tests: the session modes refuse it, MySQL's
owner column bounds the value, PostgreSQL observers are pushed (NOTIFY) rather than polling, and a leader
killed with SIGKILL hands over within its lease. Real MariaDB and PostgreSQL servers."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import distlock
from distlock import ConfigError, UnsupportedFeature
from distlock._async.backend import AsyncWatch
from distlock._backends.postgres._sync import lease_mode as pg_lease
from distlock._sync.backend import SyncWatch


@pytest.mark.parametrize("which", ["mysql", "postgres"])
def test_session_mode_refuses_elections_and_points_to_lease_mode(
    which: str, request: pytest.FixtureRequest, name: str
) -> None:
    url = str(request.getfixturevalue(f"{which}_url"))
    with distlock.connect(url + ("&" if "?" in url else "?") + "mode=session") as store:
        with pytest.raises(UnsupportedFeature, match="mode=lease"):
            store.election(name)
        with pytest.raises(UnsupportedFeature, match="mode=lease"):
            store.leader(name)


def test_mysql_refuses_a_value_that_does_not_fit_and_leaves_nothing(mysql_url: str, name: str) -> None:
    with distlock.connect(mysql_url) as store:
        el = store.election(name, ttl=10)
        with pytest.raises(ConfigError, match="255"):
            el.campaign("x" * 300, timeout=1)
        assert store.inspect(name) is None
        assert el.campaign("fits", timeout=5)
        with pytest.raises(ConfigError, match="255"):
            el.proclaim("y" * 300)
        info = store.leader(name)
        assert info is not None and info.value == "fits"
        el.resign()


def test_postgres_observers_are_pushed_a_change_made_by_another_store(
    postgres_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no polling to fall back on: only the NOTIFY of the other store's grant and proclaim can wake the observer
    monkeypatch.setattr(SyncWatch, "POLL", 60.0)
    monkeypatch.setattr(AsyncWatch, "POLL", 60.0)
    monkeypatch.setattr(pg_lease, "LEASE_WAIT_SLICE", 60.0)
    with distlock.connect(postgres_url) as watcher, distlock.connect(postgres_url) as other:
        changes = watcher.observe(name, timeout=20)
        assert next(changes) is None
        el = other.election(name, ttl=10)
        started = time.monotonic()
        assert el.campaign("first", timeout=5)
        info = next(changes)
        assert info is not None and info.value == "first"
        el.proclaim("second")
        info = next(changes)
        assert info is not None and info.value == "second"
        el.resign()
        assert next(changes) is None
        assert time.monotonic() - started < 15  # not one 60 s poll
        changes.close()


CHILD = """
import sys, time, distlock
store = distlock.connect(sys.argv[1])
el = store.election(sys.argv[2], ttl=2)
assert el.campaign("doomed", timeout=10)
print(el.term, flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("which", ["mysql", "postgres"])
def test_a_leader_killed_with_sigkill_is_replaced_within_its_lease(
    which: str, request: pytest.FixtureRequest, name: str
) -> None:
    url = str(request.getfixturevalue(f"{which}_url"))
    with subprocess.Popen([sys.executable, "-c", CHILD, url, name], stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        term = int(child.stdout.readline())
        child.kill()
        child.wait()
        killed = time.monotonic()
        with distlock.connect(url) as store:
            info = store.leader(name)
            assert info is not None and info.value == "doomed"
            el = store.election(name, ttl=10)
            assert el.campaign("next", timeout=10)
            assert time.monotonic() - killed < 2 + 1.5  # the lease, plus a wake-up's re-check
            assert el.term is not None and el.term > term
            el.resign()

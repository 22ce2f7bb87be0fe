"""The API paper cuts a first real user hit, one test each. Those marked xfail(strict) need a
change in a file owned elsewhere (named in the reason); they turn into failures (XPASS) once it lands: drop the mark.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import distlock
from distlock._url import parse_url


@pytest.fixture
def store(tmp_path: Path) -> Iterator[distlock.Store]:
    s = distlock.connect(f"sqlite:///{tmp_path}/locks.db")
    yield s
    s.close()


def test_acquire_after_loss_on_the_same_object(store: distlock.Store, tmp_path: Path) -> None:
    lock = store.lock("pc/lost", ttl=5)
    assert lock.acquire()
    with distlock.connect(f"sqlite:///{tmp_path}/locks.db") as other:
        assert other.break_lock("pc/lost")
    assert not lock.owned() and lock.lost.is_set()
    assert lock.acquire(timeout=5)  # not "already held by this owner"
    lock.release()


def test_multilock_of_no_names_is_a_config_error(store: distlock.Store) -> None:
    with pytest.raises(distlock.ConfigError):
        store.multilock([])


def test_nonblocking_acquire_with_a_timeout_is_refused(store: distlock.Store) -> None:
    with pytest.raises(distlock.ConfigError):
        store.lock("pc/nb").acquire(blocking=False, timeout=1)


def test_a_one_millisecond_ttl_is_refused(store: distlock.Store) -> None:
    with pytest.raises(distlock.ConfigError):
        store.lock("pc/ttl", ttl=0.001)


def test_malformed_ipv6_url_is_a_config_error_and_one_cli_line() -> None:
    with pytest.raises(distlock.ConfigError):
        distlock.connect("redis://u:pw@[::1")
    r = subprocess.run(
        [sys.executable, "-m", "distlock", "--url", "redis://u:pw@[::1", "status", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "pw" not in r.stderr, r.stderr


def test_inspect_counts_a_blocked_non_fair_waiter(store: distlock.Store, tmp_path: Path) -> None:
    with distlock.connect(f"sqlite:///{tmp_path}/locks.db") as other:
        holder = other.lock("pc/w", ttl=30)
        holder.acquire()
        t = threading.Thread(target=lambda: store.lock("pc/w", ttl=30).acquire(timeout=5))
        t.start()
        time.sleep(0.5)
        info = other.inspect("pc/w")
        holder.release()
        t.join()
    assert info is not None and info.waiters != 0


def test_postgres_unix_socket_url_is_accepted() -> None:
    parse_url("postgresql:///db?host=/var/run/postgresql")


def test_mysql_unix_socket_url_is_accepted() -> None:
    parse_url("mysql:///db?unix_socket=/run/mysqld/mysqld.sock")


def test_postgres_connection_error_is_one_line() -> None:
    with pytest.raises(distlock.BackendError) as err:
        distlock.connect("postgresql://user:secret@127.0.0.1:1/db")
    assert "\n" not in str(err.value) and "secret" not in str(err.value)


def test_connect_accepts_an_existing_redis_client_and_leaves_it_open(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        with distlock.connect(client=client) as s, s.lock("pc/client", ttl=5) as lock:
            assert lock.fence is not None
        assert client.ping()  # the store did not close a client it did not create
    finally:
        client.close()

"""`etcdctl lock NAME` (etcd's Go concurrency.Mutex) and distlock exclude each other on one name."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import distlock
from distlock._backends.etcd._sync import guard
from tools.servers.etcd import endpoints, etcdctl_binary

ETCDCTL = etcdctl_binary()
pytestmark = pytest.mark.skipif(ETCDCTL is None, reason="etcdctl (Debian etcd-client) is not installed")

#: a read-modify-write of the counter file that loses updates unless the lock excludes everyone else
INCREMENT = 'v=$(cat "$1"); sleep 0.01; echo $((v + 1)) > "$1"'


def etcdctl(url: str, *args: str, **popen: object) -> subprocess.Popen[str]:
    assert ETCDCTL is not None
    env = {**os.environ, "ETCDCTL_API": "3"}
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [ETCDCTL, "--endpoints", endpoints(url), "lock", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **popen,
    )


def test_etcdctl_holder_excludes_distlock(etcd_url: str, name: str) -> None:
    proc = etcdctl(etcd_url, name)
    try:
        assert proc.stdout is not None
        key = proc.stdout.readline().strip()  # etcdctl prints its lock key once it holds the lock
        assert key.startswith(name + "/"), key
        with distlock.connect(etcd_url) as store:
            lock = store.lock(name, ttl=10)
            assert not lock.acquire(blocking=False)
            assert not lock.acquire(timeout=0.5)
            info = store.inspect(name)
            assert info is not None and len(info.holders) == 1
            their_rev = info.holders[0].fence
            assert their_rev is not None
            got: list[float] = []

            fences: list[int] = []

            def wait() -> None:
                assert lock.acquire(timeout=30)
                got.append(time.monotonic())
                fences.append(guard(lock).create_revision)
                lock.release()

            t = threading.Thread(target=wait)
            t.start()
            time.sleep(0.5)
            assert not got, "acquired while etcdctl held the lock"
            proc.send_signal(signal.SIGINT)  # etcdctl unlocks and closes its session on SIGINT
            stopped = time.monotonic()
            t.join(30)
            assert got and got[0] - stopped < 10  # woken by the delete, not by a lease running out
            assert fences[0] > their_rev
    finally:
        proc.kill()
        proc.communicate()


def test_distlock_holder_excludes_etcdctl(etcd_url: str, name: str) -> None:
    with distlock.connect(etcd_url) as store:
        lock = store.lock(name, ttl=10)
        assert lock.acquire()
        our_rev = lock.fence
        proc = etcdctl(etcd_url, name, "--", "sh", "-c", 'echo "GOT $ETCD_LOCK_REV"')
        try:
            time.sleep(1.0)
            assert proc.poll() is None, "etcdctl ran its command while distlock held the lock"
            lock.release()
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        (line,) = [ln for ln in out.splitlines() if ln.startswith("GOT")]
        assert our_rev is not None and int(line.split()[1]) > our_rev


def test_mixed_contention_keeps_a_shared_counter_exact(etcd_url: str, name: str, tmp_path: Path) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0\n")
    per_worker = 6
    errors: list[BaseException] = []

    def cli_worker() -> None:
        try:
            for _ in range(per_worker):
                proc = etcdctl(etcd_url, name, "--", "sh", "-c", INCREMENT, "increment", str(counter))
                _, err = proc.communicate(timeout=60)
                assert proc.returncode == 0, err
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def lib_worker() -> None:
        try:
            with distlock.connect(etcd_url) as store:
                for _ in range(per_worker):
                    with store.lock(name, ttl=10, timeout=60):
                        value = int(counter.read_text())
                        time.sleep(0.01)
                        counter.write_text(f"{value + 1}\n")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=f) for f in (cli_worker, lib_worker, cli_worker, lib_worker)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors, errors
    assert int(counter.read_text()) == 4 * per_worker  # no lost update: nobody ever overlapped


def test_go_sees_one_key_per_contender_and_distlock_writes_nothing_else(etcd_url: str, name: str) -> None:
    """What a Go contender reads of the queue ``NAME/`` is what it always was: one key per contender, on the
    contender's lease, ordered by create revision. distlock's owner record is the value of its own key (Go
    writes and reads no values) and nothing of it lies outside ``NAME/``."""
    from distlock._backends.etcd import keys
    from tools.servers.etcd import client_ports, post

    port = client_ports(etcd_url)[0]

    def everything() -> list[dict[str, str]]:
        data = post(port, "/v3/kv/range", {"key": keys.b64(b"\x00"), "range_end": keys.b64(b"\x00")})
        return [kv for kv in data.get("kvs") or [] if name.encode() in keys.unb64(kv["key"])]  # type: ignore[attr-defined]

    with distlock.connect(etcd_url) as store:
        lock = store.lock(name, ttl=10)
        assert lock.acquire()
        proc = etcdctl(etcd_url, name)
        try:
            deadline = time.monotonic() + 10
            while len(everything()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            mine, theirs = sorted(everything(), key=lambda kv: int(kv["create_revision"]))
            assert keys.unb64(mine["key"]) == f"{name}/{int(mine['lease']):x}".encode()
            assert int(mine["create_revision"]) == lock.fence
            assert keys.parse_owner(keys.unb64(mine["value"]))[0] is not None
            assert keys.unb64(theirs["key"]).startswith(name.encode() + b"/") and not theirs.get("value")
            lock.release()
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == keys.unb64(theirs["key"]).decode()
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
    assert everything() == []

"""distlock's elections on etcd and `etcdctl elect` (etcd's Go concurrency.Election) are one election.

``etcdctl elect NAME PROPOSAL`` campaigns and, once leader, prints its key and value (two lines), then leads
until SIGINT or SIGTERM, on which it resigns (deletes its key; its session's lease is left to run out).
``etcdctl elect -l NAME`` observes: two lines (key, value) for the leader it finds and for every change of
leader or value after that, nothing while there is no leader.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

import distlock
from tools.servers.etcd import EtcdCluster, endpoints, etcd_cluster, etcdctl_binary

ETCDCTL = etcdctl_binary()
pytestmark = pytest.mark.skipif(ETCDCTL is None, reason="etcdctl (Debian etcd-client) is not installed")
ROOT_PW = "r00t-Secret-5"
ALICE_PW = "al1ce-Secret-8"


class Etcdctl:
    """An ``etcdctl`` process whose output lines are collected by a thread (read with a timeout)."""

    def __init__(self, url: str, *args: str) -> None:
        assert ETCDCTL is not None
        self.proc = subprocess.Popen(
            [ETCDCTL, "--endpoints", endpoints(url), *args],
            env={**os.environ, "ETCDCTL_API": "3"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))

    def lines(self, n: int, timeout: float = 10.0) -> list[str]:
        end = time.monotonic() + timeout
        return [self._lines.get(timeout=max(0.01, end - time.monotonic())) for _ in range(n)]

    def quiet(self) -> bool:
        return self._lines.empty()

    def stop(self, sig: int = signal.SIGINT) -> None:
        """Signal it and wait for its exit (etcdctl elect resigns on SIGINT and SIGTERM)."""
        self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=10)
        assert self.proc.returncode == 0, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def cli(etcd_url: str) -> Iterator[list[Etcdctl]]:
    """Starts etcdctl processes (``spawn(*args)``) and kills what is left of them at the end."""
    procs: list[Etcdctl] = []
    yield procs
    for p in procs:
        p.kill()


def spawn(procs: list[Etcdctl], url: str, *args: str) -> Etcdctl:
    p = Etcdctl(url, *args)
    procs.append(p)
    return p


def leader_key(url: str, name: str) -> dict[str, object]:
    """The leader's key as ``etcdctl get`` shows it (first create revision under ``NAME/``)."""
    assert ETCDCTL is not None
    out = subprocess.run(
        [ETCDCTL, "--endpoints", endpoints(url), "get", name + "/", "--prefix", "--sort-by=CREATE", "-w", "json"],
        env={**os.environ, "ETCDCTL_API": "3"},
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    kv: dict[str, object] = json.loads(out)["kvs"][0]
    return kv


def test_etcdctl_leader_is_seen_and_a_distlock_candidate_follows_it(
    etcd_url: str, name: str, cli: list[Etcdctl]
) -> None:
    theirs = spawn(cli, etcd_url, "elect", name, "proposal-1")
    key, value = theirs.lines(2)  # printed once elected
    assert key.startswith(name + "/") and value == "proposal-1"
    with distlock.connect(etcd_url) as store:
        info = store.leader(name)
        assert info is not None and info.value == "proposal-1" and info.owner is None
        assert info.term is not None and info.term == leader_key(etcd_url, name)["create_revision"]
        el = store.election(name, ttl=10)
        led: list[float] = []

        def campaign() -> None:
            assert el.campaign("distlock-1", timeout=30)
            led.append(time.monotonic())

        t = threading.Thread(target=campaign)
        t.start()
        time.sleep(0.8)
        assert not led, "led while etcdctl was the leader"
        theirs.stop(signal.SIGTERM)
        stopped = time.monotonic()
        t.join(30)
        # etcdctl's session lease (60 s) outlives it: the hand-over came from its resign, not from a lease
        assert led and led[0] - stopped < 5
        assert el.term is not None and el.term > info.term
        now = store.leader(name)
        assert now is not None and (now.value, now.term) == ("distlock-1", el.term)
        el.resign()


def test_distlock_leader_is_observed_by_etcdctl_and_an_etcdctl_candidate_waits(
    etcd_url: str, name: str, cli: list[Etcdctl]
) -> None:
    with distlock.connect(etcd_url) as store:
        el = store.election(name, ttl=10)
        assert el.campaign("V", timeout=5)
        term = el.term
        assert term is not None
        observer = spawn(cli, etcd_url, "elect", "-l", name)
        key, value = observer.lines(2)
        assert (key, value) == (base64.b64decode(str(leader_key(etcd_url, name)["key"])).decode(), "V")
        seen: list[tuple[str | None, int | None] | None] = []

        def observe() -> None:
            for info in store.observe(name, timeout=10):
                seen.append(None if info is None else (info.value, info.term))
                if info is not None and info.value == "P2":
                    return

        t = threading.Thread(target=observe)
        t.start()
        theirs = spawn(cli, etcd_url, "elect", name, "P2")
        time.sleep(1.0)
        assert theirs.quiet(), "etcdctl led while distlock was the leader"
        el.resign()
        key2, value2 = theirs.lines(2)
        assert key2.startswith(name + "/") and key2 != key and value2 == "P2"
        t.join(10)
        # woken by the watch: the hand-over is one txn away from the resign, so "no leader" may be skipped
        assert seen[0] == ("V", term) and seen[-1] is not None and seen[-1][0] == "P2"
        assert seen[-1][1] is not None and seen[-1][1] > term
        info = store.leader(name)
        assert info is not None and info.value == "P2" and info.owner is None
        assert observer.lines(2) == [key2, "P2"]
        theirs.stop()
        assert store.leader(name) is None


def test_proclaim_is_seen_by_etcdctl(etcd_url: str, name: str, cli: list[Etcdctl]) -> None:
    with distlock.connect(etcd_url) as store:
        el = store.election(name, ttl=10)
        assert el.campaign("first", timeout=5)
        observer = spawn(cli, etcd_url, "elect", "-l", name)
        key, value = observer.lines(2)
        assert value == "first"
        el.proclaim("second")
        assert observer.lines(2) == [key, "second"]  # same key (same term), new value
        kv = leader_key(etcd_url, name)
        assert kv["create_revision"] == el.term and int(str(kv["version"])) == 2
        el.resign()


def test_a_revoked_lease_loses_the_leadership_and_the_next_candidate_leads(etcd_url: str, name: str) -> None:
    assert ETCDCTL is not None
    lost: list[object] = []
    with distlock.connect(etcd_url) as store:
        leader = store.election(name, ttl=3, on_lost=lost.append)
        assert leader.campaign("L", timeout=5)
        term = leader.term
        assert term is not None
        nxt = store.election(name, ttl=3)
        led: list[int | None] = []

        def campaign() -> None:
            assert nxt.campaign("N", timeout=20)
            led.append(nxt.term)

        t = threading.Thread(target=campaign)
        t.start()
        time.sleep(0.5)
        assert not led
        lease = int(str(leader_key(etcd_url, name)["lease"]))
        subprocess.run(
            [ETCDCTL, "--endpoints", endpoints(etcd_url), "lease", "revoke", format(lease, "x")],
            env={**os.environ, "ETCDCTL_API": "3"},
            capture_output=True,
            check=True,
            timeout=10,
        )
        assert leader.lost.wait(10), "the renewer must notice the revoked lease"
        t.join(20)
        assert led and led[0] is not None and led[0] > term
        assert leader.term is None
        for _ in range(100):  # the callback runs off the critical path
            if lost:
                break
            time.sleep(0.05)
        assert lost == [leader]
        with pytest.raises(distlock.LockLost):
            leader.proclaim("still me?")
        info = store.leader(name)
        assert info is not None and (info.value, info.term) == ("N", led[0])
        nxt.resign()


def test_an_observer_whose_stream_broke_makes_a_new_one_before_it_wakes(etcd_url: str, name: str) -> None:
    with distlock.connect(etcd_url) as store:
        watch = store._acquirer.backend.watch(name)
        el = store.election(name, ttl=10)
        try:
            started = time.monotonic()
            watch.wait(0.3)
            assert time.monotonic() - started >= 0.29  # nothing happened: no wake-up
            watch._stream.close()  # type: ignore[attr-defined]  # its connection is gone (a member restarted)
            assert el.campaign("a", timeout=5)  # while no stream is open
            started = time.monotonic()
            watch.wait(5)  # at once: made a new stream, and the observer must read again
            assert time.monotonic() - started < 1
            el.proclaim("b")
            started = time.monotonic()
            watch.wait(5)  # the new stream's event
            assert time.monotonic() - started < 1
        finally:
            watch.close()
            el.resign()


@pytest.fixture(scope="module")
def auth_cluster() -> Iterator[EtcdCluster]:
    """Tokens expire after 2 s: the observer's watch outlives its token, and a new watch needs a new one."""
    with etcd_cluster(1, root_password=ROOT_PW, auth_token_ttl=2) as c:
        c.add_user("alice", ALICE_PW, ["app/"])
        yield c


def test_a_role_on_the_prefix_is_enough_for_elections(auth_cluster: EtcdCluster, name: str) -> None:
    el_name = f"app/{name}"
    url = auth_cluster.auth_url("alice", ALICE_PW)
    with distlock.connect(url) as store, distlock.connect(url) as observer:
        el = store.election(el_name, ttl=5)
        assert el.campaign("a", timeout=5)
        watch = observer._acquirer.backend.watch(el_name)
        try:
            time.sleep(2.5)  # the observer's token has expired (it made no call meanwhile)
            el.proclaim("b")
            started = time.monotonic()
            watch.wait(5)  # a stream outlives the token it was made with
            assert time.monotonic() - started < 1
            watch._stream.close()  # type: ignore[attr-defined]
            time.sleep(2.5)
            started = time.monotonic()
            watch.wait(5)  # a new stream, made with a new token
            assert time.monotonic() - started < 1 and watch._stream is not None  # type: ignore[attr-defined]
        finally:
            watch.close()
        info = observer.leader(el_name)
        assert info is not None and (info.value, info.term) == ("b", el.term)
        el.resign()
        with pytest.raises(distlock.BackendError) as err:
            next(iter(observer.observe(f"other/{name}", timeout=1)))
        text = str(err.value)
        assert "permission denied" in text and "\n" not in text and ALICE_PW not in text

"""Interop with Apache Curator: a Java peer (tests/java/CuratorPeer.java, built here with javac against Debian's
libcurator-recipes-java) and distlock on the same znode path exclude each other in both directions.

The peer is one JVM per test driven over stdin (see the Java file for the command list).
"""

from __future__ import annotations

import itertools
import queue
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import distlock

ROOT = Path(__file__).resolve().parent
JAVA_DIR = ROOT / "java"
JARS = [
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
]
LOG_JAR = "slf4j-nop.jar"


def _classpath() -> list[str] | None:
    base = Path("/usr/share/java")
    jars = [base / j for j in JARS]
    if not all(j.exists() for j in jars):
        return None
    return [str(j) for j in jars] + ([str(base / LOG_JAR)] if (base / LOG_JAR).exists() else [])


def build_peer(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Compile the Java peer (tests/java/CuratorPeer.java); its class path, or skip where Java or Curator is missing."""
    jars = _classpath()
    javac = shutil.which("javac")
    if jars is None or javac is None:
        pytest.skip("needs javac and Debian's libcurator-recipes-java (scripts/install_servers.sh)")
    out = tmp_path_factory.mktemp("curator-peer")
    subprocess.run(
        [javac, "-d", str(out), "-cp", ":".join(jars), str(JAVA_DIR / "CuratorPeer.java")],
        check=True,
        capture_output=True,
        timeout=180,
    )
    return ":".join([str(out), *jars])


@pytest.fixture(scope="module")
def peer_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_peer(tmp_path_factory)


class Peer:
    """One Curator client in a JVM, answering one line per command."""

    def __init__(self, classpath: str, hosts: str, path: str) -> None:
        self.proc = subprocess.Popen(
            ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", classpath, "CuratorPeer", hosts, path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self.reply(60) == "READY", self._stderr()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())

    def _stderr(self) -> str:
        if self.proc.poll() is None:
            return ""
        return self.proc.stderr.read() if self.proc.stderr else ""

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def reply(self, timeout: float = 60.0) -> str:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the Curator peer did not answer in {timeout}s {self._stderr()}") from None

    def pending(self, wait: float) -> bool:
        """True if no reply arrived within ``wait`` seconds (the peer is still blocked)."""
        time.sleep(wait)
        return self._lines.empty()

    def cmd(self, command: str, timeout: float = 60.0) -> str:
        self.send(command)
        return self.reply(timeout)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.proc.kill()
        self.proc.communicate()


@pytest.fixture
def store(zookeeper_url: str) -> Iterator[distlock.Store]:
    with distlock.connect(zookeeper_url) as s:
        yield s


@pytest.fixture
def path() -> str:
    return f"/distlock-interop/{uuid.uuid4().hex[:12]}"


@pytest.fixture
def peer(peer_classpath: str, zookeeper_url: str, path: str) -> Iterator[Peer]:
    hosts = zookeeper_url.split("://", 1)[1].split("?", 1)[0]
    p = Peer(peer_classpath, hosts, path)
    try:
        yield p
    finally:
        p.close()


def later(seconds: float, fn: Callable[[], object]) -> threading.Timer:
    timer = threading.Timer(seconds, fn)
    timer.start()
    return timer


def test_mutex_excludes_both_ways_and_hands_over(store: distlock.Store, peer: Peer, path: str) -> None:
    lock = store.lock(path)
    assert peer.cmd("acquire mutex 10000") == "OK true"
    assert not lock.acquire(blocking=False)
    assert not lock.acquire(timeout=0.3)
    later(0.5, lambda: peer.send("release mutex"))
    assert lock.acquire(timeout=30)  # queued behind Curator's node, woken by its deletion
    assert peer.reply() == "OK released"
    # now distlock holds it: Curator cannot get in, and is handed the lock on release
    assert peer.cmd("acquire mutex 300") == "OK false"
    peer.send("acquire mutex 30000")
    assert peer.pending(0.5)
    lock.release()
    assert peer.reply(30) == "OK true"
    assert not lock.acquire(timeout=0.2)
    assert peer.cmd("release mutex") == "OK released"
    assert lock.acquire(timeout=10)
    lock.release()


def test_mutex_fences_grow_across_curator_holders(store: distlock.Store, peer: Peer, path: str) -> None:
    lock = store.lock(path)
    assert lock.acquire(timeout=10)
    first = lock.fence
    lock.release()
    assert peer.cmd("acquire mutex 10000") == "OK true"
    assert peer.cmd("release mutex") == "OK released"
    assert lock.acquire(timeout=10)
    assert first is not None and lock.fence is not None and lock.fence > first
    lock.release()


def test_read_write_lock_interop(store: distlock.Store, peer: Peer, path: str) -> None:
    rw = store.rwlock(path)
    # readers share across the two clients
    assert peer.cmd("acquire read 10000") == "OK true"
    assert rw.read.acquire(timeout=10)
    # no writer while a reader of either side holds
    assert not store.rwlock(path).write.acquire(timeout=0.3)
    assert peer.cmd("acquire write 300") == "OK false"
    assert peer.cmd("release read") == "OK released"
    assert peer.cmd("acquire write 300") == "OK false"  # distlock's reader still holds
    # a queued Curator writer blocks new distlock readers (writers are not starved), then gets in
    peer.send("acquire write 30000")
    assert peer.pending(0.5)
    assert not store.rwlock(path).read.acquire(blocking=False)
    rw.read.release()
    assert peer.reply(30) == "OK true"
    assert not rw.read.acquire(timeout=0.3)
    assert not rw.write.acquire(blocking=False)
    later(0.5, lambda: peer.send("release write"))
    assert rw.write.acquire(timeout=30)
    assert peer.reply() == "OK released"
    assert peer.cmd("acquire read 300") == "OK false"
    rw.write.release()
    assert peer.cmd("acquire read 10000") == "OK true"
    assert peer.cmd("release read") == "OK released"


def test_semaphore_v2_interop(store: distlock.Store, peer: Peer, path: str) -> None:
    assert peer.cmd("lease 2 10000") == "OK true"
    assert peer.cmd("lease 2 10000") == "OK true"
    sem = store.semaphore(path, permits=2)
    assert not sem.acquire(timeout=0.3)
    assert peer.cmd("unlease") == "OK released"
    assert sem.acquire(timeout=10)
    info = store.inspect(path)
    assert info is not None and info.kind == "semaphore" and len(info.holders) == 2
    assert peer.cmd("lease 2 300") == "OK false"  # one Curator lease + one distlock permit = 2
    sem.release()
    assert peer.cmd("lease 2 10000") == "OK true"
    assert peer.cmd("unlease") == "OK released"
    assert peer.cmd("unlease") == "OK released"


@pytest.mark.parametrize("kind", ["mutex", "write"])
def test_mixed_contention_shared_counter(
    store: distlock.Store, peer: Peer, path: str, kind: str, tmp_path: Path
) -> None:
    counter = tmp_path / "counter"
    counter.write_text("0")
    n_java, n_py, threads = 30, 15, 2
    peer.send(f"counter {kind} {n_java} {counter} {tmp_path / 'java.log'}")
    spans: list[tuple[float, float, str]] = []
    guard = threading.Lock()

    def work() -> None:
        lock = store.lock(path) if kind == "mutex" else store.rwlock(path).write
        for _ in range(n_py):
            assert lock.acquire(timeout=60)
            start = time.monotonic()
            value = int(counter.read_text())
            time.sleep(0.002)
            counter.write_text(str(value + 1))
            end = time.monotonic()
            lock.release()
            with guard:
                spans.append((start, end, "py"))

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    assert peer.reply(120) == "OK done"
    assert int(counter.read_text()) == n_java + n_py * threads  # no lost update
    java = (tmp_path / "java.log").read_text().splitlines()
    spans += [(int(a) / 1e9, int(b) / 1e9, "java") for a, b in (ln.split() for ln in java)]
    spans.sort()
    assert len(spans) == n_java + n_py * threads
    assert {who for _, _, who in spans} == {"py", "java"}
    for (_s1, e1, w1), (s2, _e2, w2) in itertools.pairwise(spans):
        assert e1 <= s2, f"{w1} and {w2} held the lock at once"


def _wait_for(check: Callable[[], bool], bound: float = 20.0) -> bool:
    end = time.monotonic() + bound
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_curator_revoker_asks_a_distlock_holder(store: distlock.Store, peer: Peer, path: str) -> None:
    """Curator's ``Revoker.attemptRevoke`` on the distlock holder's node: the holder sees a request (no reason:
    Curator's message carries none), and keeps the lock until it releases it."""
    lock = store.lock(path)
    told: list[str] = []
    lock.on_revoke(told.append)
    assert lock.acquire(timeout=10)
    participants = peer.cmd("participants").split()
    assert participants[0] == "OK" and len(participants) == 2, participants
    assert peer.cmd(f"revoke {participants[1]}") == "OK revoked"
    assert lock.revoke_requested.wait(20)
    assert lock.revoke_reason == ""
    assert _wait_for(lambda: told == [""])
    assert lock.owned()
    assert peer.cmd("acquire mutex 300") == "OK false"  # a request takes nothing away
    lock.release()
    assert peer.cmd("acquire mutex 10000") == "OK true"
    assert peer.cmd("release mutex") == "OK released"


def test_request_release_runs_a_revocable_curator_holder_s_listener(
    store: distlock.Store, peer: Peer, path: str
) -> None:
    """distlock's ``request_release`` on a Curator holder's node writes Curator's ``__REVOKE__``: the listener
    of a mutex made revocable runs (the reason cannot ride on Curator's wire)."""
    assert peer.cmd("revocable") == "OK revocable"
    assert peer.cmd("acquire mutex 10000") == "OK true"
    assert peer.cmd("revoked") == "OK 0"
    assert store.request_release(path, "maintenance") is True
    assert _wait_for(lambda: peer.cmd("revoked") == "OK 1")
    assert not store.lock(path).acquire(blocking=False)  # the Curator holder still holds it
    assert peer.cmd("release mutex") == "OK released"
    assert store.request_release(path) is False  # nobody to ask now
    assert store.inspect(path) is None

"""Start, wait for, pause and stop server processes (the pattern every server family follows).

Only loopback: every server is bound to 127.0.0.1 by its command line, ports come from the kernel's
free-port allocation, data lives in a temporary directory removed afterwards.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"


def _ours(port: int) -> bool:
    """Under pytest-xdist, each worker takes only its own ports (by ``port // 2`` modulo the number of
    workers: Linux hands out even ports first to ``bind(0)``): a port one worker was handed and closed again
    (until its server binds it, a JVM needs a second) is never handed to another worker's server."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if count < 2 or not worker.startswith("gw") or not worker[2:].isdigit():
        return True
    return (port // 2) % count == int(worker[2:]) % count


def _bound() -> socket.socket:
    """A socket bound to a free port of ours on 127.0.0.1 (the caller closes it). The ports of other workers
    stay bound until one of ours comes, so the kernel hands out a new port each time."""
    others: list[socket.socket] = []
    try:
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            if _ours(int(s.getsockname()[1])):
                return s
            others.append(s)
    finally:
        for o in others:
            o.close()


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1 (closed again, so the server can bind it)."""
    with _bound() as s:
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (held open together so the kernel does not hand out one twice)."""
    socks = []
    try:
        for _ in range(n):
            socks.append(_bound())
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def port_open(port: int, host: str = LOOPBACK) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def which(*names: str, extra_dirs: Sequence[str] = ()) -> str | None:
    """The first of ``names`` found on PATH or in ``extra_dirs`` (Debian puts some daemons in sbin)."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", *extra_dirs])
    for n in names:
        found = shutil.which(n, path=path)
        if found:
            return found
    return None


@dataclass
class ServerProc:
    """One server process we started. ``stop()`` kills it by PID; the temp dir goes with it."""

    name: str
    argv: list[str]
    port: int
    workdir: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = field(init=False)
    url: str = ""
    #: the readiness check of the last ``start(ready=...)``, reused by a ``start()`` or ``restart()`` without one
    ready_check: Callable[[], bool] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.log_path = self.workdir / f"{self.name}.log"

    def start(self, ready: Callable[[], bool] | None = None, timeout: float = 60.0) -> ServerProc:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            self.argv,
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,  # our signals go to the server only, not to the caller
        )
        log.close()
        if ready is not None:
            self.ready_check = ready
        check = self.ready_check or (lambda: port_open(self.port))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                if check():
                    return self
            except Exception:  # noqa: BLE001 - not ready yet
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not become ready in {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """kill -9 of the server's whole process group (it runs in a session of its own), as a crash: data not
        flushed is gone, and no forked child (a PostgreSQL backend) outlives its parent to hold the port."""
        if self.alive():
            self.signal(signal.SIGCONT)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            assert self.proc is not None
            self.proc.wait(10)

    def restart(self, ready: Callable[[], bool] | None = None, attempts: int = 100) -> ServerProc:
        """kill -9 (if still running) and start again with the same command line, on the same port (which may
        linger for a moment after the kill, hence the retries)."""
        self.kill()
        for _ in range(attempts - 1):
            try:
                return self.start(ready)
            except RuntimeError:
                time.sleep(0.1)
        return self.start(ready)

    def stop(self, grace: float = 5.0) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        self.signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()


@contextlib.contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix=f"distlock-{prefix}-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


#: the preload library of Debian's ``libfaketime`` package (``faketime``)
FAKETIME_LIBS = ("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1")


def faketime_lib() -> str | None:
    found = [lib for lib in FAKETIME_LIBS if os.path.exists(lib)]
    found += glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    return found[0] if found else None


def faketime_prefix(control: Path, threaded: bool = False) -> list[str]:
    """A command prefix that runs a server under libfaketime, its wall clock offset by what ``control`` says
    (``+0``, ``+30``: seconds), re-read so the offset can change while the server runs. The monotonic clock
    is left alone (a real NTP step moves only the wall clock). ``env`` execs the server, so the PID stays the
    server's; put the prefix after any ``setpriv`` so libfaketime's shared memory belongs to the server's user.

    How often the file is re-read depends on the server. A process of one thread (PostgreSQL's backends)
    re-reads it on every clock call, so every backend sees a change at once. A ``threaded`` server (MariaDB:
    one process, a thread per connection) must not: libfaketime's re-read is not thread-safe, and a thread
    reading the clock while another re-reads sometimes gets the real clock, the whole offset back (measured:
    52 of 200,000 ``NOW(6)`` calls on 6 busy connections, each a server clock jumping back and forth by the
    skew, under which any lease can be handed out twice: a harness fault, not a real NTP step). There the
    offset is re-read at most once a second, by one clock call for every thread (0 of 190,000), and
    :meth:`~tools.servers.spawn.SpawnedSQL.skew_clock` waits until the server shows the new offset."""
    lib = faketime_lib()
    if lib is None:
        raise RuntimeError("libfaketime is not installed (Debian: apt-get install faketime)")
    cache = "FAKETIME_CACHE_DURATION=1" if threaded else "FAKETIME_NO_CACHE=1"
    return ["env", f"LD_PRELOAD={lib}", f"FAKETIME_TIMESTAMP_FILE={control}", cache,
            "FAKETIME_DONT_FAKE_MONOTONIC=1"]  # fmt: skip


# -- a link we can cut: one end in a network namespace of its own (network partitions) -----------------
def ip(*args: str) -> None:
    """Run ``ip ARGS`` (iproute2); raises on failure."""
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def netns_usable() -> bool:
    """Can this process create network namespaces and veth pairs (root, not inside a locked-down sandbox)?"""
    if which("ip") is None or os.geteuid() != 0:
        return False
    probe = f"dlkprobe{os.getpid() % 10000}"
    try:
        ip("netns", "add", probe)
    except (subprocess.SubprocessError, OSError):
        return False
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        ip("netns", "del", probe)
    return True


@dataclass
class NetnsLink:
    """A veth pair: ``host_ip`` on this host's side, ``ns_ip`` inside the namespace ``netns``, a private /30
    that exists only on this host (nothing else can reach it). :meth:`cut` takes the host side down: a server
    in the namespace loses every peer and client on the host at once; :meth:`heal` brings it back."""

    netns: str
    host_if: str
    host_ip: str
    ns_ip: str

    def exec_prefix(self) -> list[str]:
        """The command prefix that runs a server inside the namespace (``ip netns exec`` execs it: same PID)."""
        return ["ip", "netns", "exec", self.netns]

    def cut(self) -> None:
        ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        ip("link", "set", self.host_if, "up")


@contextlib.contextmanager
def netns_link() -> Iterator[NetnsLink]:
    """A fresh namespace and veth pair (root only), deleted afterwards."""
    tag = f"{os.getpid() % 1000:03d}{secrets.randbelow(100):02d}"
    ns, host_if, ns_if = f"dlk{tag}", f"dlk{tag}h", f"dlk{tag}n"
    net = secrets.randbelow(60) * 4  # 10.250.<x>.<net>/30
    third = secrets.randbelow(250)
    link = NetnsLink(ns, host_if, f"10.250.{third}.{net + 1}", f"10.250.{third}.{net + 2}")
    try:
        ip("netns", "add", ns)
        ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        ip("link", "set", ns_if, "netns", ns)
        ip("addr", "add", f"{link.host_ip}/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        ip("-n", ns, "addr", "add", f"{link.ns_ip}/30", "dev", ns_if)
        ip("-n", ns, "link", "set", ns_if, "up")
        ip("-n", ns, "link", "set", "lo", "up")
        yield link
    finally:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            ip("link", "del", host_if)
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            ip("netns", "del", ns)

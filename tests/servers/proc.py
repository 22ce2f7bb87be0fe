"""Start, wait for, pause and stop server processes (the pattern every server family follows).

Only loopback: every server is bound to 127.0.0.1 by its command line, ports come from the kernel's
free-port allocation, data lives in a temporary directory removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
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


def free_port() -> int:
    """A port the kernel just handed out on 127.0.0.1 (closed again, so the server can bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (held open together so the kernel does not hand out one twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((LOOPBACK, 0))
            socks.append(s)
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
            start_new_session=True,  # our signals go to the server only, not to pytest
        )
        log.close()
        check = ready or (lambda: port_open(self.port))
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
        """kill -9, as a crash (data not flushed is gone)."""
        if self.alive():
            self.signal(signal.SIGCONT)
            os.kill(self.pid, signal.SIGKILL)
            assert self.proc is not None
            self.proc.wait(10)

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

"""Servers ``distlock check --spawn`` / ``distlock bench --spawn`` start themselves: loopback only, temp dirs.

The Redis server is started with an append-only file fsynced on every write (``appendfsync always``), so a
kill -9 and restart keeps the lock keys and the fence counter: SAFETY F4 says a lock server that forgets keys on
restart breaks fencing, and the ``server-restart`` fault is meant to test the lock, not that misconfiguration.
``durable=False`` (``--volatile``) starts it with no persistence at all, to show exactly that failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .._errors import ConfigError

LOOPBACK = "127.0.0.1"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((LOOPBACK, port)) == 0


class SpawnedRedis:
    """One redis-server on 127.0.0.1 in a temporary directory; ``kill()`` / ``start()`` for restarts."""

    def __init__(self, durable: bool = True) -> None:
        path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
        binary = shutil.which("redis-server", path=path) or shutil.which("valkey-server", path=path)
        if binary is None:
            raise ConfigError("--spawn needs redis-server installed (Debian: apt-get install redis-server)")
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="distlock-spawn-redis-"))
        self.port = _free_port()
        self.url = f"redis://{LOOPBACK}:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.durable = durable

    def start(self, timeout: float = 30.0) -> SpawnedRedis:
        argv = [
            self.binary,
            "--bind", LOOPBACK,
            "--port", str(self.port),
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", "yes" if self.durable else "no",
            "--appendfsync", "always",
            "--protected-mode", "yes",
        ]  # fmt: skip
        with open(self.dir / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ConfigError(f"redis-server exited at start (log in {self.dir})")
            if _port_open(self.port):
                return self
            time.sleep(0.02)
        self.stop()
        raise ConfigError(f"redis-server did not start within {timeout:g}s")

    def kill(self) -> None:
        """kill -9: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SpawnedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

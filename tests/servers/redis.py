"""redis-server processes: one node, N independent masters (Redlock), a master with a replica."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from .proc import LOOPBACK, ServerProc, free_port, which, workdir


def redis_binary() -> str | None:
    return which("redis-server", "valkey-server")


def start_redis(dirpath: Path, name: str = "redis", port: int | None = None, *extra: str) -> ServerProc:
    binary = redis_binary()
    if binary is None:
        raise RuntimeError("redis-server is not installed (the test command installs it: scripts/test.sh)")
    port = port or free_port()
    d = dirpath / name
    d.mkdir(parents=True, exist_ok=True)
    argv = [
        binary,
        "--bind", LOOPBACK,
        "--port", str(port),
        "--dir", str(d),
        "--save", "",
        "--appendonly", "no",
        "--protected-mode", "yes",
        *extra,
    ]  # fmt: skip
    srv = ServerProc(name, argv, port, d)
    srv.url = f"redis://{LOOPBACK}:{port}/0"
    return srv.start()


@contextlib.contextmanager
def redis_server(*extra: str) -> Iterator[ServerProc]:
    with workdir("redis") as d:
        srv = start_redis(d, "redis", None, *extra)
        try:
            yield srv
        finally:
            srv.stop()

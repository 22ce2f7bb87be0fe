"""redis-server processes: one node, N independent masters (Redlock), a master with a replica.

Every server binds 127.0.0.1 on a kernel-chosen free port, keeps its data in a temporary directory and
has persistence off (so a kill -9 + restart on the same port comes back EMPTY, the worst case the
Redis and Redlock docs discuss) unless started with :data:`DURABLE`. ``restart`` reuses the port.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from .proc import LOOPBACK, ServerProc, free_port, free_ports, which, workdir


def redis_binary() -> str | None:
    return which("redis-server", "valkey-server")


def start_redis(dirpath: Path, name: str = "redis", port: int | None = None, *extra: str) -> ServerProc:
    binary = redis_binary()
    if binary is None:
        raise RuntimeError("redis-server is not installed (scripts/install_servers.sh installs it)")
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


def restart(srv: ServerProc) -> ServerProc:
    """kill -9 (if still running) and start again on the same port (empty unless started durable)."""
    return srv.restart()


@contextlib.contextmanager
def redis_server(*extra: str) -> Iterator[ServerProc]:
    with workdir("redis") as d:
        srv = start_redis(d, "redis", None, *extra)
        try:
            yield srv
        finally:
            srv.stop()


def redlock_url(servers: list[ServerProc], query: str = "") -> str:
    hosts = ",".join(f"{LOOPBACK}:{s.port}" for s in servers)
    return f"redlock://{hosts}/0" + (f"?{query}" if query else "")


#: extra arguments of a server that keeps every write across a restart (AOF, fsync per write)
DURABLE = ("--appendonly", "yes", "--appendfsync", "always")


@contextlib.contextmanager
def redis_masters(n: int = 5, *extra: str) -> Iterator[list[ServerProc]]:
    """``n`` independent masters (a Redlock quorum); ``extra`` server arguments, e.g. :data:`DURABLE`."""
    with workdir("redlock") as d:
        servers: list[ServerProc] = []
        try:
            for i, port in enumerate(free_ports(n)):
                servers.append(start_redis(d, f"master{i}", port, *extra))
            yield servers
        finally:
            for s in servers:
                s.stop()


@contextlib.contextmanager
def redis_replicated() -> Iterator[tuple[ServerProc, ServerProc]]:
    """A master and one asynchronous replica of it (for failover and WAIT tests)."""
    with workdir("redis-repl") as d:
        master = start_redis(d, "master", None, "--repl-diskless-sync-delay", "0")
        replica: ServerProc | None = None
        try:
            replica = start_redis(d, "replica", None, "--replicaof", LOOPBACK, str(master.port))
            yield master, replica
        finally:
            if replica is not None:
                replica.stop()
            master.stop()

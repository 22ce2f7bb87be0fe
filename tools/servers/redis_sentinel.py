"""Redis behind Sentinel on loopback: a master, one replica and three sentinels, for the Sentinel tests.

Each sentinel is ``redis-sentinel`` (Debian package ``redis-sentinel``; ``redis-server --sentinel`` is the
same program) with a config file of its own (Sentinel rewrites it as it learns the replicas and the other
sentinels, so it must be writable). The timers are short so a failover takes about 1-3 s: the master is
"subjectively down" after ``down_after`` ms without a reply, and a failover that stalls is retried after
``failover_timeout`` ms. The deployment is ready once every sentinel knows the master, the replica (with its
link up) and the two other sentinels: before that a failover could find no replica to promote.

With ``tls`` (a server certificate, its key and the CA that signed it) every process speaks TLS only: the
plain ports are off (``port 0``), clients must show a certificate signed by that CA, and ``tls-replication
yes`` makes the replica and the sentinels use TLS for their own connections (to the master, the replica and
each other), with the server's certificate as their client certificate.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from .proc import LOOPBACK, ServerProc, free_ports, which, workdir
from .redis import redis_binary, start_redis

SERVICE = "distlock-test"


@dataclass
class SentinelDeployment:
    master: ServerProc
    replica: ServerProc
    sentinels: list[ServerProc]
    service: str = SERVICE
    #: redis-py's TLS arguments for the harness's own clients (empty: plain TCP)
    tls: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        """The store URL (without TLS options: a TLS deployment's tests add their own)."""
        hosts = ",".join(f"{LOOPBACK}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def sentinel(self, i: int = 0) -> redis.Redis:
        return _client(self.sentinels[i].port, self.tls)

    def data(self, port: int) -> redis.Redis:
        """A client of the data node on ``port``."""
        return _client(port, self.tls)

    def master_port(self) -> int:
        """The port of the master as the first sentinel that answers sees it now."""
        for i in range(len(self.sentinels)):
            with contextlib.suppress(redis.RedisError), self.sentinel(i) as s:
                _host, port = s.sentinel_get_master_addr_by_name(self.service)
                return int(port)
        raise RuntimeError("no sentinel answered")

    def by_port(self, port: int) -> ServerProc:
        return next(p for p in (self.master, self.replica) if p.port == port)

    def wait_master(self, not_port: int, timeout: float = 20.0) -> int:
        """Wait until every live sentinel names a master other than ``not_port`` (and it says it is a master);
        its port."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ports = set()
            for i, s in enumerate(self.sentinels):
                if not s.alive():
                    continue
                with contextlib.suppress(redis.RedisError), self.sentinel(i) as c:
                    ports.add(int(c.sentinel_get_master_addr_by_name(self.service)[1]))
            if len(ports) == 1 and not_port not in ports:
                port = ports.pop()
                with contextlib.suppress(redis.RedisError), self.data(port) as c:
                    if c.info("replication").get("role") == "master":
                        return port
            time.sleep(0.05)
        raise RuntimeError(f"no failover away from port {not_port} within {timeout} s")


def _client(port: int, tls: dict[str, Any]) -> redis.Redis:
    return redis.Redis(host=LOOPBACK, port=port, socket_timeout=5, decode_responses=True, **tls)


def _tls_settings(tls: tuple[Path, Path, Path] | None, port: int) -> list[tuple[str, str]]:
    """The settings of a TLS-only process on ``port`` (none without ``tls``): ``port 0`` turns the plain port
    off (it comes after the plain ``port`` of the command line or config, so it wins)."""
    if tls is None:
        return []
    cert, key, ca = tls
    return [("port", "0"), ("tls-port", str(port)), ("tls-cert-file", str(cert)), ("tls-key-file", str(key)),
            ("tls-ca-cert-file", str(ca)), ("tls-auth-clients", "yes"), ("tls-replication", "yes")]  # fmt: skip


def _args(settings: list[tuple[str, str]]) -> list[str]:
    return [a for name, value in settings for a in (f"--{name}", value)]


def sentinel_argv(conf: Path) -> list[str]:
    found = which("redis-sentinel", "valkey-sentinel")
    if found is not None:
        return [found, str(conf)]
    binary = redis_binary()
    if binary is None:
        raise RuntimeError("redis-sentinel is not installed (scripts/install_servers.sh installs it)")
    return [binary, str(conf), "--sentinel"]


def _ready(dep: SentinelDeployment) -> bool:
    with dep.data(dep.replica.port) as r:
        if r.info("replication").get("master_link_status") != "up":
            return False
    for i in range(len(dep.sentinels)):
        with dep.sentinel(i) as s:
            state = s.sentinel_master(dep.service)
            if int(state.get("num-other-sentinels", 0)) != len(dep.sentinels) - 1:
                return False
            replicas = s.sentinel_slaves(dep.service)
            if not any(int(r["port"]) == dep.replica.port and r.get("master-link-status") == "ok" for r in replicas):
                return False
    return True


@contextlib.contextmanager
def redis_sentinel(
    down_after: int = 1000,
    failover_timeout: int = 3000,
    timeout: float = 60.0,
    *extra: str,
    tls: tuple[Path, Path, Path] | None = None,
) -> Iterator[SentinelDeployment]:
    """A master, a replica of it and three sentinels watching them (quorum 2); ``extra``: arguments for
    both data servers; ``tls``: (server certificate, its key, CA) for a TLS-only deployment."""
    with workdir("redis-sentinel") as d:
        ports = free_ports(5)
        procs: list[ServerProc] = []
        client_tls: dict[str, Any] = {}
        if tls is not None:
            cert, key, ca = tls
            client_tls = {"ssl": True, "ssl_certfile": str(cert), "ssl_keyfile": str(key), "ssl_ca_certs": str(ca)}
        try:
            data = ("--repl-diskless-sync-delay", "0", *extra)
            master = start_redis(d, "master", ports[0], *data, *_args(_tls_settings(tls, ports[0])))
            procs.append(master)
            replica = start_redis(
                d,
                "replica",
                ports[1],
                *data,
                *_args(_tls_settings(tls, ports[1])),
                "--replicaof",
                LOOPBACK,
                str(ports[0]),
            )
            procs.append(replica)
            sentinels: list[ServerProc] = []
            for i, port in enumerate(ports[2:]):
                sd = d / f"sentinel{i}"
                sd.mkdir()
                conf = sd / "sentinel.conf"
                conf.write_text(
                    f"port {port}\nbind {LOOPBACK}\ndir {sd}\n"
                    + "".join(f"{name} {value}\n" for name, value in _tls_settings(tls, port))
                    + f"sentinel monitor {SERVICE} {LOOPBACK} {ports[0]} 2\n"
                    f"sentinel down-after-milliseconds {SERVICE} {down_after}\n"
                    f"sentinel failover-timeout {SERVICE} {failover_timeout}\n"
                    f"sentinel parallel-syncs {SERVICE} 1\n"
                )
                srv = ServerProc(f"sentinel{i}", sentinel_argv(conf), port, sd)
                srv.start()
                procs.append(srv)
                sentinels.append(srv)
            dep = SentinelDeployment(master, replica, sentinels, tls=client_tls)
            deadline = time.monotonic() + timeout
            while True:
                with contextlib.suppress(redis.RedisError, KeyError):
                    if _ready(dep):
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("redis sentinel deployment did not become ready:\n" + sentinels[0].tail())
                time.sleep(0.1)
            yield dep
        finally:
            for p in reversed(procs):
                p.stop()

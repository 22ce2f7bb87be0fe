"""Redis behind Sentinel on loopback: a master, one replica and three sentinels, for the Sentinel tests.

Each sentinel is ``redis-sentinel`` (Debian package ``redis-sentinel``; ``redis-server --sentinel`` is the
same program) with a config file of its own (Sentinel rewrites it as it learns the replicas and the other
sentinels, so it must be writable). The timers are short so a failover takes about 1-3 s: the master is
"subjectively down" after ``down_after`` ms without a reply, and a failover that stalls is retried after
``failover_timeout`` ms. The deployment is ready once every sentinel knows the master, the replica (with its
link up) and the two other sentinels: before that a failover could find no replica to promote.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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

    @property
    def url(self) -> str:
        hosts = ",".join(f"{LOOPBACK}:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    def sentinel(self, i: int = 0) -> redis.Redis:
        return redis.Redis(host=LOOPBACK, port=self.sentinels[i].port, socket_timeout=5, decode_responses=True)

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
                with contextlib.suppress(redis.RedisError), _client(port) as c:
                    if c.info("replication").get("role") == "master":
                        return port
            time.sleep(0.05)
        raise RuntimeError(f"no failover away from port {not_port} within {timeout} s")


def _client(port: int) -> redis.Redis:
    return redis.Redis(host=LOOPBACK, port=port, socket_timeout=5, decode_responses=True)


def sentinel_argv(conf: Path) -> list[str]:
    found = which("redis-sentinel", "valkey-sentinel")
    if found is not None:
        return [found, str(conf)]
    binary = redis_binary()
    if binary is None:
        raise RuntimeError("redis-sentinel is not installed (scripts/install_servers.sh installs it)")
    return [binary, str(conf), "--sentinel"]


def _ready(dep: SentinelDeployment) -> bool:
    with _client(dep.replica.port) as r:
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
    down_after: int = 1000, failover_timeout: int = 3000, timeout: float = 60.0, *extra: str
) -> Iterator[SentinelDeployment]:
    """A master, a replica of it and three sentinels watching them (quorum 2); ``extra``: arguments for
    both data servers."""
    with workdir("redis-sentinel") as d:
        ports = free_ports(5)
        procs: list[ServerProc] = []
        try:
            data = ("--repl-diskless-sync-delay", "0", *extra)
            master = start_redis(d, "master", ports[0], *data)
            procs.append(master)
            replica = start_redis(d, "replica", ports[1], *data, "--replicaof", LOOPBACK, str(ports[0]))
            procs.append(replica)
            sentinels: list[ServerProc] = []
            for i, port in enumerate(ports[2:]):
                sd = d / f"sentinel{i}"
                sd.mkdir()
                conf = sd / "sentinel.conf"
                conf.write_text(
                    f"port {port}\nbind {LOOPBACK}\ndir {sd}\n"
                    f"sentinel monitor {SERVICE} {LOOPBACK} {ports[0]} 2\n"
                    f"sentinel down-after-milliseconds {SERVICE} {down_after}\n"
                    f"sentinel failover-timeout {SERVICE} {failover_timeout}\n"
                    f"sentinel parallel-syncs {SERVICE} 1\n"
                )
                srv = ServerProc(f"sentinel{i}", sentinel_argv(conf), port, sd)
                srv.start()
                procs.append(srv)
                sentinels.append(srv)
            dep = SentinelDeployment(master, replica, sentinels)
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

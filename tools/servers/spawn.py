"""The deployments ``distlock check --spawn`` / ``distlock bench --spawn`` start, and their server faults.

Loaded by :func:`distlock.checker.servers.spawned` when distlock runs from a checkout of its repository; the
installed package ships no server spawners. Every family is started by the modules next to this one (the same
code the test suite uses): loopback only, free ports, temporary directories removed afterwards. The table of
families and faults, and why the servers are durable, is in docs/checker.md and in
:mod:`distlock.checker.servers`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

from distlock._errors import ConfigError
from distlock.checker.servers import FAMILIES, SERVER_FAULTS, Spawned

from . import etcd, mysql, postgres, redis, redis_cluster, redis_sentinel, zookeeper
from .proc import LOOPBACK, ServerProc, faketime_lib, faketime_prefix, netns_usable, which, workdir

#: the arguments that make a spawned redis-server durable (they override the harness' ``--appendonly no``)
REDIS_DURABLE = ("--appendonly", "yes", "--appendfsync", "always")
T = TypeVar("T")


def _wait_for(find: Callable[[], T | None], failure: str, timeout: float = 30.0) -> T:
    """What ``find`` returns once it is not None (a cluster may be electing a leader right now)."""
    deadline = time.monotonic() + timeout
    while True:
        found = find()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise ConfigError(f"{failure} after {timeout:g}s")
        time.sleep(0.1)


def _need_netns() -> None:
    if not netns_usable():
        raise ConfigError("the partition fault needs root and iproute2 (network namespaces)")


class SpawnedRedis(Spawned):
    """``redis``: one server; ``redlock``: ``masters`` independent ones."""

    def __init__(self, durable: bool = True, masters: int = 0) -> None:
        super().__init__()
        self.family = "redlock" if masters else "redis"
        self.masters = masters
        self.durable = durable
        self.servers: list[ServerProc] = []

    def start(self) -> SpawnedRedis:
        if redis.redis_binary() is None:
            raise ConfigError("--spawn redis needs redis-server installed (Debian: apt-get install redis-server)")
        d = self.stack.enter_context(workdir(f"spawn-{self.family}"))
        extra = REDIS_DURABLE if self.durable else ()
        names = [f"master{i}" for i in range(self.masters)] if self.masters else ["redis"]
        for name in names:
            srv = redis.start_redis(d, name, None, *extra)
            self.stack.callback(srv.stop)
            self.servers.append(srv)
        self.url = redis.redlock_url(self.servers) if self.masters else self.servers[0].url
        return self

    def restart(self) -> None:
        for srv in self.servers:
            srv.kill()
        for srv in self.servers:
            srv.restart()


#: what the failover families' stores ask: WAIT for the replica after each acquire and renewal (F5)
REPLICATED = "wait_replicas=1&wait_timeout=500"


class SpawnedSentinel(Spawned):
    """``redis-sentinel``: a master, its replica and three sentinels (a failover takes 1-3 s)."""

    family = "redis-sentinel"

    def start(self) -> SpawnedSentinel:
        if redis.redis_binary() is None or which("redis-sentinel") is None:
            raise ConfigError("--spawn redis-sentinel needs redis-server and redis-sentinel installed")
        self.dep = self.stack.enter_context(redis_sentinel.redis_sentinel(1000, 3000, 60.0, *REDIS_DURABLE))
        self.url = f"{self.dep.url}?{REPLICATED}"
        return self

    def failover(self) -> Callable[[], None]:
        old = self.dep.master_port()
        srv = self.dep.by_port(old)
        srv.kill()
        new = self.dep.wait_master(old)

        def rejoin() -> None:
            # Sentinel itself turns a returning master into a replica only after about ten seconds; an
            # operator's restart script (or this one) points it at the new master at once
            _restart_quietly(srv)
            with self.dep.data(old) as c:
                c.execute_command("REPLICAOF", LOOPBACK, str(new))

        return rejoin


class SpawnedCluster(Spawned):
    """``redis-cluster``: three masters with a replica each."""

    family = "redis-cluster"

    def start(self) -> SpawnedCluster:
        if redis.redis_binary() is None:
            raise ConfigError("--spawn redis-cluster needs redis-server installed")
        self.cluster = self.stack.enter_context(redis_cluster.redis_cluster(3, replicas=True))
        self.url = f"{self.cluster.url}?{REPLICATED}"
        return self

    def _master_of(self, key: str) -> int:
        """The index of the live node that serves ``key``'s slot now, as a live node answers."""
        for i, node in enumerate(self.cluster.nodes):
            if not node.alive():
                continue
            try:
                with self.cluster.client(i) as c:
                    slot = int(c.execute_command("CLUSTER", "KEYSLOT", key))
                    for start, end, primary, *_ in c.execute_command("CLUSTER", "SLOTS"):
                        if int(start) <= slot <= int(end):
                            port = int(primary[1])
                            return next(j for j, n in enumerate(self.cluster.nodes) if n.port == port)
            except Exception:  # noqa: BLE001 - ask the next node
                continue
        raise ConfigError("no Redis Cluster node says which master serves the name")

    def failover(self) -> Callable[[], None]:
        victim = self._master_of(self.focus or "x")
        srv = self.cluster.nodes[victim]
        srv.kill()

        def promoted() -> int | None:
            now = self._master_of(self.focus or "x")
            return None if now == victim else now

        _wait_for(promoted, "no replica of the killed Redis Cluster master was promoted", 30.0)
        return lambda: _restart_quietly(srv)


def _restart_quietly(srv: ServerProc) -> None:
    """Start a killed data server again (it rejoins as a replica); a run cut short may find it running."""
    if not srv.alive():
        srv.restart()


class SpawnedZookeeper(Spawned):
    family = "zookeeper"

    def __init__(self, session_timeout: float, partitionable: bool = False) -> None:
        super().__init__()
        self.session_timeout = session_timeout
        self.partitionable = partitionable

    def start(self) -> SpawnedZookeeper:
        if not zookeeper.available():
            raise ConfigError("--spawn zookeeper needs ZooKeeper and java (Debian: apt-get install zookeeper)")
        if self.partitionable:
            _need_netns()
            self.ensemble = self.stack.enter_context(zookeeper.partitionable_ensemble(3))
            hosts = ",".join(n.address for n in [self.ensemble.nodes[-1], *self.ensemble.nodes[:-1]])
        else:
            d = self.stack.enter_context(workdir("spawn-zookeeper"))
            self.ensemble = zookeeper.make_ensemble(d, 3)
            self.stack.callback(self.ensemble.stop)
            self.ensemble.start()
            hosts = self.ensemble.hosts
        self.url = f"zookeeper://{hosts}?session_timeout={self.session_timeout:g}"
        return self

    def partition(self) -> Callable[[], None]:
        if self.ensemble.link is None:
            raise ConfigError("partition: the ensemble was not started partitionable")
        self.ensemble.partition()
        return self.ensemble.heal

    def restart(self) -> None:
        self.ensemble.crash()

    def kill_leader(self) -> Callable[[], None]:
        node = _wait_for(self.ensemble.leader, "no ZooKeeper node says it is the leader")
        self.ensemble.kill(node)
        return lambda: self.ensemble.restart(node)


class SpawnedEtcd(Spawned):
    family = "etcd"

    def __init__(self, partitionable: bool = False) -> None:
        super().__init__()
        self.partitionable = partitionable

    def start(self) -> SpawnedEtcd:
        if etcd.etcd_binary() is None:
            raise ConfigError("--spawn etcd needs etcd installed (Debian: apt-get install etcd-server)")
        if self.partitionable:
            _need_netns()
            part = self.stack.enter_context(etcd.partitionable_cluster(3, fsync=True))
            self.cluster: etcd.EtcdCluster = part
            # the member in the namespace first: every client talks to it until it is cut off
            order = [len(part.members) - 1, *range(len(part.members) - 1)]
            self.url = "etcd://" + ",".join(f"{part.addrs[i]}:{part.members[i].port}" for i in order)
        else:
            d = self.stack.enter_context(workdir("spawn-etcd"))
            self.cluster = etcd.start_cluster(d, 3, fsync=True)
            self.stack.callback(self.cluster.stop)
            self.url = self.cluster.url
        return self

    def restart(self) -> None:
        self.cluster.crash()

    def kill_leader(self) -> Callable[[], None]:
        i = _wait_for(self.cluster.leader_index, "no etcd member knows a leader")
        self.cluster.members[i].kill()
        return lambda: self.cluster.restart(i)

    def partition(self) -> Callable[[], None]:
        if not isinstance(self.cluster, etcd.PartitionableCluster):
            raise ConfigError("partition: the cluster was not started partitionable")
        self.cluster.partition()
        return self.cluster.heal


class SpawnedSQL(Spawned):
    """``postgres`` / ``mysql``: one server in lease mode; with ``clock``, under libfaketime."""

    def __init__(self, family: str, clock: bool = False, durable: bool = True) -> None:
        super().__init__()
        self.family = family
        self.clock = clock
        self.durable = durable

    def start(self) -> SpawnedSQL:
        d = self.stack.enter_context(workdir(f"spawn-{self.family}"))
        wrap: list[str] = []
        if self.clock:
            if faketime_lib() is None:
                raise ConfigError("the clock-skew fault needs libfaketime (Debian: apt-get install faketime)")
            self.control = d / "faketime.rc"
            self._write_offset()
            wrap = faketime_prefix(self.control, threaded=self.family == "mysql")
        if self.family == "postgres":
            if postgres.pg_bindir() is None:
                raise ConfigError("--spawn postgres needs PostgreSQL (Debian: apt-get install postgresql)")
            self.server = postgres.start_postgres(d, wrap=wrap, durable=self.durable)
            self.stack.callback(postgres.stop_postgres, self.server)
        else:
            if mysql.mariadb_binary() is None:
                raise ConfigError("--spawn mysql needs MariaDB (Debian: apt-get install mariadb-server)")
            self.server = mysql.start_mariadb(d, wrap=wrap)
            self.stack.callback(self.server.stop, 20.0)
        self.url = self.server.url
        return self

    def _write_offset(self) -> None:
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(f"{self.clock_offset:+g}\n")
        os.chmod(tmp, 0o644)  # the server may run as another user (postgres)
        tmp.replace(self.control)  # atomic: the server never reads half a line

    def restart(self) -> None:
        self.server.restart()

    def skew_clock(self, seconds: float) -> None:
        if not self.clock:
            raise ConfigError("clock-skew: the server was not started under libfaketime")
        self.clock_offset += seconds
        self._write_offset()
        if self.family == "mysql":
            self._until_the_clock_shows(self.clock_offset)

    def _until_the_clock_shows(self, offset: float, limit: float = 3.0) -> None:
        """MariaDB re-reads the offset at most once a second (see ``faketime_prefix``): the skew has landed
        once the server's ``NOW(6)`` is ``offset`` ahead of this machine's clock."""
        import pymysql

        from distlock._url import parse_url

        cfg = parse_url(self.url)
        host, port = cfg.hosts[0]
        conn = pymysql.connect(host=host, port=port, user=cfg.username or "", password=cfg.password or "",
                               connect_timeout=limit, read_timeout=limit)  # fmt: skip
        try:
            deadline = time.monotonic() + limit
            with conn.cursor() as cur:
                while True:
                    cur.execute("SELECT UNIX_TIMESTAMP(NOW(6))")
                    row = cur.fetchone()
                    if row is not None and abs(float(row[0]) - time.time() - offset) < 0.5:
                        return
                    if time.monotonic() >= deadline:
                        raise RuntimeError(f"the server's clock did not move by {offset:+g} s within {limit} s")
                    time.sleep(0.02)
        finally:
            conn.close()


def spawn(family: str, faults: tuple[str, ...] = (), durable: bool = True, lease: float = 2.0) -> Spawned:
    """The (not yet started) deployment ``--spawn family`` asks for, prepared for ``faults``."""
    if family not in FAMILIES:
        raise ConfigError(f"unknown --spawn {family!r}; choose from {', '.join(FAMILIES)}")
    for f in faults:
        if f in SERVER_FAULTS and family not in SERVER_FAULTS[f]:
            raise ConfigError(f"the {f} fault needs --spawn {' or '.join(SERVER_FAULTS[f])}, not {family}")
    if not durable and family not in ("redis", "redlock", "postgres"):
        raise ConfigError("--volatile applies to --spawn redis, redlock and postgres only")
    if family == "redis-sentinel":
        return SpawnedSentinel()
    if family == "redis-cluster":
        return SpawnedCluster()
    if family in ("redis", "redlock"):
        return SpawnedRedis(durable, masters=5 if family == "redlock" else 0)
    if family == "zookeeper":
        return SpawnedZookeeper(session_timeout=max(lease, 2.0), partitionable="partition" in faults)
    if family == "etcd":
        return SpawnedEtcd(partitionable="partition" in faults)
    return SpawnedSQL(family, clock="clock-skew" in faults, durable=durable)


__all__ = ["spawn"]

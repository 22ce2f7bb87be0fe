"""A Redis Cluster of three masters (no replicas) on loopback, for the ``redis_cluster`` tests.

Each node is a redis-server with ``--cluster-enabled yes`` on a kernel-chosen port and its cluster bus on
another kernel-chosen port (``--cluster-port``, Redis >= 7; the default port + 10000 may not be free or even
valid). The slots are assigned with ``CLUSTER ADDSLOTSRANGE`` (three equal ranges) and the nodes joined with
``CLUSTER MEET``; the cluster is ready once every node reports ``cluster_state:ok`` and knows all three.
Persistence is off, as for the single node.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import redis
from redis.crc import key_slot

from .proc import LOOPBACK, ServerProc, free_ports, workdir
from .redis import start_redis

SLOTS = 16384


@dataclass
class RedisCluster:
    nodes: list[ServerProc]

    @property
    def url(self) -> str:
        """One seed node; the client discovers the others (``CLUSTER SLOTS``)."""
        return f"redis://{LOOPBACK}:{self.nodes[0].port}/0"

    def client(self, i: int) -> redis.Redis:
        return redis.Redis(host=LOOPBACK, port=self.nodes[i].port, socket_timeout=5)


def _ready(clients: list[redis.Redis]) -> bool:
    for c in clients:
        info = c.cluster("INFO")
        if info.get("cluster_state") != "ok" or int(info.get("cluster_known_nodes", 0)) != len(clients):
            return False
    return True


def _replicas_ready(clients: list[redis.Redis], masters: int) -> bool:
    return all(c.info("replication").get("master_link_status") == "up" for c in clients[masters:])


@contextlib.contextmanager
def redis_cluster(masters: int = 3, timeout: float = 60.0, replicas: bool = False) -> Iterator[RedisCluster]:
    """``masters`` masters; with ``replicas``, one replica each (nodes ``masters`` .. ``2 * masters - 1``,
    replica ``masters + i`` of master ``i``), so a killed master fails over."""
    total = 2 * masters if replicas else masters
    with workdir("redis-cluster") as d:
        ports = free_ports(2 * total)
        nodes: list[ServerProc] = []
        clients: list[redis.Redis] = []
        try:
            for i in range(total):
                bus = ports[total + i]
                extra = ["--cluster-enabled", "yes", "--cluster-port", str(bus), "--cluster-config-file", "nodes.conf"]
                extra += ["--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0"]
                nodes.append(start_redis(d, f"node{i}", ports[i], *extra))
            clients = [redis.Redis(host=LOOPBACK, port=n.port, socket_timeout=5) for n in nodes]
            per = SLOTS // masters
            for i, c in enumerate(clients[:masters]):
                last = SLOTS - 1 if i == masters - 1 else (i + 1) * per - 1
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
            for i in range(1, total):
                clients[0].execute_command("CLUSTER", "MEET", LOOPBACK, ports[i], ports[total + i])
            deadline = time.monotonic() + timeout
            while not _ready(clients):
                if time.monotonic() > deadline:
                    raise RuntimeError("redis cluster did not reach cluster_state:ok")
                time.sleep(0.1)
            if replicas:
                ids = [c.execute_command("CLUSTER", "MYID").decode() for c in clients[:masters]]
                for i in range(masters):
                    for _ in range(100):  # the replica must know the master's id first (gossip)
                        try:
                            clients[masters + i].execute_command("CLUSTER", "REPLICATE", ids[i])
                            break
                        except redis.ResponseError:
                            time.sleep(0.1)
                while not (_ready(clients) and _replicas_ready(clients, masters)):
                    if time.monotonic() > deadline:
                        raise RuntimeError("redis cluster replicas did not come up")
                    time.sleep(0.1)
                # a replica whose link is up may still be loading its first sync: WAIT until each acknowledges
                for i, c in enumerate(clients[:masters]):
                    probe = next(f"probe-{k}" for k in range(100000) if min(key_slot(f"probe-{k}".encode()) // per, masters - 1) == i)
                    while True:
                        c.set(probe, "1")
                        if int(c.execute_command("WAIT", 1, 200)) >= 1:
                            break
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"the replica of redis cluster master {i} never acknowledged a write")
                    c.delete(probe)
            yield RedisCluster(nodes)
        finally:
            for c in clients:
                c.close()
            for n in nodes:
                n.stop()

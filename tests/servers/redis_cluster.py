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


@contextlib.contextmanager
def redis_cluster(masters: int = 3, timeout: float = 60.0) -> Iterator[RedisCluster]:
    with workdir("redis-cluster") as d:
        ports = free_ports(2 * masters)
        nodes: list[ServerProc] = []
        clients: list[redis.Redis] = []
        try:
            for i in range(masters):
                bus = ports[masters + i]
                extra = ["--cluster-enabled", "yes", "--cluster-port", str(bus), "--cluster-config-file", "nodes.conf"]
                extra += ["--cluster-node-timeout", "2000"]
                nodes.append(start_redis(d, f"node{i}", ports[i], *extra))
            clients = [redis.Redis(host=LOOPBACK, port=n.port, socket_timeout=5) for n in nodes]
            per = SLOTS // masters
            for i, c in enumerate(clients):
                last = SLOTS - 1 if i == masters - 1 else (i + 1) * per - 1
                c.execute_command("CLUSTER", "ADDSLOTSRANGE", i * per, last)
            for i in range(1, masters):
                clients[0].execute_command("CLUSTER", "MEET", LOOPBACK, ports[i], ports[masters + i])
            deadline = time.monotonic() + timeout
            while not _ready(clients):
                if time.monotonic() > deadline:
                    raise RuntimeError("redis cluster did not reach cluster_state:ok")
                time.sleep(0.1)
            yield RedisCluster(nodes)
        finally:
            for c in clients:
                c.close()
            for n in nodes:
                n.stop()

"""ZooKeeper servers from Debian's ``zookeeper`` package: one standalone node, or an N-node ensemble.

The JVM runs ``org.apache.zookeeper.server.quorum.QuorumPeerMain`` directly with a generated ``zoo.cfg``
(no init scripts, no system config): client, quorum and election ports on 127.0.0.1, the admin server
off, a short ``tickTime`` so that session timeouts in tests can be short, the four-letter words ``srvr``
and ``ruok`` allowed (the harness asks ``srvr`` who the leader is), and container nodes checked every
second (so emptied lock parents disappear quickly, as they would in production after a minute).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .proc import LOOPBACK, NetnsLink, ServerProc, free_ports, netns_link, port_open, which, workdir

#: where Debian puts the server jar (its manifest's Class-Path names the dependencies)
JARS = ("/usr/share/java/zookeeper.jar",)
#: an SLF4J binding, so the server log says something (the package ships none on its class path)
LOG_JARS = ("/usr/share/java/slf4j-simple.jar",)
#: what the Netty connection factory (the secure client port) needs beyond the jar's manifest: Debian's
#: manifest names netty-handler but not the codec module it is built on
NETTY_JARS = ("/usr/share/java/netty-codec.jar",)
TICK_MS = 200


def zookeeper_jar() -> str | None:
    for jar in JARS:
        if os.path.exists(jar):
            return jar
    return None


def available() -> bool:
    return zookeeper_jar() is not None and which("java") is not None


def four_letter(port: int, word: str, timeout: float = 2.0, host: str = LOOPBACK) -> str:
    """Send a four-letter command (``srvr``, ``ruok``) and return the reply text ('' if unreachable)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(word.encode())
            chunks = []
            while True:
                data = s.recv(4096)
                if not data:
                    break
                chunks.append(data)
        return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def server_mode(port: int, host: str = LOOPBACK) -> str | None:
    """``leader``, ``follower`` or ``standalone`` if the server is serving, else None."""
    for line in four_letter(port, "srvr", host=host).splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


@dataclass
class ZkNode:
    """One ZooKeeper server of an ensemble (or a standalone one)."""

    myid: int
    client_port: int
    quorum_port: int
    election_port: int
    dir: Path
    proc: ServerProc | None = None
    host: str = LOOPBACK  # the address it listens on (a network namespace's, for a partitionable ensemble)
    wrap: list[str] = field(default_factory=list)  # a command prefix (``ip netns exec NS``)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.client_port}"

    def mode(self) -> str | None:
        return server_mode(self.client_port, self.host)


@dataclass
class ZkEnsemble:
    """A running standalone server (one node) or quorum (several). ``url`` lists every client port."""

    nodes: list[ZkNode]
    base: Path
    java_opts: list[str] = field(default_factory=list)
    #: more ``zoo.cfg`` lines (e.g. ``secureClientPort=...``)
    extra_config: list[str] = field(default_factory=list)
    #: with :func:`partitionable_ensemble`: the link of the last node, which runs in a namespace of its own
    link: NetnsLink | None = None
    #: ticks a follower may go without hearing the leader before it leaves the quorum (its clients with it)
    sync_limit: int = 10

    @property
    def hosts(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def url(self) -> str:
        return f"zookeeper://{self.hosts}"

    def _config(self, node: ZkNode) -> str:
        lines = [
            f"tickTime={TICK_MS}",
            "initLimit=50",
            f"syncLimit={self.sync_limit}",
            f"dataDir={node.dir / 'data'}",
            f"clientPort={node.client_port}",
            f"clientPortAddress={node.host}",
            f"minSessionTimeout={2 * TICK_MS}",
            "maxSessionTimeout=60000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,stat,mntr",
            "maxClientCnxns=0",
            "autopurge.purgeInterval=0",
            "reconfigEnabled=false",
            *self.extra_config,
        ]
        if len(self.nodes) > 1:
            lines.append("standaloneEnabled=false")
            for n in self.nodes:
                lines.append(f"server.{n.myid}={n.host}:{n.quorum_port}:{n.election_port}")
        return "\n".join(lines) + "\n"

    def start_node(self, node: ZkNode, wait: bool = True, timeout: float = 90.0) -> None:
        """Start (or restart after a kill) one node; with ``wait``, return once it listens on the client port."""
        (node.dir / "data").mkdir(parents=True, exist_ok=True)
        (node.dir / "data" / "myid").write_text(f"{node.myid}\n")
        cfg = node.dir / "zoo.cfg"
        cfg.write_text(self._config(node))
        java = which("java")
        jar = zookeeper_jar()
        if java is None or jar is None:
            raise RuntimeError("ZooKeeper is not installed (scripts/install_servers.sh installs it)")
        classpath = ":".join([jar, *(j for j in (*LOG_JARS, *NETTY_JARS) if os.path.exists(j))])
        argv = [
            *node.wrap,
            java,
            "-Xms32m", "-Xmx256m",
            "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dznode.container.checkIntervalMs=1000",
            "-Dznode.container.maxPerMinute=100000",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dzookeeper.jmx.log4j.disable=true",
            *self.java_opts,
            "-cp", classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(cfg),
        ]  # fmt: skip
        node.proc = ServerProc(f"zk{node.myid}", argv, node.client_port, node.dir)
        node.proc.start(ready=(lambda: port_open(node.client_port, node.host)) if wait else (lambda: True),
                        timeout=timeout)  # fmt: skip

    def wait_serving(self, nodes: list[ZkNode] | None = None, timeout: float = 90.0) -> None:
        """Wait until every given node (default: all running ones) answers ``srvr`` with a mode."""
        wanted = nodes if nodes is not None else [n for n in self.nodes if n.proc and n.proc.alive()]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(n.mode() is not None for n in wanted):
                return
            for n in wanted:
                if n.proc is not None and not n.proc.alive():
                    raise RuntimeError(f"zk{n.myid} died:\n{n.proc.tail()}")
            time.sleep(0.1)
        tails = "\n".join(n.proc.tail(15) for n in wanted if n.proc)
        raise RuntimeError(f"ZooKeeper did not start serving in {timeout}s:\n{tails}")

    def start(self) -> ZkEnsemble:
        for node in self.nodes:  # the JVMs start in parallel; the quorum forms once all are up
            self.start_node(node, wait=False)
        self.wait_serving(self.nodes)
        return self

    def leader(self) -> ZkNode | None:
        for n in self.nodes:
            if n.proc is not None and n.proc.alive() and n.mode() in ("leader", "standalone"):
                return n
        return None

    def kill(self, node: ZkNode) -> None:
        if node.proc is not None:
            node.proc.kill()

    def restart(self, node: ZkNode) -> None:
        self.start_node(node)
        self.wait_serving([node])

    def partition(self) -> None:
        """Cut the last node off from its peers and from every client (partitionable ensembles only)."""
        assert self.link is not None
        self.link.cut()

    def heal(self) -> None:
        assert self.link is not None
        self.link.heal()

    def crash(self) -> None:
        """kill -9 of every node, then all start again on their data (a whole-ensemble crash)."""
        for node in self.nodes:
            self.kill(node)
        for node in self.nodes:
            self.start_node(node, wait=False)
        self.wait_serving(self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            if node.proc is not None:
                node.proc.stop()


def make_ensemble(base: Path, size: int, link: NetnsLink | None = None) -> ZkEnsemble:
    """``size`` nodes on loopback; with ``link``, on its host side, and the last one inside its namespace."""
    ports = free_ports(3 * size)
    nodes = [ZkNode(i + 1, ports[3 * i], ports[3 * i + 1], ports[3 * i + 2], base / f"zk{i + 1}") for i in range(size)]
    if link is not None:
        for node in nodes:
            node.host = link.host_ip
        nodes[-1].host, nodes[-1].wrap = link.ns_ip, link.exec_prefix()
    return ZkEnsemble(nodes, base, link=link)


@contextlib.contextmanager
def zookeeper_ensemble(size: int = 3, sync_limit: int = 10) -> Iterator[ZkEnsemble]:
    """``size`` = 1: a standalone server; 3: a quorum on loopback. Stopped and removed afterwards.

    ``sync_limit`` (ticks of 200 ms): how long a follower that has not heard the leader stays in the quorum.
    10 (2 s) lets the fault tests see a lost leader soon; an ensemble that many tests share on a busy
    machine wants more, or a follower starved of CPU for 2 s drops every client connected to it."""
    with workdir("zookeeper") as d:
        ens = make_ensemble(d, size)
        ens.sync_limit = sync_limit
        try:
            ens.start()
            yield ens
        finally:
            ens.stop()


@contextlib.contextmanager
def partitionable_ensemble(size: int = 3) -> Iterator[ZkEnsemble]:
    """A quorum whose last node is behind a link :meth:`ZkEnsemble.partition` cuts (root only, iproute2)."""
    with workdir("zookeeper-netns") as d, netns_link() as link:
        ens = make_ensemble(d, size, link)
        try:
            ens.start()
            yield ens
        finally:
            ens.stop()

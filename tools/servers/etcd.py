"""etcd processes on loopback: one node, or a 3-member cluster (kill / pause / restart members by PID).

``etcd_cluster(..., root_password=PW, auth_token_ttl=S)`` starts it with authentication on (a ``root`` user
with that password, simple tokens that expire after S seconds); :meth:`EtcdCluster.add_user` then creates
a user whose role grants read-write on key prefixes only (what an operator would give one tenant).
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .proc import LOOPBACK, NetnsLink, ServerProc, free_ports, netns_link, which, workdir


def etcd_binary() -> str | None:
    return which("etcd")


def etcdctl_binary() -> str | None:
    return which("etcdctl")


def post(
    port: int,
    path: str,
    body: Mapping[str, object],
    timeout: float = 1.0,
    host: str = LOOPBACK,
    token: str | None = None,
) -> dict[str, object]:
    """POST to the JSON gateway; an error answer (HTTP 4xx, e.g. permission denied) is returned as its JSON."""
    req = urllib.request.Request(f"http://{host}:{port}{path}", data=json.dumps(body).encode(), method="POST")
    if token:
        req.add_header("Authorization", token)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, never a proxy
    try:
        with opener.open(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:
            raise
        raw = exc.read()
    data: dict[str, object] = json.loads(raw or b"{}")
    return data


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range of ``prefix`` (etcd's ``GetPrefixRangeEnd``; ``prefix`` not all 0xff)."""
    end = bytearray(prefix)
    while end and end[-1] == 0xFF:
        end.pop()
    end[-1] += 1
    return bytes(end)


@dataclass
class EtcdCluster:
    """Members started from the installed ``etcd`` binary; ``url`` lists every client endpoint."""

    dir: Path
    members: list[ServerProc] = field(default_factory=list)
    peer_ports: list[int] = field(default_factory=list)
    argvs: list[list[str]] = field(default_factory=list)
    root_password: str | None = field(default=None, repr=False)  # set once auth is on

    # -- authentication ----------------------------------------------------------------------------------
    def token(self, user: str, password: str, i: int = 0) -> str:
        """A fresh auth token of ``user`` (asked of member ``i``)."""
        data = post(self.members[i].port, "/v3/auth/authenticate", {"name": user, "password": password},
                    host=self.host(i))  # fmt: skip
        token = data.get("token")
        if not isinstance(token, str):
            raise RuntimeError(f"etcd authentication of {user!r} failed: {data.get('error')}")
        return token

    def admin(self, path: str, body: Mapping[str, object], i: int = 0) -> dict[str, object]:
        """A request as ``root`` (a fresh token each time: the tests use tokens that expire in seconds)."""
        token = self.token("root", self.root_password, i) if self.root_password is not None else None
        return post(self.members[i].port, path, body, timeout=5.0, host=self.host(i), token=token)

    def enable_auth(self, root_password: str) -> None:
        """Create ``root`` (role ``root``) and turn authentication on."""
        port, host = self.members[0].port, self.host(0)
        for path, body in (
            ("/v3/auth/role/add", {"name": "root"}),
            ("/v3/auth/user/add", {"name": "root", "password": root_password}),
            ("/v3/auth/user/grant", {"user": "root", "role": "root"}),
            ("/v3/auth/enable", {}),
        ):
            data = post(port, path, body, timeout=5.0, host=host)
            if "error" in data:
                raise RuntimeError(f"etcd {path}: {data['error']}")
        self.root_password = root_password

    def add_user(self, user: str, password: str, prefixes: Sequence[str], perm: str = "READWRITE") -> None:
        """A user with a role of its own (named like the user) granting ``perm`` on each key prefix only,
        like ``etcdctl role grant-permission --prefix=true ROLE readwrite PREFIX``."""
        steps: list[tuple[str, dict[str, object]]] = [("/v3/auth/role/add", {"name": user})]
        for prefix in prefixes:
            raw = prefix.encode("utf-8")
            perm_body = {"permType": perm, "key": _b64(raw), "range_end": _b64(prefix_end(raw))}
            steps.append(("/v3/auth/role/grant", {"name": user, "perm": perm_body}))
        steps.append(("/v3/auth/user/add", {"name": user, "password": password}))
        steps.append(("/v3/auth/user/grant", {"user": user, "role": user}))
        for path, body in steps:
            data = self.admin(path, body)
            if "error" in data:
                raise RuntimeError(f"etcd {path}: {data['error']}")

    def auth_url(self, user: str, password: str) -> str:
        """The store URL of ``user`` (every member)."""
        return f"etcd://{user}:{password}@" + self.url.split("://", 1)[1]

    @property
    def url(self) -> str:
        return "etcd://" + ",".join(f"{LOOPBACK}:{m.port}" for m in self.members)

    def host(self, i: int) -> str:
        return LOOPBACK

    def status(self, i: int) -> dict[str, object]:
        return post(self.members[i].port, "/v3/maintenance/status", {}, host=self.host(i))

    def member_id(self, i: int) -> str:
        return str(self.status(i)["header"]["member_id"])  # type: ignore[index]

    def leader_index(self) -> int | None:
        """Which member is the leader now (asked of each live member), or None if none knows."""
        for i, m in enumerate(self.members):
            if not m.alive():
                continue
            try:
                st = self.status(i)
            except OSError:
                continue
            leader = str(st.get("leader", ""))
            for j in range(len(self.members)):
                if not self.members[j].alive():
                    continue
                try:
                    if str(self.status(j)["header"]["member_id"]) == leader:  # type: ignore[index]
                        return j
                except (OSError, KeyError, TypeError):
                    continue
        return None

    def restart(self, i: int) -> None:
        m = self.members[i]
        m.stop()
        m.proc = None
        m.start(ready=lambda: True)
        _wait_ready(m, host=self.host(i))

    def crash(self) -> None:
        """kill -9 of every member, then all start again on their data (a whole-cluster crash)."""
        for m in self.members:
            m.kill()
        for m in self.members:  # members of a cluster wait for each other: start all, then wait for each
            m.start(ready=lambda: True)
        for i, m in enumerate(self.members):
            _wait_ready(m, host=self.host(i))

    def stop(self) -> None:
        for m in self.members:
            m.stop()


def client_ports(url: str) -> list[int]:
    """The client ports of an ``etcd://127.0.0.1:P1,127.0.0.1:P2`` URL (tests talk to loopback only)."""
    hosts = url.split("://", 1)[1].split("/", 1)[0].split("@")[-1]
    return [int(h.rsplit(":", 1)[1]) for h in hosts.split(",")]


def endpoints(url: str) -> str:
    """The ``--endpoints`` value for etcdctl."""
    return ",".join(f"{LOOPBACK}:{p}" for p in client_ports(url))


def _healthy(port: int, host: str = LOOPBACK) -> bool:
    """A linearizable read went through (with auth on, it is refused only after the read-index wait)."""
    data = post(port, "/v3/kv/range", {"key": "AA=="}, timeout=0.5, host=host)
    return "header" in data or "user name is empty" in str(data.get("error", ""))


def start_cluster(d: Path, size: int, extra: Sequence[str] = (), fsync: bool = False) -> EtcdCluster:
    binary = etcd_binary()
    if binary is None:
        raise RuntimeError("etcd is not installed (scripts/install_servers.sh installs it)")
    ports = free_ports(2 * size)
    client_ports, peer_ports = ports[:size], ports[size:]
    names = [f"n{i + 1}" for i in range(size)]
    initial = ",".join(f"{n}=http://{LOOPBACK}:{p}" for n, p in zip(names, peer_ports, strict=True))
    cluster = EtcdCluster(d, peer_ports=peer_ports)
    for n, cp, pp in zip(names, client_ports, peer_ports, strict=True):
        data = d / n
        data.mkdir(parents=True, exist_ok=True)
        argv = [
            binary,
            "--name", n,
            "--data-dir", str(data / "data"),
            "--listen-client-urls", f"http://{LOOPBACK}:{cp}",
            "--advertise-client-urls", f"http://{LOOPBACK}:{cp}",
            "--listen-peer-urls", f"http://{LOOPBACK}:{pp}",
            "--initial-advertise-peer-urls", f"http://{LOOPBACK}:{pp}",
            "--initial-cluster", initial,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", f"distlock-{d.name}",
            "--heartbeat-interval", "50",
            "--election-timeout", "500",
            *([] if fsync else ["--unsafe-no-fsync"]),  # test data is thrown away: fast on slow CI disks
            "--logger", "zap",
            "--log-outputs", "stderr",
            *extra,
        ]  # fmt: skip
        srv = ServerProc(n, argv, cp, data)
        srv.url = f"etcd://{LOOPBACK}:{cp}"
        cluster.members.append(srv)
        cluster.argvs.append(argv)
    # members of a new cluster wait for each other: start all, then wait for each to serve
    for m in cluster.members:
        m.start(ready=lambda: True)
    try:
        for m in cluster.members:
            _wait_ready(m)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_ready(m: ServerProc, timeout: float = 60.0, host: str = LOOPBACK) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not m.alive():
            raise RuntimeError(f"{m.name} exited:\n{m.tail()}")
        try:
            if _healthy(m.port, host):
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{m.name} did not become ready in {timeout}s:\n{m.tail()}")


@contextlib.contextmanager
def etcd_cluster(
    size: int = 3,
    extra: Sequence[str] = (),
    fsync: bool = False,
    root_password: str | None = None,
    auth_token_ttl: int | None = None,
) -> Iterator[EtcdCluster]:
    """A cluster for the duration of the block; with ``root_password`` authentication is on, with
    ``auth_token_ttl`` simple tokens expire after that many seconds (etcd's default: 300)."""
    if auth_token_ttl is not None:
        extra = (*extra, "--auth-token-ttl", str(auth_token_ttl))
    with workdir("etcd") as d:
        cluster = start_cluster(d, size, extra, fsync)
        try:
            if root_password is not None:
                cluster.enable_auth(root_password)
            yield cluster
        finally:
            cluster.stop()


# -- one member behind a link we can cut (network partition) ------------------------------------------
@dataclass
class PartitionableCluster(EtcdCluster):
    """Members 0..n-2 on the host side of a veth pair, member n-1 in its own network namespace.

    Every member listens on an address of that private /30 link (nothing else can reach it);
    :meth:`partition` takes the link down, cutting the last member off from its peers and from clients.
    """

    link: NetnsLink | None = None
    addrs: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "etcd://" + ",".join(f"{a}:{m.port}" for a, m in zip(self.addrs, self.members, strict=True))

    def host(self, i: int) -> str:
        return self.addrs[i]

    def partition(self) -> None:
        assert self.link is not None
        self.link.cut()

    def heal(self) -> None:
        assert self.link is not None
        self.link.heal()


@contextlib.contextmanager
def partitionable_cluster(size: int = 3, fsync: bool = False) -> Iterator[PartitionableCluster]:
    binary = etcd_binary()
    if binary is None:
        raise RuntimeError("etcd is not installed")
    with workdir("etcd-netns") as d, netns_link() as link:
        cluster = PartitionableCluster(d, link=link)
        tag = link.netns
        host_ip, ns_ip = link.host_ip, link.ns_ip
        try:
            ports = free_ports(2 * size)
            cluster.addrs = [host_ip] * (size - 1) + [ns_ip]
            names = [f"n{i + 1}" for i in range(size)]
            peer = [f"http://{a}:{p}" for a, p in zip(cluster.addrs, ports[size:], strict=True)]
            initial = ",".join(f"{n}={u}" for n, u in zip(names, peer, strict=True))
            for i, n in enumerate(names):
                data = d / n
                data.mkdir()
                client = f"http://{cluster.addrs[i]}:{ports[i]}"
                argv = [
                    binary, "--name", n, "--data-dir", str(data / "data"),
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer[i], "--initial-advertise-peer-urls", peer[i],
                    "--initial-cluster", initial, "--initial-cluster-state", "new",
                    "--initial-cluster-token", f"distlock-{tag}",
                    "--heartbeat-interval", "50", "--election-timeout", "500",
                    *([] if fsync else ["--unsafe-no-fsync"]), "--logger", "zap", "--log-outputs", "stderr",
                ]  # fmt: skip
                if i == size - 1:
                    argv = [*link.exec_prefix(), *argv]
                cluster.members.append(ServerProc(n, argv, ports[i], data))
            for m in cluster.members:
                m.start(ready=lambda: True)
            for m, a in zip(cluster.members, cluster.addrs, strict=True):
                _wait_ready(m, host=a)
            yield cluster
        finally:
            cluster.stop()


# -- one member serving clients over TLS (etcds://) ---------------------------------------------------
@contextlib.contextmanager
def etcd_tls_member(
    cert: Path, key: Path, ca: Path, client: tuple[Path, Path] | None = None
) -> Iterator[ServerProc]:
    """One member whose client port speaks HTTPS only, with the server certificate ``cert``/``key`` signed by
    ``ca`` (files the caller made). With ``client`` (a certificate and key also signed by ``ca``), the member
    requires a client certificate signed by ``ca`` (mutual TLS) and the readiness check presents that one."""
    binary = etcd_binary()
    if binary is None:
        raise RuntimeError("etcd is not installed (scripts/install_servers.sh installs it)")
    with workdir("etcd-tls") as d:
        cp, pp = free_ports(2)
        url, peer = f"https://{LOOPBACK}:{cp}", f"http://{LOOPBACK}:{pp}"
        mutual = ["--client-cert-auth", "--trusted-ca-file", str(ca)] if client is not None else []
        argv = [
            binary, "--name", "tls", "--data-dir", str(d / "data"),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"tls={peer}", "--cert-file", str(cert), "--key-file", str(key), *mutual,
            "--unsafe-no-fsync", "--logger", "zap", "--log-outputs", "stderr",
        ]  # fmt: skip
        ctx = ssl.create_default_context(cafile=str(ca))
        if client is not None:
            ctx.load_cert_chain(str(client[0]), str(client[1]))

        def ready() -> bool:
            req = urllib.request.Request(url + "/v3/kv/range", data=b'{"key":"AA=="}', method="POST")
            opener = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx)
            )
            with opener.open(req, timeout=0.5) as resp:
                return b"header" in resp.read()

        srv = ServerProc("tls", argv, cp, d)
        srv.url = f"etcds://{LOOPBACK}:{cp}"
        srv.start(ready=ready)
        try:
            yield srv
        finally:
            srv.stop()

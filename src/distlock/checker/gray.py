"""Gray link faults for ``distlock check``: every worker talks to the servers through loopback proxies of its own.

``freeze``, ``half-open`` and ``slow`` break one worker's links and nobody else's, the way a flaky NIC, a
NAT that forgot a flow or an overloaded path breaks one client: the sockets stay open, no FIN, no RST. So
each worker connects through its own ``FaultProxy`` per server address from
the moment it starts (a fault can only be injected into a link that already goes through a proxy), and
the injector freezes, half-opens or slows the proxies of the worker it targets.

``proxied_url`` rewrites a store URL's host list to the proxies' addresses, for every scheme that has a
network link; ``link_hosts`` says which addresses a URL connects to (and refuses the schemes that have
none: sqlite, memory, redis over a unix socket).

A Redis Cluster or Sentinel URL names only seeds or sentinels; the data nodes are announced by the deployment.
``data_nodes`` asks it for every one (masters and replicas, once, before the run), each worker gets a proxy per
data node too, and its URL maps the announced addresses to them (the store's ``remap`` option), so a fault
breaks the worker's links to the master that holds its locks, not only to the sentinels or the seed.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .._errors import ConfigError
from .._url import DEFAULT_PORTS, parse_url
from .proxy import FaultProxy

GRAY_FAULTS = ("freeze", "half-open", "slow")

_URL = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<netloc>[^/?#]*)(?P<rest>.*)$", re.S)
#: libpq query options that name the server themselves (and would bypass the host list)
_PG_HOST_PARAMS = ("host", "hostaddr", "port")


def link_hosts(url: str | None) -> list[tuple[str, int]]:
    """The ``(host, port)`` addresses the store of ``url`` connects to, in URL order.

    ``ConfigError`` (one line) for a store that has no network link to break: sqlite, memory, a Unix
    socket, or a PostgreSQL URL that names its server in the query string."""
    config = parse_url(url)
    if config.backend not in DEFAULT_PORTS or config.scheme == "unix":
        raise ConfigError(
            f"the gray link faults ({', '.join(GRAY_FAULTS)}) need a store reached over TCP; "
            f"{config.scheme}:// has no network link to break"
        )
    if config.backend == "postgres":
        query = dict(parse_qsl(urlsplit(config.url).query, keep_blank_values=True))
        named = [k for k in _PG_HOST_PARAMS if k in query]
        if named:
            raise ConfigError(f"the gray link faults need the server in the URL's host list, not in ?{named[0]}=")
    return list(config.hosts)


def data_nodes(url: str) -> list[tuple[str, int]]:
    """The data nodes a Redis Cluster (its seed's ``CLUSTER NODES`` through redis-py's cluster client) or a
    Sentinel-managed service (its master and replicas) announce; none for any other URL, or one that already
    maps addresses itself (``remap``)."""
    from redis.exceptions import RedisClusterException, RedisError

    from .._backends.redis._sync import options as ro

    config = parse_url(url)
    if config.backend != "redis" or config.scheme == "unix" or "remap" in config.params:
        return []
    driver = ro.driver_url(config)
    found: list[tuple[str, int]] = []
    try:
        if ro.is_sentinel(config.scheme):
            client: Any = ro.connect(driver, socket_connect_timeout=5.0, socket_timeout=5.0)
            pool = client.connection_pool
            manager, service = pool.sentinel_manager, pool.service_name
            found = [manager.discover_master(service), *manager.discover_slaves(service)]
        else:
            client = ro.connect(driver, socket_connect_timeout=5.0, socket_timeout=5.0)
            if str(client.info("cluster").get("cluster_enabled")) == "1":
                client.close()
                client = ro.connect_cluster(driver, socket_connect_timeout=5.0, socket_timeout=5.0)
                found = [(n.host, n.port) for n in client.get_nodes()]
        client.close()
    except (RedisError, RedisClusterException, OSError) as exc:
        raise ConfigError(f"the gray link faults could not list the deployment's data nodes: {exc}") from None
    return [(str(h), int(p)) for h, p in dict.fromkeys(found)]


def _format(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def proxied_url(url: str, addresses: list[tuple[str, int]]) -> str:
    """``url`` with its host list replaced by ``addresses`` (one per host of ``link_hosts``, in order).

    Everything else is kept as written: scheme, user and password, database, chroot, query."""
    hosts = link_hosts(url)
    if len(addresses) != len(hosts):
        raise ValueError(f"{len(hosts)} host(s) in the URL, {len(addresses)} address(es) given")
    m = _URL.match(url)
    if m is None:  # parse_url accepted it, so this cannot happen
        raise ConfigError("not a store URL")
    netloc = m.group("netloc")
    userinfo, at, _ = netloc.rpartition("@")
    new = ",".join(_format(h, p) for h, p in addresses)
    return f"{m.group('scheme')}{userinfo}{at}{new}{m.group('rest')}"


class WorkerLinks:
    """The proxies of one worker: one ``FaultProxy`` per server address of the URL, and one per announced
    data node (``nodes``: ``data_nodes``), which the worker's URL maps to them (``remap``)."""

    def __init__(self, url: str, nodes: Sequence[tuple[str, int]] = ()) -> None:
        hosts = link_hosts(url)
        self.proxies = [FaultProxy(h, p) for h, p in [*hosts, *nodes]]
        try:
            for p in self.proxies:
                p.start()
        except BaseException:
            self.close()
            raise
        self.url = proxied_url(url, [("127.0.0.1", p.port) for p in self.proxies[: len(hosts)]])
        if nodes:
            remap = ",".join(
                f"{_format(h, port)}={_format('127.0.0.1', p.port)}"
                for (h, port), p in zip(nodes, self.proxies[len(hosts) :], strict=True)
            )
            self.url += ("&" if "?" in self.url else "?") + "remap=" + remap

    def freeze(self) -> None:
        for p in self.proxies:
            p.freeze()

    def half_open(self) -> int:
        return sum(p.half_open() for p in self.proxies)

    def slow(self, seconds: float) -> None:
        for p in self.proxies:
            p.delay(seconds)

    def heal(self) -> None:
        for p in self.proxies:
            p.heal()

    def close(self) -> None:
        for p in self.proxies:
            with contextlib.suppress(Exception):
                p.close()


class Links:
    """Proxies per worker slot. A worker that was killed leaves its proxies to the worker started in its
    place, so a run with many kills does not pile up proxy threads."""

    def __init__(self, url: str) -> None:
        link_hosts(url)  # refuse a URL without a link before anything starts
        self.base = url
        self.nodes = data_nodes(url)
        self.by_worker: dict[int, WorkerLinks] = {}
        self.free: list[WorkerLinks] = []

    def url_for(self, worker: int) -> str:
        links = self.free.pop() if self.free else WorkerLinks(self.base, self.nodes)
        links.heal()
        self.by_worker[worker] = links
        return links.url

    def retire(self, worker: int) -> None:
        """The worker is gone (killed): its proxies go back to the pool."""
        links = self.by_worker.pop(worker, None)
        if links is not None:
            links.heal()
            self.free.append(links)

    def __getitem__(self, worker: int) -> WorkerLinks:
        return self.by_worker[worker]

    def close(self) -> None:
        for links in [*self.by_worker.values(), *self.free]:
            links.close()
        self.by_worker.clear()
        self.free.clear()


__all__ = ["GRAY_FAULTS", "Links", "WorkerLinks", "data_nodes", "link_hosts", "proxied_url"]

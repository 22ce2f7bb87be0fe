"""From a store's URL (or the caller's redis-py client) to what the Redis backends connect with.

Our own URL options are read here (``connect_timeout``, ``socket_timeout``, ``cluster``, ``fence_counter``;
``wait_replicas``/``wait_timeout`` and Redlock's ``node_timeout`` are read by the backend that has them), the
rest is passed to redis-py when it is one of redis-py's own URL options (``ssl_*``, ``client_name``, ...) and
refused as a typo otherwise. ``connect`` and ``connect_cluster`` make the client from a URL,
``derive`` makes distlock's own client for ``connect(client=...)``.

Sentinel (``redis+sentinel://[user:pw@]s1:26379,s2:26379/<service>[/db]``): the client is redis-py's
``Sentinel(...).master_for(service)``. Its connections ask the sentinels for the master's address each time
one is made, and a connection that meets a read-only reply (the master it was on was demoted) is dropped
and made again, so distlock's own request path (``wire.py``, connections made like the pool's) and the
wake-up listener follow a failover the same way redis-py's own commands do. The URL's user and password are
the master's (``requirepass``/ACL of the data nodes); the sentinels' own are ``sentinel_username`` and
``sentinel_password`` (redis-py keeps the two apart: ``sentinel_kwargs``), unset by default. TLS
(``rediss+sentinel://``, or ``tls=true`` with the common options) applies to both: the sentinels and the
data nodes of one deployment are configured alike (``tls-port``, and ``tls-replication`` so the sentinels
reach the data nodes over TLS too), and a client that spoke plain text to either would be refused.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

from redis.backoff import ExponentialBackoff, NoBackoff
from redis.connection import URL_QUERY_ARGUMENT_PARSERS
from redis.exceptions import AskError, ClusterDownError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .... import _rt_async as rt
from ...._errors import ConfigError
from ...._url import StoreConfig, parse_url
from .. import _driver_async as drv
from .. import keys as rk
from ..remap import Remap, remapper
from ..tls import tls_options

#: a cluster call on distlock's own connection that meets one of these goes through redis-py's routing
#: instead (it follows MOVED/ASK, refreshes the slot map, waits out a failover)
REROUTE = (AskError, TryAgainError, ClusterDownError, RedisConnectionError, RedisTimeoutError, RedisClusterException)


#: the URL scheme of Redis behind Sentinel, and its TLS form
SENTINEL = "redis+sentinel"
SENTINEL_TLS = "rediss+sentinel"
#: URL options for the sentinels' own connections (the URL's userinfo is the master's)
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")
SENTINEL_FORM = "redis+sentinel://[user:pw@]s1:26379,s2:26379/<service>[/db]"


def is_sentinel(scheme: str) -> bool:
    return scheme.lower() in (SENTINEL, SENTINEL_TLS)


def connect(url: str, max_connections: int = 4096, remap: Remap | None = None, **kwargs: Any) -> drv.Client:
    """A client for one server; one retry on a broken pooled connection, no backoff (bounded waits).

    A plain pool (a blocking pool costs ~15 us more per command); ``max_connections`` is far above
    redis.asyncio's default of 100, so a hundred tasks contending in one process do not get "Too many
    connections" (redis-py's own ``max_connections`` URL option overrides it).
    """
    if is_sentinel(url.split("://", 1)[0]):
        return connect_sentinel(url, max_connections, remap=remap or {}, **kwargs)
    retry = drv.Retry(NoBackoff(), 1)
    pool = drv.ConnectionPool.from_url(url, max_connections=max_connections, retry=retry, **kwargs)
    client: drv.Client = drv.Client.from_pool(pool)
    return client


class RemappedSentinel(drv.Sentinel):
    """redis-py's ``Sentinel`` whose master lookups answer the address this client reaches the master at
    (``remap``): every connection to the master asks ``discover_master``, so all of them follow the map."""

    def __init__(self, *args: Any, remap: Remap, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.remap = remap

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        host, port = await super().discover_master(service_name)
        return self.remap.get((host, int(port)), (host, port))


def connect_sentinel(
    url: str, max_connections: int, socket_connect_timeout: float, socket_timeout: float, remap: Remap
) -> drv.Client:
    """The master of a Sentinel-managed service: redis-py's ``Sentinel(...).master_for(service)`` with
    distlock's timeouts and retry on both the sentinels' and the master's connections, and TLS on both when
    the URL is ``rediss+sentinel://`` (the ``ssl_*`` options ``driver_url`` made of the common ones).
    Bad input is a ``ValueError`` (the caller makes it a ``ConfigError``); nothing is connected yet."""
    config = parse_url(url)
    service, db = _service_and_db(config)
    opts = {k: config.params.pop(k) for k in SENTINEL_OPTIONS if k in config.params}
    if "db" in config.params:
        db = _int("db", config.params.pop("db"))
    extra: dict[str, Any] = {"max_connections": max_connections}
    for key, raw in config.params.items():  # redis-py's own URL options, parsed as redis-py's from_url does
        parser: Any = URL_QUERY_ARGUMENT_PARSERS.get(key)
        extra[key] = parser(raw) if parser is not None and raw != "" else raw
    tls = {k: extra.pop(k) for k in list(extra) if k.startswith("ssl")}
    if tls and not config.tls:
        raise ValueError(f"URL option(s) {', '.join(sorted(tls))} need TLS: add tls=true (or use {SENTINEL_TLS}://)")
    if config.tls:
        tls["ssl"] = True
    timeouts = {"socket_connect_timeout": socket_connect_timeout, "socket_timeout": socket_timeout}
    sentinel_kwargs: dict[str, Any] = {**timeouts, **tls, "retry": drv.Retry(NoBackoff(), 1)}
    if opts.get("sentinel_username"):
        sentinel_kwargs["username"] = opts["sentinel_username"]
    if opts.get("sentinel_password"):
        sentinel_kwargs["password"] = opts["sentinel_password"]
    manager: Any = RemappedSentinel(config.hosts, sentinel_kwargs=sentinel_kwargs, remap=remap)  # (loosely typed)
    client: drv.Client = manager.master_for(
        service,
        redis_class=drv.Client,
        username=config.username,
        password=config.password,
        db=db,
        retry=drv.Retry(NoBackoff(), 1),
        **timeouts,
        **tls,
        **extra,
    )
    return client


def _service_and_db(config: StoreConfig) -> tuple[str, int]:
    """``/<service>[/db]`` of a ``redis+sentinel://`` URL."""
    parts = [unquote(p) for p in urlsplit(config.url).path.split("/") if p]
    if not config.hosts or not parts or len(parts) > 2:
        raise ValueError(f"a Sentinel URL names the sentinels and the master's service: {SENTINEL_FORM}")
    return parts[0], _int("db", parts[1]) if len(parts) == 2 else 0


def _int(what: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{what} {raw!r} is not a number ({SENTINEL_FORM})") from None
    if value < 0:
        raise ValueError(f"{what} {raw!r} must be >= 0")
    return value


async def connect_cluster(
    url: str, max_connections: int = 4096, remap: Remap | None = None, **kwargs: Any
) -> drv.ClusterClient:
    """A Redis Cluster client seeded by the URL's host (it discovers the other nodes and the slot map).

    redis-py follows ``MOVED``/``ASK`` redirections and re-reads the slot map; its retries on a node that
    went away are bounded (3, at most 0.2 s apart) so a failed acquire is an error within seconds, not a
    hang. A seed that is not a cluster node, or no reachable node, raises ``ConnectionError``.
    """
    try:
        client: drv.ClusterClient = drv.ClusterClient.from_url(
            url,
            max_connections=max_connections,
            retry=drv.Retry(ExponentialBackoff(cap=0.2, base=0.02), 3),
            address_remap=remapper(remap or {}),
            **kwargs,
        )
        await drv.initialize(client)
    except RedisClusterException as exc:  # not a RedisError: say "cannot connect" like the plain client
        raise RedisConnectionError(str(exc)) from exc
    return client


def driver_url(config: StoreConfig, host: tuple[str, int] | None = None) -> str:
    """The URL for redis-py: our own options removed, redis-py's own query options kept."""
    tls_options(config)
    parts = urlsplit(config.url)
    scheme = "rediss" if config.tls and parts.scheme.lower() == "redis" else parts.scheme.lower()
    if is_sentinel(scheme):
        scheme = SENTINEL_TLS if config.tls else SENTINEL
    netloc = parts.netloc
    if host is not None:  # one master of a redlock:// URL
        scheme = "rediss" if config.tls else "redis"
        userinfo = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
        h, p = host
        netloc = f"{userinfo}[{h}]:{p}" if ":" in h else f"{userinfo}{h}:{p}"
    passthrough = {k: v for k, v in config.params.items() if _is_driver_option(k, config.scheme)}
    query = urlencode(passthrough)
    return f"{scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def _is_driver_option(key: str, scheme: str) -> bool:
    if is_sentinel(scheme) and key in SENTINEL_OPTIONS:
        return True
    return key in URL_QUERY_ARGUMENT_PARSERS or key.startswith("ssl_") or key in ("client_name", "db")


def reject_unknown(config: StoreConfig) -> None:
    """redis-py's own URL options were passed on by ``driver_url``; anything else is a typo."""
    for key in [k for k in config.params if _is_driver_option(k, config.scheme)]:
        config.params.pop(key)
    driver = [*URL_QUERY_ARGUMENT_PARSERS, "client_name", "db"]
    config.reject_unknown([*driver, *SENTINEL_OPTIONS] if is_sentinel(config.scheme) else driver)


def timeouts(config: StoreConfig) -> tuple[float, float]:
    return config.pop_float("connect_timeout", 5.0), config.pop_float("socket_timeout", 5.0)


def fence_counter(config: StoreConfig) -> str:
    """URL option ``fence_counter``: the key of the store's fence counter (default ``distlock:fences``). Every
    store of one tenant must name the same one (two counters hand out fences independently)."""
    counter = config.pop("fence_counter", rk.NODE_COUNTER)
    assert counter is not None
    bad = rk.check_counter(counter, False)  # braces are refused once the server turns out to be a cluster
    if bad is not None:
        raise ConfigError(bad, backend=config.scheme)
    return counter


def cluster_option(config: StoreConfig) -> bool | None:
    """``cluster=auto`` (default: ask the seed) -> None; ``true``/``false`` -> forced. Sentinel manages a
    master and its replicas, never a cluster: False (``cluster=true`` is refused)."""
    raw = config.params.get("cluster")
    if is_sentinel(config.scheme):
        if config.pop_bool("cluster", False):
            raise ConfigError(
                f"{config.scheme}:// is a Sentinel-managed master, not a Redis Cluster", backend=config.scheme
            )
        return False
    if raw is None or raw.lower() == "auto":
        config.params.pop("cluster", None)
        return None
    return config.pop_bool("cluster", False)


GIVEN_CLUSTER = (
    "the given redis-py client's server is a Redis Cluster node: give a redis:// URL of it instead "
    "(distlock makes its own cluster client)"
)

#: what a caller of this side of the API gives ``connect(client=...)``
_WANT = (
    "the asyncio store (distlock.connect_async) needs a redis.asyncio.Redis client or redis.asyncio.ConnectionPool; "
    "a redis.Redis client goes to distlock.connect()"
    if rt.IS_ASYNC
    else "the sync store (distlock.connect) needs a redis.Redis client or redis.ConnectionPool; a redis.asyncio "
    "client goes to distlock.connect_async()"
)


def derive(given: object, connect_timeout: float, socket_timeout: float, max_connections: int = 4096) -> drv.Client:
    """distlock's own client for ``connect(client=...)``: the connection parameters of the caller's client or
    pool (host or socket, TLS, credentials, db, protocol) with distlock's timeouts and retry, in a pool of its
    own. The caller's object is only read: none of its connections is used, nothing of it is closed.

    A Sentinel-managed client or pool (``Sentinel.master_for``) gives a Sentinel-managed client of distlock's
    own, on sentinel connections of its own. A client of the other side, a cluster client, a Sentinel
    replica pool or anything else is a ``ValueError`` whose text says what is needed."""
    pool: Any = given.connection_pool if isinstance(given, drv.Client) else given
    if not isinstance(pool, drv.ConnectionPool):
        kind = f"{type(given).__module__}.{type(given).__qualname__}"
        if isinstance(given, drv.ClusterClient) or "Cluster" in type(given).__name__:
            raise ValueError(
                f"a Redis Cluster client ({kind}) is not taken: give a redis:// URL of one node instead "
                "(distlock makes its own cluster client)"
            )
        raise ValueError(f"{_WANT}; got a {kind}")
    if isinstance(getattr(pool, "sentinel_manager", None), drv.Sentinel):
        return _derive_sentinel(pool, connect_timeout, socket_timeout, max_connections)
    kwargs = {
        **pool.connection_kwargs,
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        "retry": drv.Retry(NoBackoff(), 1),
    }
    own = drv.ConnectionPool(connection_class=pool.connection_class, max_connections=max_connections, **kwargs)
    client: drv.Client = drv.Client.from_pool(own)
    return client


def _derive_sentinel(pool: Any, connect_timeout: float, socket_timeout: float, max_connections: int) -> drv.Client:
    """``derive`` for a ``master_for`` pool: the same sentinels (their connection settings, ``min_other_sentinels``,
    ``force_master_ip``), service and master connection settings, with distlock's timeouts and retry."""
    if not pool.is_master:
        raise ValueError(
            f"a Sentinel replica pool (slave_for) is not taken: locks are written on the master; give "
            f"Sentinel.master_for({pool.service_name!r}) or a {SENTINEL}:// URL"
        )
    manager: Any = pool.sentinel_manager
    hosts = [
        (s.connection_pool.connection_kwargs["host"], s.connection_pool.connection_kwargs["port"])
        for s in manager.sentinels
    ]
    timeouts = {"socket_connect_timeout": connect_timeout, "socket_timeout": socket_timeout}
    retry = {"retry": drv.Retry(NoBackoff(), 1)}
    sentinel: Any = drv.Sentinel  # redis-py's Sentinel is untyped
    own = sentinel(
        hosts,
        min_other_sentinels=manager.min_other_sentinels,
        sentinel_kwargs={**manager.sentinel_kwargs, **timeouts, **retry},
        force_master_ip=getattr(manager, "_force_master_ip", None),
    )
    skip = ("connection_pool", "socket_connect_timeout", "socket_timeout", "retry")
    kwargs = {k: v for k, v in pool.connection_kwargs.items() if k not in skip}
    client: drv.Client = own.master_for(
        pool.service_name,
        redis_class=drv.Client,
        connection_class=pool.connection_class,
        max_connections=max_connections,
        **kwargs,
        **timeouts,
        **retry,
    )
    return client

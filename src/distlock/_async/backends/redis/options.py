"""From a store's URL (or the caller's redis-py client) to what the Redis backends connect with.

Our own URL options are read here (``connect_timeout``, ``socket_timeout``, ``cluster``, ``fence_counter``;
``wait_replicas``/``wait_timeout`` and Redlock's ``node_timeout`` are read by the backend that has them), the
rest is passed to redis-py when it is one of redis-py's own URL options (``ssl_*``, ``client_name``, ...) and
refused as a typo otherwise. :func:`connect` and :func:`connect_cluster` make the client from a URL,
:func:`derive` makes distlock's own client for ``connect(client=...)``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode, urlsplit

from redis.backoff import ExponentialBackoff, NoBackoff
from redis.connection import URL_QUERY_ARGUMENT_PARSERS
from redis.exceptions import AskError, ClusterDownError, RedisClusterException, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from .... import _redis_async as drv
from .... import _rt_async as rt
from ...._core import redis_keys as rk
from ...._errors import ConfigError
from ...._url import StoreConfig

#: a cluster call on distlock's own connection that meets one of these goes through redis-py's routing
#: instead (it follows MOVED/ASK, refreshes the slot map, waits out a failover)
REROUTE = (AskError, TryAgainError, ClusterDownError, RedisConnectionError, RedisTimeoutError, RedisClusterException)


def connect(url: str, max_connections: int = 4096, **kwargs: Any) -> drv.Client:
    """A client for one server; one retry on a broken pooled connection, no backoff (bounded waits).

    A plain pool (a blocking pool costs ~15 us more per command); ``max_connections`` is far above
    redis.asyncio's default of 100, so a hundred tasks contending in one process do not get "Too many
    connections" (redis-py's own ``max_connections`` URL option overrides it).
    """
    pool = drv.ConnectionPool.from_url(url, max_connections=max_connections, retry=Retry(NoBackoff(), 1), **kwargs)
    client: drv.Client = drv.Client.from_pool(pool)
    return client


async def connect_cluster(url: str, max_connections: int = 4096, **kwargs: Any) -> drv.ClusterClient:
    """A Redis Cluster client seeded by the URL's host (it discovers the other nodes and the slot map).

    redis-py follows ``MOVED``/``ASK`` redirections and re-reads the slot map; its retries on a node that
    went away are bounded (3, at most 0.2 s apart) so a failed acquire is an error within seconds, not a
    hang. A seed that is not a cluster node, or no reachable node, raises ``ConnectionError``.
    """
    try:
        client: drv.ClusterClient = drv.ClusterClient.from_url(
            url,
            max_connections=max_connections,
            retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 3),
            **kwargs,
        )
        await drv.initialize(client)
    except RedisClusterException as exc:  # not a RedisError: say "cannot connect" like the plain client
        raise RedisConnectionError(str(exc)) from exc
    return client


def driver_url(config: StoreConfig, host: tuple[str, int] | None = None) -> str:
    """The URL for redis-py: our own options removed, redis-py's own query options kept."""
    parts = urlsplit(config.url)
    scheme = parts.scheme.lower()
    netloc = parts.netloc
    if host is not None:  # one master of a redlock:// URL
        scheme = "rediss" if config.tls else "redis"
        userinfo = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
        h, p = host
        netloc = f"{userinfo}[{h}]:{p}" if ":" in h else f"{userinfo}{h}:{p}"
    passthrough = {k: v for k, v in config.params.items() if _is_driver_option(k)}
    query = urlencode(passthrough)
    return f"{scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")


def _is_driver_option(key: str) -> bool:
    return key in URL_QUERY_ARGUMENT_PARSERS or key.startswith("ssl_") or key in ("client_name", "db")


def reject_unknown(config: StoreConfig) -> None:
    """redis-py's own URL options were passed on by :func:`driver_url`; anything else is a typo."""
    for key in [k for k in config.params if _is_driver_option(k)]:
        config.params.pop(key)
    config.reject_unknown()


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
    """``cluster=auto`` (default: ask the seed) -> None; ``true``/``false`` -> forced."""
    raw = config.params.get("cluster")
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

    A client of the other side, a cluster client, a Sentinel pool or anything else is a ``ValueError``
    whose text says what is needed."""
    pool: Any = given.connection_pool if isinstance(given, drv.Client) else given
    if not isinstance(pool, drv.ConnectionPool):
        kind = f"{type(given).__module__}.{type(given).__qualname__}"
        if isinstance(given, drv.ClusterClient) or "Cluster" in type(given).__name__:
            raise ValueError(
                f"a Redis Cluster client ({kind}) is not taken: give a redis:// URL of one node instead "
                "(distlock makes its own cluster client)"
            )
        raise ValueError(f"{_WANT}; got a {kind}")
    if "Sentinel" in type(pool).__name__:
        raise ValueError("a Sentinel-managed pool is not taken: give a redis:// URL of the master instead")
    kwargs = {
        **pool.connection_kwargs,
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        "retry": Retry(NoBackoff(), 1),
    }
    own = drv.ConnectionPool(connection_class=pool.connection_class, max_connections=max_connections, **kwargs)
    client: drv.Client = drv.Client.from_pool(own)
    return client

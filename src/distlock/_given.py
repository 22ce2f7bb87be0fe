"""``connect(client=...)``: a store on a driver client or pool the caller already has.

Which backend a client drives is read from its type's module (no driver is imported here); the store's
config is built from the client's own connection parameters (or from the URL, which must then name the
same backend) and carries the client to the backend (``given``).

Ownership: the store never closes a client it was given; the caller closes it after the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from ._errors import ConfigError
from ._url import SCHEMES, StoreConfig, parse_url

#: the top-level module of a client's type -> the backend it drives
_MODULES = {"redis": "redis", "kazoo": "zookeeper", "psycopg_pool": "postgres", "psycopg": "postgres"}

ACCEPTED = "a redis-py Redis client or ConnectionPool, a started kazoo KazooClient, or a psycopg_pool pool"


@dataclass
class ClientConfig(StoreConfig):
    """A ``StoreConfig`` that also carries the caller's client (never closed by the store)."""

    client: Any = field(default=None, repr=False, compare=False)


def given(config: StoreConfig) -> Any:
    """The client the caller gave ``connect``, or None."""
    return config.client if isinstance(config, ClientConfig) else None


def backend_of(client: object) -> str:
    module = type(client).__module__.split(".")[0]
    backend = _MODULES.get(module)
    if backend is None:
        raise ConfigError(f"connect(client=...) takes {ACCEPTED}; got a {_type_name(client)}")
    return backend


def _type_name(client: object) -> str:
    return f"{type(client).__module__}.{type(client).__qualname__}"


def given_client_name(client: object) -> str | None:
    """The client name a given redis-py client or pool was made with (its connections' CLIENT SETNAME), which
    the store takes as its label when none is given; None for other clients."""
    pool: Any = getattr(client, "connection_pool", client)
    kwargs: dict[str, Any] = dict(getattr(pool, "connection_kwargs", {}) or {})
    name = kwargs.get("client_name")
    return str(name) if name else None


def _url_of(client: object, backend: str) -> str:
    """A URL naming where the client points (for ``repr`` and messages; never a password)."""
    if backend == "redis":
        pool: Any = getattr(client, "connection_pool", client)
        kwargs: dict[str, Any] = dict(getattr(pool, "connection_kwargs", {}) or {})
        if kwargs.get("path"):
            return f"unix://{kwargs['path']}?db={int(kwargs.get('db') or 0)}"
        cls = getattr(pool, "connection_class", None)
        tls = cls is not None and "SSL" in cls.__name__
        manager: Any = getattr(pool, "sentinel_manager", None)
        if manager is not None:  # Sentinel.master_for: the sentinels and the service
            sentinels = [s.connection_pool.connection_kwargs for s in getattr(manager, "sentinels", [])]
            where = ",".join(f"{k.get('host')}:{int(k.get('port') or 26379)}" for k in sentinels)
            service = quote(str(getattr(pool, "service_name", "")), safe="")
            scheme = "rediss+sentinel" if tls else "redis+sentinel"
            return f"{scheme}://{where}/{service}/{int(kwargs.get('db') or 0)}"
        scheme = "rediss" if tls else "redis"
        host = str(kwargs.get("host") or "localhost")
        host = f"[{host}]" if ":" in host else host
        return f"{scheme}://{host}:{int(kwargs.get('port') or 6379)}/{int(kwargs.get('db') or 0)}"
    if backend == "zookeeper":
        hosts: Any = getattr(client, "hosts", None) or [("localhost", 2181)]
        netloc = ",".join(f"[{h}]:{p}" if ":" in str(h) else f"{h}:{p}" for h, p in hosts)
        return f"zookeeper://{netloc}{getattr(client, 'chroot', None) or ''}"
    params = pool_params(client)
    user = quote(str(params.get("user") or ""), safe="")
    db = quote(str(params.get("dbname") or ""), safe="")
    host = str(params.get("host") or "localhost").split(",")[0]
    port = int(str(params.get("port") or 5432).split(",")[0])
    auth = f"{user}@" if user else ""
    if host.startswith("/"):  # libpq's unix-socket directory
        return f"postgresql://{auth}/{db}?host={quote(host, safe='/')}&port={port}"
    host = f"[{host}]" if ":" in host else host
    return f"postgresql://{auth}{host}:{port}/{db}"


def pool_params(pool: object) -> dict[str, Any]:
    """The connection parameters of a psycopg_pool pool (its conninfo and kwargs), password included.

    distlock opens its own connections with them and never uses the pool's (see the PostgreSQL backend).
    """
    if type(pool).__module__.split(".")[0] != "psycopg_pool" or not hasattr(pool, "conninfo"):
        raise ConfigError(
            f"connect(client=...) takes a psycopg_pool pool for PostgreSQL, not a {_type_name(pool)}: distlock "
            "needs connections of its own (it discards one whose call timed out and pins one per holding in "
            "session mode), which a single connection cannot give"
        )
    from psycopg.conninfo import conninfo_to_dict  # psycopg is there: psycopg_pool needs it

    kwargs: dict[str, Any] = dict(getattr(pool, "kwargs", None) or {})
    return dict(conninfo_to_dict(str(pool.conninfo), **kwargs))


def client_config(client: object, url: str | None, options: dict[str, Any]) -> ClientConfig:
    """The config of a store on ``client``: from ``url`` when given (its scheme must name the backend the
    client drives; its options apply), else from the client's own connection parameters."""
    backend = backend_of(client)
    if url is None:
        config = parse_url(_url_of(client, backend), options)
    else:
        config = parse_url(url, options)
        if config.backend != backend:
            want = sorted(s for s, b in SCHEMES.items() if b == backend)
            raise ConfigError(
                f"the URL is {config.scheme}:// but the client is a {_type_name(client)}, which drives the "
                f"{backend} backend ({', '.join(w + '://' for w in want)}); the URL may also be left out",
                backend=config.scheme,
            )
    values = {f: getattr(config, f) for f in StoreConfig.__dataclass_fields__}
    return ClientConfig(**values, client=client)

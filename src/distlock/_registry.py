"""Every backend, one row each: its URL schemes, default port, module and the extra that installs its driver.

The rest of the library derives its tables from these rows (``_url.py``: schemes, aliases, TLS schemes, default
ports; ``_async/store.py``: which module to load and which extra to name when its driver is missing). Adding a
backend is a folder ``_backends/<name>/``, one row here and one conformance row in the tests (see
docs/design.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendRow:
    name: str
    #: URL schemes that select this backend (aliases included)
    schemes: tuple[str, ...]
    #: the module (relative to the package) that defines the async ``Backend``: a backend folder's ``_async``
    #: package, e.g. ``_backends.redis._async``; the sync side loads its generated twin (``module_of``)
    module: str
    #: the extra (``pip install python-distlock[<extra>]``) that installs the driver; None: standard library
    extra: str | None = None
    #: top-level modules of the driver: an import error naming one of them means "install the extra"
    drivers: tuple[str, ...] = ()
    #: the port a host without one gets; None: the URL names a file, not a host
    port: int | None = None
    #: schemes that mean TLS to the server
    tls_schemes: tuple[str, ...] = ()
    #: schemes whose hosts default to another port than ``port`` (Sentinel: the sentinels' 26379)
    scheme_ports: tuple[tuple[str, int], ...] = ()


ROWS: tuple[BackendRow, ...] = (
    BackendRow("memory", ("memory",), "_backends.sqlite._async"),
    BackendRow("sqlite", ("sqlite",), "_backends.sqlite._async"),
    BackendRow(
        "redis",
        ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel"),
        "_backends.redis._async",
        "redis",
        ("redis",),
        6379,
        ("rediss", "rediss+sentinel"),
        (("redis+sentinel", 26379), ("rediss+sentinel", 26379)),
    ),
    BackendRow(
        "redlock", ("redlock", "redlocks"), "_backends.redis._async.redlock", "redis", ("redis",), 6379, ("redlocks",)
    ),
    BackendRow("zookeeper", ("zookeeper", "zk"), "_backends.zookeeper._async", "zookeeper", ("kazoo",), 2181),
    BackendRow("etcd", ("etcd", "etcds"), "_backends.etcd._async", "etcd", ("h11",), 2379, ("etcds",)),
    BackendRow("mysql", ("mysql", "mariadb"), "_backends.mysql._async", "mysql", ("pymysql", "aiomysql"), 3306),
    BackendRow(
        "postgres",
        ("postgresql", "postgres"),
        "_backends.postgres._async",
        "postgres",
        ("psycopg", "psycopg_binary"),
        5432,
    ),
)

BY_NAME: dict[str, BackendRow] = {row.name: row for row in ROWS}


def module_of(row: BackendRow, side: str) -> str:
    """The full name of ``row``'s module on one side (``"_async"`` or ``"_sync"``): on the sync side, the twin
    ``scripts/gen_sync.py`` generates, the same path with its last ``_async`` folder named ``_sync``."""
    parts = row.module.split(".")
    i = len(parts) - 1 - parts[::-1].index("_async")
    return ".".join([__package__, *parts[:i], side, *parts[i + 1 :]])

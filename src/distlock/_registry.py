"""Every backend, one row each: its URL schemes, default port, module and the extra that installs its driver.

The rest of the library derives its tables from these rows (``_url.py``: schemes, aliases, TLS schemes, default
ports; ``_async/store.py``: which module to load and which extra to name when its driver is missing). Adding a
backend is a folder under ``_async/backends/``, one row here and one conformance row in the tests (see
docs/design.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendRow:
    name: str
    #: URL schemes that select this backend (aliases included)
    schemes: tuple[str, ...]
    #: the module under ``_async/backends/`` (``_sync/backends/`` on the sync side) that defines ``Backend``
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
    BackendRow("memory", ("memory",), "sqlite"),
    BackendRow("sqlite", ("sqlite",), "sqlite"),
    BackendRow(
        "redis",
        ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel"),
        "redis",
        "redis",
        ("redis",),
        6379,
        ("rediss", "rediss+sentinel"),
        (("redis+sentinel", 26379), ("rediss+sentinel", 26379)),
    ),
    BackendRow("redlock", ("redlock", "redlocks"), "redlock", "redis", ("redis",), 6379, ("redlocks",)),
    BackendRow("zookeeper", ("zookeeper", "zk"), "zookeeper", "zookeeper", ("kazoo",), 2181),
    BackendRow("etcd", ("etcd", "etcds"), "etcd", "etcd", ("h11",), 2379, ("etcds",)),
    BackendRow("mysql", ("mysql", "mariadb"), "mysql", "mysql", ("pymysql", "aiomysql"), 3306),
    BackendRow("postgres", ("postgresql", "postgres"), "postgres", "postgres", ("psycopg", "psycopg_binary"), 5432),
)

BY_NAME: dict[str, BackendRow] = {row.name: row for row in ROWS}

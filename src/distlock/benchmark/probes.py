"""The raw round-trip limit of a backend, measured in the same run as the locks.

An acquire + release needs at least two round trips (two write transactions on SQLite), so the ceiling for
acquire+release pairs is half the probe's rate. Each probe uses the same driver and the same connection
settings the backend uses, and runs for ``seconds`` on one connection, one request at a time.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._url import StoreConfig, parse_url


@dataclass(frozen=True)
class ProbeResult:
    probe: str  # what one round trip is
    round_trips_per_s: float

    @property
    def limit_per_s(self) -> float:
        """acquire+release pairs per second if each took exactly two probe round trips."""
        return self.round_trips_per_s / 2.0


def _rate(fn: Callable[[], object], seconds: float) -> float:
    fn()  # warm up (connect, page in)
    n = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(20):
            fn()
        n += 20
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def _sqlite(config: StoreConfig, seconds: float) -> ProbeResult:
    # a scratch file next to the lock store (same file system, same pragmas), never the store itself
    parent = Path(config.path).expanduser().resolve().parent
    with tempfile.TemporaryDirectory(dir=parent, prefix=".distlock-probe-") as d:
        conn = sqlite3.connect(str(Path(d) / "probe.db"), isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v INTEGER)")
            conn.execute("INSERT INTO t VALUES (1, 0)")

            def txn() -> None:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("UPDATE t SET v = v + 1 WHERE k = 1")
                conn.execute("COMMIT")

            return ProbeResult("BEGIN IMMEDIATE; UPDATE; COMMIT", _rate(txn, seconds))
        finally:
            conn.close()


def _redis(config: StoreConfig, seconds: float) -> ProbeResult:
    import redis

    client: Any = redis.Redis.from_url(config.url.split("?")[0], socket_connect_timeout=5, socket_timeout=10)
    try:
        return ProbeResult("PING", _rate(client.ping, seconds))
    finally:
        client.close()


def _postgres(config: StoreConfig, seconds: float) -> ProbeResult:
    import psycopg

    dsn = "postgresql://" + config.url.split("://", 1)[1].split("?")[0]
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        return ProbeResult("SELECT 1", _rate(lambda: conn.execute("SELECT 1").fetchone(), seconds))


def _mysql(config: StoreConfig, seconds: float) -> ProbeResult:
    import pymysql

    host, port = config.hosts[0]
    conn = pymysql.connect(
        host=host,
        port=port,
        user=config.username or "root",
        password=config.password or "",
        database=config.path.strip("/") or None,
        connect_timeout=5,
        autocommit=True,
    )
    try:

        def ping() -> None:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
                cur.fetchone()

        return ProbeResult("SELECT 1", _rate(ping, seconds))
    finally:
        conn.close()


def _zookeeper(config: StoreConfig, seconds: float) -> ProbeResult:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=",".join(f"{h}:{p}" for h, p in config.hosts), timeout=10)
    client.start(timeout=10)
    try:
        return ProbeResult("exists(/) (a read, served by one server)", _rate(lambda: client.exists("/"), seconds))
    finally:
        client.stop()
        client.close()


def _etcd(config: StoreConfig, seconds: float) -> ProbeResult:
    # the standard library's HTTP/1.1 client on one kept-alive connection: the probe needs no extra driver
    import http.client
    import json

    host, port = config.hosts[0]
    conn: http.client.HTTPConnection
    if config.tls:
        import ssl

        conn = http.client.HTTPSConnection(host, port, timeout=10, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=10)
    headers = {"Content-Type": "application/json"}

    def post(path: str, body: dict[str, str]) -> None:
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"etcd {path}: HTTP {resp.status}")

    def put() -> None:
        post("/v3/kv/put", {"key": "ZGlzdGxvY2stcHJvYmU=", "value": ""})

    try:
        return ProbeResult("PUT (a raft write)", _rate(put, seconds))
    finally:
        try:
            post("/v3/kv/deleterange", {"key": "ZGlzdGxvY2stcHJvYmU="})
        finally:
            conn.close()


PROBES: dict[str, Callable[[StoreConfig, float], ProbeResult]] = {
    "sqlite": _sqlite,
    "redis": _redis,
    "postgres": _postgres,
    "mysql": _mysql,
    "zookeeper": _zookeeper,
    "etcd": _etcd,
}


def probe(url: str | None, seconds: float) -> ProbeResult | None:
    """The raw limit for ``url``'s backend, or None where there is no probe (memory, redlock, TLS, unix...)."""
    config = parse_url(url)
    fn = PROBES.get(config.backend)
    if fn is None or config.scheme == "unix" or (config.tls and config.backend != "etcd"):
        return None
    return fn(config, seconds)

"""What a count-down latch left on a store's server, read past distlock (raw keys, znodes, etcd keys, rows):
the latch tests check that nothing of a latch stays once its done marker's linger is over."""

from __future__ import annotations

from typing import Any

import distlock


def left_of(store: distlock.Store | distlock.AsyncStore, url: str, name: str) -> list[str]:
    """Every server-side trace of anything whose key, path or row names ``name`` (any kind, any backend)."""
    backend: Any = store._backend
    scheme = store.scheme
    if scheme in ("memory", "sqlite"):
        db = backend.db

        def rows() -> list[str]:
            conn = db.read()[0]
            out = []
            for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                cols = [c[1] for c in conn.execute(f"PRAGMA table_info({table})").fetchall()]
                if "name" in cols:
                    out += [f"{table}:{r[0]}" for r in conn.execute(f"SELECT name FROM {table} WHERE name = ?", (name,))]
            return out

        return db.locked(rows)
    if scheme in ("redis", "rediss", "redis+sentinel"):
        return _redis_keys(url, name, cluster=bool(getattr(backend.node, "cluster", False)))
    if scheme in ("zookeeper", "zk"):
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        hosts = url.split("://", 1)[1].split("/")[0].split("?")[0]
        zk = KazooClient(hosts=hosts)
        zk.start(timeout=15)
        try:
            found: list[str] = []

            def walk(path: str) -> None:
                try:  # other tests share the server: a node can go between its parent's listing and its own
                    children = zk.get_children(path)
                except NoNodeError:
                    return
                for child in children:
                    sub = (path.rstrip("/") + "/" + child)
                    if sub == "/zookeeper":
                        continue
                    if name in sub:
                        found.append(sub)
                    walk(sub)

            walk("/")
            return found
        finally:
            zk.stop()
            zk.close()
    if scheme in ("etcd", "etcds"):
        import base64
        import json
        import urllib.request

        host = url.split("://", 1)[1].split("/")[0].split("?")[0].split(",")[0]
        body = json.dumps({"key": base64.b64encode(b"\x00").decode(), "range_end": base64.b64encode(b"\x00").decode()})
        req = urllib.request.Request(f"http://{host}/v3/kv/range", body.encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            kvs = json.loads(resp.read()).get("kvs") or []
        found = [base64.b64decode(kv["key"]).decode("utf-8", "replace") for kv in kvs]
        return [k for k in found if name in k]
    if scheme in ("mysql", "mariadb", "postgres", "postgresql"):
        import hashlib

        key = hashlib.sha256(name.encode()).hexdigest()
        tables = ("distlock_latches", "distlock_holders", "distlock_queue", "distlock_barriers")
        return [f"{t}:{r}" for t in tables for r in _sql_rows(url, t, key)]
    raise AssertionError(f"no raw reader for {scheme}")


def _redis_keys(url: str, name: str, cluster: bool) -> list[str]:
    """The keys containing ``name`` on a Redis server, on every master of a cluster, or on a Sentinel's master."""
    import redis
    from redis.cluster import RedisCluster
    from redis.sentinel import Sentinel

    from distlock._url import parse_url

    pattern = "*" + name + "*"
    if url.startswith("redis+sentinel"):
        config = parse_url(url)
        service = config.path.strip("/").split("/")[0]
        client: redis.Redis = Sentinel(config.hosts).master_for(service)
    elif cluster:
        nodes = RedisCluster.from_url(url.split("?")[0])
        try:
            return [k.decode() for k in nodes.scan_iter(match=pattern)]
        finally:
            nodes.close()
    else:
        client = redis.Redis.from_url(url.split("?")[0])
    try:
        return [k.decode() for k in client.scan_iter(match=pattern)]
    finally:
        client.close()


def _sql_rows(url: str, table: str, key: str) -> list[str]:
    """The name keys of ``table``'s rows with the key ``key`` (none if the table does not exist)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme.startswith("postgres"):
        import psycopg

        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            exists = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
            if exists is None or exists[0] is None:
                return []
            return [str(r[0]) for r in conn.execute(f"SELECT name_key FROM {table} WHERE name_key = %s", (key,))]
    import pymysql

    conn = pymysql.connect(
        host=parts.hostname, port=parts.port or 3306, user=parts.username, password=parts.password or "",
        database=parts.path.lstrip("/"),
    )  # fmt: skip
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW TABLES LIKE %s", (table,))
            if not cur.fetchall():
                return []
            cur.execute(f"SELECT name_key FROM {table} WHERE name_key = %s", (key,))
            return [str(r[0]) for r in cur.fetchall()]
    finally:
        conn.close()

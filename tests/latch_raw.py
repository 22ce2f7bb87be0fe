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
    if scheme in ("redis", "rediss"):
        import redis

        client = redis.Redis.from_url(url.split("?")[0])
        try:
            return [k.decode() for k in client.scan_iter(match="*" + name + "*")]
        finally:
            client.close()
    if scheme in ("zookeeper", "zk"):
        from kazoo.client import KazooClient

        hosts = url.split("://", 1)[1].split("/")[0].split("?")[0]
        zk = KazooClient(hosts=hosts)
        zk.start(timeout=15)
        try:
            found: list[str] = []

            def walk(path: str) -> None:
                for child in zk.get_children(path):
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
    raise AssertionError(f"no raw reader for {scheme}")

#!/usr/bin/env python3
"""distlock's Redis and Redlock backends against their peers, on the same loopback servers in one run:
``peers.py --only redis,redlock,redis-cluster``, then the renewal of many held locks.

    python benchmarks/redis_peers.py [--seconds 3] [--json FILE] [--held 10000] [--only distlock,redis-py]

Starts one redis-server, five independent masters (tools/servers/redis.py) and a 3-master Redis Cluster
(tools/servers/redis_cluster.py; distlock only), persistence off. Peers, each if importable (``pip install
python-redis-lock pottery`` into the venv; they are not test dependencies): redis-py's ``Lock``,
python-redis-lock's ``Lock`` and pottery's ``Redlock`` (5 masters). What is measured, and how, is
benchmarks/peers.py's (docs/bench.md); this script adds one renew round for ``--held`` locks held by distlock
on the single node, and the RSS per held lock.
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks._measure import TTL, Lib, Pair  # noqa: E402


def _masters(url: str) -> list[str]:
    """The masters of a ``redlock://h1:p1,h2:p2/db`` URL as redis:// URLs."""
    hosts, _, db = url.split("://", 1)[1].partition("/")
    return [f"redis://{h}/{db or 0}" for h in hosts.split(",")]


class RedisPy(Lib):
    name, key = "redis-py Lock", "redis-py"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import redis

        self.client = redis.Redis.from_url(url)

    def lock(self, name: str) -> Pair:
        rl = self.client.lock(f"bench/{name}", timeout=TTL)
        return (lambda: rl.acquire(blocking=True)), rl.release  # type: ignore[return-value]

    def close(self) -> None:
        self.client.close()


class PythonRedisLock(RedisPy):
    name, key = "python-redis-lock", "python-redis-lock"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import redis_lock

        self.lock_class = redis_lock.Lock

    def lock(self, name: str) -> Pair:
        pl = self.lock_class(self.client, f"bench/{name}", expire=int(TTL))
        return (lambda: pl.acquire(blocking=True)), pl.release  # type: ignore[return-value]


class Pottery(Lib):
    name, key = "pottery Redlock", "pottery-redlock"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import redis
        from pottery import Redlock

        self.redlock = Redlock
        self.masters = {redis.Redis.from_url(u) for u in _masters(url)}

    def lock(self, name: str) -> Pair:
        po = self.redlock(key=f"bench/{name}", masters=self.masters, auto_release_time=TTL)
        return (lambda: po.acquire(blocking=True)), po.release  # type: ignore[return-value]

    def close(self) -> None:
        for m in self.masters:
            m.close()


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def many_held(url: str, held: int) -> dict[str, float]:
    """One renew round (one pipeline) for ``held`` locks held by one store, and the RSS each costs."""
    import distlock

    with distlock.connect(url) as store:
        base = rss_kb()
        locks = [store.lock(f"bench-held-{i}", ttl=120) for i in range(held)]
        for lk in locks:
            assert lk.acquire(blocking=False)
        per_lock = (rss_kb() - base) * 1024 / held
        claims = [h.claim for h in store._acquirer.holdings()]
        started = time.monotonic()
        ok = store._backend.renew(claims)
        took = time.monotonic() - started
        assert all(ok)
        for lk in locks:
            lk.release()
    return {"held": held, "renew_round_ms": took * 1000, "rss_bytes_per_lock": per_lock}


def main() -> None:
    import argparse

    from benchmarks import peers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--held", type=int, default=10000, help="locks held at once for the renewal round (0: skip)")
    ap.add_argument("--only", help="comma-separated rows: distlock,redis-py,python-redis-lock,pottery-redlock")
    peers.add_common_options(ap)
    args = ap.parse_args()
    doc = peers.run_and_report(args, ["redis", "redlock", "redis-cluster"], {}, args.only)
    if args.held:
        from tools.servers.redis import redis_server

        with redis_server() as srv:
            m = many_held(srv.url, args.held)
        print(
            f"\nrenewal of {m['held']} held locks: one pipeline, {m['renew_round_ms']:.0f} ms; "
            f"RSS {m['rss_bytes_per_lock'] / 1024:.2f} KB per held lock"
        )
        if args.json:
            doc["many_held"] = m
            peers.write_json(doc, args.json)


if __name__ == "__main__":
    main()

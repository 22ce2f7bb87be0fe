#!/usr/bin/env python3
"""distlock's ZooKeeper backend against its peers on one loopback ensemble: ``peers.py --only zookeeper``.

    .venv/bin/python benchmarks/zookeeper_peers.py [--hosts h1:p1,h2:p2,h3:p3] [--seconds 3] [--json FILE]
                                                   [--only distlock,kazoo,tooz,raw] [--any-server]

Without ``--hosts`` it starts a 3-node ensemble from Debian's package (tools/servers/zookeeper.py). Rows: distlock,
kazoo's ``Lock`` recipe, tooz's zookeeper driver if tooz is importable, and a floor: the round trips of one lock
cycle made with bare kazoo calls (create ephemeral-sequential, list the children, delete), which excludes nobody
and so is measured uncontended only. What is measured, and how, is benchmarks/peers.py's (docs/bench.md).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks._measure import Distlock, Lib, Pair  # noqa: E402


def hosts_of(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


class Kazoo(Lib):
    name, key = "kazoo Lock", "kazoo"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        from kazoo.client import KazooClient

        self.client = KazooClient(hosts=hosts_of(url), timeout=10)
        self.client.start(20)

    def lock(self, name: str) -> Pair:
        lk = self.client.Lock(f"/bench/{name}")

        def acquire() -> None:
            assert lk.acquire(timeout=60)

        return acquire, lk.release

    def close(self) -> None:
        self.client.stop()
        self.client.close()


class Tooz(Lib):
    name, key = "tooz zookeeper", "tooz"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        from tooz import coordination

        first = hosts_of(url).split(",")[0]
        self.coord = coordination.get_coordinator(f"zookeeper://{first}", uuid.uuid4().hex.encode())
        self.coord.start()

    def lock(self, name: str) -> Pair:
        lk = self.coord.get_lock(name.encode())

        def acquire() -> None:
            assert lk.acquire(blocking=60)

        return acquire, lk.release

    def close(self) -> None:
        self.coord.stop()


class Raw(Kazoo):
    """The floor: the round trips of one lock cycle with bare kazoo calls, no recipe."""

    name, key, floor = "raw kazoo round trips", "raw", True

    def lock(self, name: str) -> Pair:
        path = f"/bench/{name}"
        self.client.ensure_path(path)
        node: list[str] = []

        def acquire() -> None:
            node.append(self.client.create(f"{path}/n-", ephemeral=True, sequence=True))
            self.client.get_children(path)

        def release() -> None:
            self.client.delete(node.pop())

        return acquire, release


LIBS: list[type[Lib]] = [Distlock, Kazoo, Tooz, Raw]


def main() -> None:
    import argparse

    from benchmarks import peers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", help="an ensemble to use instead of starting one")
    ap.add_argument("--any-server", action="store_true", help="let each client pick a server of the ensemble")
    ap.add_argument("--only", help="comma-separated rows: " + ",".join(c.key for c in LIBS))
    peers.add_common_options(ap)
    args = ap.parse_args()
    # By default every client of every library talks to the same server (the first one listed): left to pick one
    # at random, leader vs follower changes the numbers more than the libraries do.
    urls = {}
    if args.hosts:
        urls["zookeeper"] = "zookeeper://" + (args.hosts if args.any_server else args.hosts.split(",")[0])
    peers.run_and_report(args, ["zookeeper"], urls, args.only)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The pipelined ZooKeeper try (create + list in one round trip) against create-then-list, alternating.

    python benchmarks/zookeeper_pipeline.py [--rounds 20] [--slice 0.5]

Starts one loopback ZooKeeper server. One store loops acquire + release on one lock; every ``--slice``
seconds the try switches between the pipelined step and the two requests one after the other, so both see
the same machine load. Prints cycles/s and ms per cycle of each.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import distlock  # noqa: E402
from distlock._backends.zookeeper import nodes  # noqa: E402


def one_after_the_other(self: Any, entry: Any, data: bytes) -> list[str]:
    self.create(entry, data)
    children: list[str] = self.children(entry.parent)
    return children


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--slice", type=float, default=0.5)
    args = ap.parse_args()
    from tools.servers.zookeeper import zookeeper_ensemble

    pipelined = nodes.Nodes.create_and_list
    totals = {"pipelined": [0, 0.0], "one after the other": [0, 0.0]}
    with zookeeper_ensemble(1) as zk, distlock.connect(zk.url) as store:
        lock = store.lock("zookeeper-pipeline", ttl=10)
        for _ in range(100):  # warm up (and make the parent nodes)
            lock.acquire()
            lock.release()
        try:
            for _ in range(args.rounds):
                for label, step in (("one after the other", one_after_the_other), ("pipelined", pipelined)):
                    nodes.Nodes.create_and_list = step  # type: ignore[method-assign]
                    began, n = time.perf_counter(), 0
                    while time.perf_counter() - began < args.slice:
                        lock.acquire()
                        lock.release()
                        n += 1
                    totals[label][0] += n
                    totals[label][1] += time.perf_counter() - began
        finally:
            nodes.Nodes.create_and_list = pipelined  # type: ignore[method-assign]
    for label, (n, seconds) in totals.items():
        print(f"{label}: {n / seconds:.0f} cycles/s, {seconds / n * 1000:.3f} ms per cycle")


if __name__ == "__main__":
    main()

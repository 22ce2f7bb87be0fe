#!/usr/bin/env python3
"""Hand-overs on one Redlock name under contention: N processes loop acquire, a 1 ms hold, release.

    python benchmarks/redlock_handover.py [--processes 4] [--seconds 5] [--url redlock://...]

Starts five loopback redis-server masters unless ``--url`` is given. Prints the acquisitions of each process
(fairness: the least against the most) and the longest gaps between one release and the next grant (a
wake-up lost to a stale queue entry shows as a gap near the 2 s wait slice).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import multiprocessing as mp
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import distlock  # noqa: E402


def worker(url: str, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    spans: list[tuple[float, float]] = []
    with distlock.connect(url) as store:
        lock = store.lock("redlock-handover", ttl=5)
        end = time.time() + seconds
        while time.time() < end:
            if lock.acquire(timeout=10):
                granted = time.time()
                time.sleep(0.001)
                lock.release()
                spans.append((granted, time.time()))
    out.put(spans)


@contextlib.contextmanager
def masters(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from tools.servers.redis import redis_masters, redlock_url

    with redis_masters(5) as servers:
        yield redlock_url(servers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--url", default=None)
    args = ap.parse_args()
    with masters(args.url) as url:
        out: mp.Queue = mp.Queue()  # type: ignore[type-arg]
        procs = [mp.Process(target=worker, args=(url, args.seconds, out)) for _ in range(args.processes)]
        for p in procs:
            p.start()
        results = [out.get() for _ in procs]
        for p in procs:
            p.join()
    spans = sorted(s for r in results for s in r)
    gaps = sorted(b[0] - a[1] for a, b in itertools.pairwise(spans))
    counts = sorted(len(r) for r in results)
    print(f"acquisitions per process: {counts} (least/most {counts[0] / max(1, counts[-1]):.2f}), total {len(spans)}")
    if gaps:
        print(
            f"hand-over gap p50 {gaps[len(gaps) // 2] * 1000:.2f} ms, longest {[round(g * 1000, 1) for g in gaps[-3:]]} ms"
        )


if __name__ == "__main__":
    main()

"""A pool of worker processes sharing a semaphore: at most N calls to a rate-limited API at once.

Each worker takes one permit of ``store.semaphore("partner-api", permits=3)`` around every call. The workers
can be on different hosts (same store URL); each permit is its own lease, so a worker that crashes frees its
permit when the lease runs out.

    python examples/worker_pool.py                     # 6 worker processes, 3 permits, temporary SQLite store
    python examples/worker_pool.py --url redis://...   # the same across hosts

Each call appends its start and end time to a log; at the end the example prints the largest number of calls
that overlapped, which never exceeds the permits.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import distlock

PERMITS = 3


def call_partner_api(log: Path) -> None:
    start = time.time()
    time.sleep(0.05)  # the call
    with log.open("a") as f:  # one short append per call: lines do not interleave
        f.write(f"{start} {time.time()}\n")


def worker(url: str, log: Path, calls: int) -> None:
    with distlock.connect(url) as store:
        sem = store.semaphore("partner-api", permits=PERMITS, ttl=30)
        for _ in range(calls):
            with sem:  # waits for a free permit
                call_partner_api(log)


def max_overlap(log: Path) -> int:
    events = []
    for line in log.read_text().splitlines():
        start, end = map(float, line.split())
        events += [(start, 1), (end, -1)]
    current = peak = 0
    for _, delta in sorted(events, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        current += delta
        peak = max(peak, current)
    return peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None, help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--calls", type=int, default=5, help="calls per worker")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{tmp}/locks.db"
        log = Path(tmp) / "calls.log"
        log.touch()
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=worker, args=(url, log, args.calls)) for _ in range(args.workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        calls = len(log.read_text().splitlines())
        peak = max_overlap(log)
        print(f"{calls} calls by {args.workers} workers (pid {os.getpid()}); at most {peak} at once, permits {PERMITS}")
        return 0 if calls == args.workers * args.calls and peak <= PERMITS else 1


if __name__ == "__main__":
    raise SystemExit(main())

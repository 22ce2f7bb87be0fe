"""A cron job that runs at most once across hosts.

Every host has the same crontab line; when it fires, each host tries the lock once (non-blocking). The one that
gets it runs the job, holding the lock (renewed) while the job runs; the others skip at once. The winner keeps
the lock at least ``AT_LEAST`` seconds after the start, so a host whose clock or cron fires a little late still
finds it held and skips instead of running the job a second time.

    python examples/cron_once.py                     # 5 simulated hosts on a temporary SQLite store
    python examples/cron_once.py --url redis://...   # the same across real hosts: one store URL for all

The simulation starts 5 processes ("hosts") a few hundred milliseconds apart and counts how often the job ran.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
from pathlib import Path

import distlock

AT_LEAST = 2.0  # seconds the winner keeps the lock after the start (larger than the spread of the hosts' clocks)
JOB_TTL = 30.0  # lease; renewed every ttl/3 while the job runs, so the job may take longer than this


def nightly_report(out: Path) -> None:
    time.sleep(0.2)  # the real work
    with out.open("a") as f:
        f.write("ran\n")


def cron_entry(url: str, host: int, out: Path) -> None:
    """What the crontab line runs on every host."""
    with distlock.connect(url) as store:
        lock = store.lock("cron/nightly-report", ttl=JOB_TTL)
        if not lock.acquire(blocking=False):  # one try: another host has it (or had it moments ago)
            print(f"host {host}: skipped, another host runs it", flush=True)
            return
        started = time.monotonic()
        try:
            print(f"host {host}: running (fence {lock.fence})", flush=True)
            nightly_report(out)
            time.sleep(max(0.0, AT_LEAST - (time.monotonic() - started)))  # late hosts must still see it held
        finally:
            lock.release()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None, help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--hosts", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.url or f"sqlite:///{tmp}/locks.db"
        out = Path(tmp) / "runs.log"
        out.touch()
        ctx = mp.get_context("spawn")
        hosts = []
        for i in range(args.hosts):
            p = ctx.Process(target=cron_entry, args=(url, i, out))
            p.start()
            hosts.append(p)
            time.sleep(0.1)  # the hosts' cron daemons fire a little apart
        for p in hosts:
            p.join(60)
        runs = out.read_text().count("ran")
        print(f"the job ran {runs} time(s) across {args.hosts} hosts")
        return 0 if runs == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())

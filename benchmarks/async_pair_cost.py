#!/usr/bin/env python3
"""One asyncio lock's uncontended acquire + release, in alternated runs of one or more source trees: the
rate, the process's CPU per pair and the event-loop turns per pair (the acquire's and the release's).

    .venv/bin/python benchmarks/async_pair_cost.py [--tree DIR ...] [--rounds 3] [--seconds 3]
                                                   [--url URL ...] [--only mysql,postgres,sqlite,redis]

Each run is a child process that imports distlock from its tree (``git archive <commit> src benchmarks |
tar -x -C /tmp/before`` makes a tree of a commit), opens ``connect_async(URL)`` on an event loop that counts
its turns (``_run_once``), warms up, then loops ``await lock.acquire(timeout=60)`` / ``await
lock.release()`` for ``--seconds``. The trees take turns run by run, so a busy machine disturbs them alike.
Without ``--url`` it measures MariaDB and PostgreSQL session mode (``?mode=session``), SQLite
(``memory://``) and Redis, starting the servers it needs (tools/servers/).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class CountingLoop(asyncio.SelectorEventLoop):
    """The default loop, counting its turns (one ``_run_once`` each: a poll of the selector, then the
    callbacks ready then)."""

    turns = 0

    def _run_once(self) -> None:
        self.turns += 1
        super()._run_once()  # type: ignore[misc]


async def _pairs(url: str, seconds: float) -> str:
    import distlock

    loop = asyncio.get_running_loop()
    assert isinstance(loop, CountingLoop)
    store = await distlock.connect_async(url)
    try:
        lock = store.lock(f"bench/async-pair-{os.getpid()}", ttl=30)
        for _ in range(200):
            assert await lock.acquire(timeout=60)
            await lock.release()
        pairs = on_acquire = on_release = 0
        cpu0, t0 = time.process_time(), time.monotonic()
        end = t0 + seconds
        while time.monotonic() < end:
            before = loop.turns
            assert await lock.acquire(timeout=60)
            acquired = loop.turns
            await lock.release()
            on_acquire += acquired - before
            on_release += loop.turns - acquired
            pairs += 1
        cpu, wall = time.process_time() - cpu0, time.monotonic() - t0
    finally:
        await store.aclose()
    return (
        f"{pairs / wall:,.0f} pairs/s, CPU per pair {cpu / pairs * 1e6:.0f} us, loop turns per pair "
        f"{(on_acquire + on_release) / pairs:.2f} (acquire {on_acquire / pairs:.2f}, release "
        f"{on_release / pairs:.2f}); load {os.getloadavg()[0]:.1f}"
    )


def one_run(url: str, seconds: float) -> str:
    loop = CountingLoop()
    try:
        return loop.run_until_complete(_pairs(url, seconds))
    finally:
        loop.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", help="a source tree to measure (repeatable; default: this one)")
    ap.add_argument("--url", action="append", help="a store URL to measure (repeatable; default: see above)")
    ap.add_argument("--only", help="of the default URLs: a comma-separated subset of mysql,postgres,sqlite,redis")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--run", metavar="URL", help=argparse.SUPPRESS)  # one run, in a child
    args = ap.parse_args()
    if args.run:
        print(one_run(args.run, args.seconds), flush=True)
        return
    trees = [Path(t).resolve() for t in args.tree or [str(ROOT)]]
    sys.path.insert(0, str(ROOT))
    with contextlib.ExitStack() as stack:
        urls = list(args.url or [])
        if not urls:
            from tools.servers import mysql as my_srv
            from tools.servers import postgres as pg_srv
            from tools.servers import redis as redis_srv

            wanted = (args.only or "mysql,postgres,sqlite,redis").split(",")
            if "mysql" in wanted:
                urls.append(stack.enter_context(my_srv.mariadb_server()).url + "?mode=session")
            if "postgres" in wanted:
                urls.append(stack.enter_context(pg_srv.postgres_server()).url + "?mode=session")
            if "sqlite" in wanted:
                urls.append("memory://")
            if "redis" in wanted:
                urls.append(stack.enter_context(redis_srv.redis_server()).url)
        from benchmarks import _measure

        jobs = [(url.split(":")[0], ["--seconds", str(args.seconds), "--run", url]) for url in urls]
        _measure.alternate(str(Path(__file__).resolve()), trees, jobs, args.rounds)


if __name__ == "__main__":
    main()

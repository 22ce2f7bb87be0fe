#!/usr/bin/env python3
"""A crowd giving up at once: N asyncio waiters in each of P processes wait on one held name and all time out
(or are all cancelled) at the same moment. How long past its deadline each ``acquire`` returns, whether any
raised instead of returning False, and whether anything of them is left on the server.

    python benchmarks/giving_up.py --url URL [--waiters 250] [--processes 4] [--timeout 2] [--cancel] [--fair]

``--url`` names a running server (any backend URL; ``sqlite:///path`` needs none). With ``--cancel`` the
waiters are cancelled after ``--timeout`` seconds instead of timing out.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import distlock  # noqa: E402


async def _crowd(args: Any, name: str, start: float, out: Any) -> None:
    async with await distlock.connect_async(args.url) as store:
        warm = store.lock(f"{name}-warm", ttl=10)  # connections and tables ready before the start
        await warm.acquire(timeout=10)
        await warm.release()
        await asyncio.sleep(max(0.0, start - time.time()))
        locks = [store.lock(name, ttl=30, fair=args.fair) for _ in range(args.waiters)]
        late: list[float] = []
        errors: list[str] = []

        async def one(lock: Any) -> None:
            began = time.monotonic()
            try:
                if await lock.acquire(timeout=None if args.cancel else args.timeout):
                    errors.append("acquired")
            except asyncio.CancelledError:
                pass
            except Exception as exc:  # noqa: BLE001 - counted and reported
                errors.append(type(exc).__name__ + ": " + str(exc)[:80])
            finally:
                late.append(time.monotonic() - began - args.timeout)

        tasks = [asyncio.create_task(one(lock)) for lock in locks]
        if args.cancel:
            await asyncio.sleep(args.timeout)
            for task in tasks:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        out.put((late, errors))


def _process(args: Any, name: str, start: float, out: Any) -> None:
    asyncio.run(_crowd(args, name, start, out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--waiters", type=int, default=250, help="per process")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--cancel", action="store_true", help="cancel the waiters instead of letting them time out")
    ap.add_argument("--fair", action="store_true")
    args = ap.parse_args()
    name = f"giving-up-{uuid.uuid4().hex[:8]}"
    with distlock.connect(args.url) as store:
        holder = store.lock(name, ttl=60)
        assert holder.acquire(timeout=10), "the name is held elsewhere"
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        start = time.time() + 3 + 0.5 * args.processes  # every process started and warmed up
        procs = [ctx.Process(target=_process, args=(args, name, start, out)) for _ in range(args.processes)]
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(30)
        info = store.inspect(name)
        holder.release()
    late = sorted(x for r in results for x in r[0])
    errors = [e for r in results for e in r[1]]
    pick = [late[int(q * (len(late) - 1))] for q in (0.5, 0.9, 1.0)]
    what = "cancelled" if args.cancel else "timed out"
    print(
        f"{len(late)} waiters {what} together ({args.processes} processes, fair={args.fair}): returned "
        f"p50 {pick[0]:.3f} s, p90 {pick[1]:.3f} s, max {pick[2]:.3f} s after their deadline; "
        f"errors {len(errors)} {errors[:2]}; waiters left on the server {info.waiters if info else 0}"
    )


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""distlock's SQL session mode against the raw server call, in alternated runs of one or more source trees.

    .venv/bin/python benchmarks/sql_session_cost.py [--tree DIR ...] [--only mysql|postgres] [--seconds 3]
                                                    [--rounds 2] [--mysql URL] [--postgres URL]

Each run measures, in one process, the raw connection-bound lock (``GET_LOCK`` / ``RELEASE_LOCK``,
``pg_advisory_lock`` / ``pg_advisory_unlock`` on one connection: ``sql_peers.py``'s raw rows) and distlock's
``?mode=session`` lock in interleaved quarter-second slices (uncontended acquire + release), then the
hand-off between two processes taking strict turns (3 ms holds) of each, one after the other: each figure of
distlock is given as a ratio to the raw call's of the same run. With several ``--tree`` (a checkout's root
with ``src/`` and ``benchmarks/``, e.g. ``git archive <commit> src benchmarks | tar -x -C /tmp/before``), the
trees take turns run by run, so a busy machine disturbs them alike. Without URLs it starts a MariaDB and a
PostgreSQL server (tools/servers/). What is measured is ``distlock bench``'s (docs/bench.md).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def one_run(db: str, url: str, seconds: float) -> str:
    """In the tree this process imports: one run of raw vs session mode; a line of figures."""
    from benchmarks import _measure, sql_peers

    session, raw = (
        (sql_peers.MysqlSession, sql_peers.RawGetLock) if db == "mysql" else (sql_peers.PgSession, sql_peers.RawAdvisory)
    )
    libs = [raw(url), session(url)]
    try:
        un = _measure.uncontended(libs, seconds)
        cpu = client_cpu(libs, seconds)
    finally:
        for lib in libs:
            lib.close()
    hand_raw = _measure.handoff(raw, url, seconds)["latency_ms"]["p50"]
    hand = _measure.handoff(session, url, seconds)["latency_ms"]["p50"]
    r, s = un[0]["rate_per_s"], un[1]["rate_per_s"]
    return (
        f"uncontended raw {r:,.0f}/s, session {s:,.0f}/s = {s / r:.2f}x; hand-off p50 raw {hand_raw:.3f} ms, "
        f"session {hand:.3f} ms = {hand / hand_raw:.2f}x; client CPU per pair raw {cpu[0]:.0f} us, session "
        f"{cpu[1]:.0f} us; load {os.getloadavg()[0]:.1f}"
    )


def client_cpu(libs: list[Any], seconds: float, batch: int = 200) -> list[float]:
    """This process's CPU time (every thread of it: the lease clock's, a driver's watchdog) per uncontended
    acquire + release of each library, in interleaved batches for ``seconds`` in all. Steadier than the rates
    on a shared machine: a busy neighbour delays the pairs but spends none of this process's CPU."""
    pairs = [lib.lock(f"cpu-{os.getpid()}-{i}") for i, lib in enumerate(libs)]
    spent, done = [0.0] * len(pairs), [0] * len(pairs)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for i, (acquire, release) in enumerate(pairs):
            t0 = time.process_time()
            for _ in range(batch):
                acquire()
                release()
            spent[i] += time.process_time() - t0
            done[i] += batch
    return [spent[i] / done[i] * 1e6 for i in range(len(pairs))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", action="append", help="a source tree to measure (repeatable; default: this one)")
    ap.add_argument("--only", choices=["mysql", "postgres"])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mysql", help="a MySQL/MariaDB URL to use instead of starting a server")
    ap.add_argument("--postgres", help="a PostgreSQL URL to use instead of starting a server")
    ap.add_argument("--run", nargs=2, metavar=("DB", "URL"), help=argparse.SUPPRESS)  # one run, in a child
    args = ap.parse_args()
    if args.run:
        print(one_run(args.run[0], args.run[1], args.seconds), flush=True)
        return
    trees = [Path(t).resolve() for t in args.tree or [str(ROOT)]]
    dbs = [args.only] if args.only else ["mysql", "postgres"]
    sys.path.insert(0, str(ROOT))
    with contextlib.ExitStack() as stack:
        urls = {"mysql": args.mysql, "postgres": args.postgres}
        for db in dbs:
            if urls[db] is None:
                from tools.servers import mysql as my_srv
                from tools.servers import postgres as pg_srv

                srv = stack.enter_context(my_srv.mariadb_server() if db == "mysql" else pg_srv.postgres_server())
                urls[db] = srv.url
        from benchmarks import _measure

        jobs = [(db, ["--seconds", str(args.seconds), "--run", db, str(urls[db])]) for db in dbs]
        _measure.alternate(str(Path(__file__).resolve()), trees, jobs, args.rounds)


if __name__ == "__main__":
    main()

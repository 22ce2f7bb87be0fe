#!/usr/bin/env python3
"""What an old snapshot does to the SQL backends: one hot lock's acquire + release rate, slice by slice, before,
during and after another connection keeps a transaction (a snapshot) open on the same database.

    python benchmarks/old_snapshot.py [--postgres URL] [--mysql URL] [--modes lease,session] [--slice 2]

Without URLs it starts a PostgreSQL and a MariaDB server on loopback (the test suite's harness). A row per
(database, mode, where the snapshot is): the rate of each ``--slice`` seconds, ``--before`` slices without
it, ``--during`` slices with it, ``--after`` slices once it ended. Rows whose rates fall while the snapshot
is open are the ones whose server cannot clean the versions each cycle leaves until that transaction ends
(docs/sql.md, "Long transactions and the lock tables").
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import distlock  # noqa: E402


def _rate(lock: Any, seconds: float) -> float:
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        lock.acquire(timeout=10)
        lock.release()
        n += 1
    return n / seconds


@contextlib.contextmanager
def _pg_snapshot(url: str, database: str | None, write: bool) -> Iterator[None]:
    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(url.split("?", 1)[0])
    if database is not None:
        info["dbname"] = database
    with psycopg.connect(**info) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT txid_current()" if write else "SELECT 1")
        yield
        conn.rollback()


@contextlib.contextmanager
def _mysql_snapshot(url: str) -> Iterator[None]:
    """InnoDB's purge waits for the oldest read view of the whole server: where it is does not matter."""
    import pymysql

    u = urlparse(url.split("?", 1)[0])
    conn = pymysql.connect(
        host=u.hostname, port=u.port or 3306, user=u.username, password=u.password or "",
        database=u.path.lstrip("/"),
    )  # fmt: skip
    try:
        with conn.cursor() as cur:
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        yield
        conn.rollback()
    finally:
        conn.close()


def _row(url: str, mode: str, snapshot: Callable[[], Any], args: argparse.Namespace) -> list[float]:
    with distlock.connect(f"{url}{'&' if '?' in url else '?'}mode={mode}") as store:
        lock = store.lock(f"old-snapshot-{mode}-{time.time_ns()}", ttl=30)
        _rate(lock, 0.5)  # connections and tables ready
        rates = [_rate(lock, args.slice) for _ in range(args.before)]
        with snapshot():
            rates += [_rate(lock, args.slice) for _ in range(args.during)]
        rates += [_rate(lock, args.slice) for _ in range(args.after)]
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--postgres", help="a PostgreSQL URL (default: start a server)")
    ap.add_argument("--mysql", help="a MySQL/MariaDB URL (default: start a server)")
    ap.add_argument("--modes", default="lease,session")
    ap.add_argument("--slice", type=float, default=2.0)
    ap.add_argument("--before", type=int, default=3)
    ap.add_argument("--during", type=int, default=8)
    ap.add_argument("--after", type=int, default=4)
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        pg, my = args.postgres, args.mysql
        if pg is None or my is None:
            from tools.servers.mysql import mariadb_server
            from tools.servers.postgres import postgres_server

            pg = pg or stack.enter_context(postgres_server()).url
            my = my or stack.enter_context(mariadb_server()).url
        cases: list[tuple[str, str, str, Callable[[], Any]]] = []
        for mode in args.modes.split(","):
            cases += [
                ("postgresql", mode, "same database", lambda: _pg_snapshot(pg, None, False)),
                ("postgresql", mode, "other database, read-only", lambda: _pg_snapshot(pg, "postgres", False)),
                ("postgresql", mode, "other database, with a write", lambda: _pg_snapshot(pg, "postgres", True)),
                ("mariadb", mode, "same server", lambda: _mysql_snapshot(my)),
            ]
        phases = ["before"] * args.before + ["during"] * args.during + ["after"] * args.after
        print(
            f"slices of {args.slice:g} s: {args.before} before, {args.during} with the snapshot open, {args.after} after"
        )
        print()
        print("| database | mode | snapshot | before | end of the snapshot | after | rates (acquire + release per s) |")
        print("|---|---|---|---:|---:|---:|---|")
        for db, mode, where, snapshot in cases:
            url = pg if db == "postgresql" else my
            rates = _row(url, mode, snapshot, args)
            before = rates[phases.index("during") - 1]
            during = rates[len(phases) - args.after - 1]
            after = rates[-1]
            print(
                f"| {db} | {mode} | {where} | {before:,.0f} | {during:,.0f} ({during / before:.2f}x) | {after:,.0f} | "
                + " ".join(f"{r:,.0f}" for r in rates) + " |",
                flush=True,
            )  # fmt: skip


if __name__ == "__main__":
    main()

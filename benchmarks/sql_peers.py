#!/usr/bin/env python3
"""distlock's MySQL/MariaDB and PostgreSQL backends (both modes) against raw connection-bound locks and tooz.

    .venv/bin/python benchmarks/sql_peers.py [--mysql URL] [--postgres URL] [--seconds 5] [--rounds 300]
                                             [--only mysql|postgres] [--json FILE]

Without URLs it starts a MariaDB and a PostgreSQL server from the Debian packages (tools/servers/). Per row:

* uncontended: one client, acquire + release of one lock in a loop (locks/s);
* hand-off p50 / p99: two clients (own connections) on one lock, each loops acquire -> hold 10 ms ->
  release; time from just before release() to just after the other's acquire() returns (ms);
* 8 processes: 8 OS processes, each acquire + release of one lock in a loop (locks/s in total).

Rows: distlock lease mode (tables), distlock session mode (``?mode=session``; on MySQL also with
``session_lock=row``), the raw server primitive
(``SELECT GET_LOCK(name, t)`` / ``RELEASE_LOCK``, ``pg_advisory_lock`` / ``pg_advisory_unlock`` on one
connection: the floor of a connection-bound lock), and tooz's mysql / postgresql drivers when tooz is
importable.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import distlock  # noqa: E402
from benchmarks._interleave import interleaved_rates  # noqa: E402
from distlock._core import sql_lease as sq  # noqa: E402
from distlock._url import parse_url  # noqa: E402


class Lib:
    name = ""
    db = ""

    def __init__(self, url: str) -> None:
        self.url = url

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Distlock(Lib):
    mode = "lease"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        sep = "&" if "?" in url else "?"
        extra = {"lease": "", "session": "mode=session", "row": "mode=session&session_lock=row"}[self.mode]
        self.store = distlock.connect(f"{url}{sep}{extra}" if extra else url)

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        lk = self.store.lock(name, ttl=30)

        def acquire() -> None:
            assert lk.acquire(timeout=60)

        return acquire, lk.release

    def close(self) -> None:
        self.store.close()


class MysqlLease(Distlock):
    name, db, mode = "distlock mysql (lease)", "mysql", "lease"


class MysqlSession(Distlock):
    name, db, mode = "distlock mysql (session)", "mysql", "session"


class MysqlRow(Distlock):
    name, db, mode = "distlock mysql (session, row lock)", "mysql", "row"


class PgLease(Distlock):
    name, db, mode = "distlock postgres (lease)", "postgres", "lease"


class PgSession(Distlock):
    name, db, mode = "distlock postgres (session)", "postgres", "session"


def _kwargs(url: str) -> dict[str, Any]:
    cfg = parse_url(url)
    host, port = cfg.hosts[0]
    return {"host": host, "port": port, "user": cfg.username, "password": cfg.password, "db": cfg.path.lstrip("/")}


class RawGetLock(Lib):
    name, db = "raw GET_LOCK", "mysql"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import pymysql

        k = _kwargs(url)
        self.conn = pymysql.connect(host=k["host"], port=k["port"], user=k["user"], password=k["password"],
                                    database=k["db"], autocommit=True)  # fmt: skip

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        cur = self.conn.cursor()

        def acquire() -> None:
            cur.execute("SELECT GET_LOCK(%s, 60)", (name,))
            assert cur.fetchone()[0] == 1  # type: ignore[index]

        def release() -> None:
            cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
            cur.fetchone()

        return acquire, release

    def close(self) -> None:
        self.conn.close()


class RawAdvisory(Lib):
    name, db = "raw pg_advisory_lock", "postgres"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import psycopg

        k = _kwargs(url)
        self.conn = psycopg.connect(host=k["host"], port=k["port"], user=k["user"], password=k["password"],
                                    dbname=k["db"], autocommit=True)  # fmt: skip

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        key = sq.advisory_key(name)
        cur = self.conn.cursor()

        def acquire() -> None:
            cur.execute("SELECT pg_advisory_lock(%s)", (key,))

        def release() -> None:
            cur.execute("SELECT pg_advisory_unlock(%s)", (key,))

        return acquire, release

    def close(self) -> None:
        self.conn.close()


class Tooz(Lib):
    #: what acquire() gets: a number of seconds (tooz's mysql driver passes it to GET_LOCK, which waits in
    #: the server; its postgresql driver then polls pg_try_advisory_lock with backoff up to 1 s), or True
    #: (postgresql: a blocking pg_advisory_lock; mysql: GET_LOCK(name, 0) polled with the same backoff)
    blocking: bool | float = 60

    def __init__(self, url: str) -> None:
        super().__init__(url)
        from tooz import coordination

        k = _kwargs(url)
        scheme = "mysql" if self.db == "mysql" else "postgresql"
        turl = f"{scheme}://{k['user']}:{k['password']}@{k['host']}:{k['port']}/{k['db']}"
        self.coord = coordination.get_coordinator(turl, uuid.uuid4().hex.encode())
        self.coord.start()

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        lk = self.coord.get_lock(name.encode())

        def acquire() -> None:
            assert lk.acquire(blocking=self.blocking)

        return acquire, lk.release

    def close(self) -> None:
        self.coord.stop()


class ToozMysql(Tooz):
    name, db = "tooz mysql", "mysql"


class ToozPg(Tooz):
    name, db = "tooz postgresql", "postgres"


class ToozPgBlocking(Tooz):
    name, db, blocking = "tooz postgresql (blocking=True)", "postgres", True


LIBS: dict[str, type[Lib]] = {
    "mysql-lease": MysqlLease,
    "mysql-session": MysqlSession,
    "mysql-row": MysqlRow,
    "mysql-raw": RawGetLock,
    "mysql-tooz": ToozMysql,
    "pg-lease": PgLease,
    "pg-session": PgSession,
    "pg-raw": RawAdvisory,
    "pg-tooz": ToozPg,
    "pg-tooz-block": ToozPgBlocking,
}


def available(key: str) -> bool:
    """Can this interpreter run that row? tooz needs its own environment (see docs/sql.md): tooz itself
    and the drivers its mysql / postgresql drivers import (PyMySQL, psycopg2)."""
    if key.startswith("mysql-tooz"):
        modules = ["tooz.coordination", "pymysql"]
    elif key.startswith("pg-tooz"):
        modules = ["tooz.coordination", "psycopg2"]
    else:
        modules = ["pymysql"] if LIBS[key].db == "mysql" else ["psycopg"]
    for module in modules:
        try:
            __import__(module)
        except ImportError as exc:
            print(f"{key}: cannot import {module} ({exc}), skipped", file=sys.stderr)
            return False
    return True


def uncontended(libs: list[Lib], seconds: float, slices: int = 10) -> list[float]:
    """Locks/s of each lib, in interleaved slices (see benchmarks/_interleave.py)."""
    return interleaved_rates([lib.lock(f"u-{uuid.uuid4().hex[:8]}") for lib in libs], seconds, slices)


def handoff(cls: type[Lib], url: str, rounds: int) -> tuple[float, float, int]:
    """(p50 ms, p99 ms, number of hand-offs seen): a lock that lets the releaser take it again at once
    (barging, or a waiter asleep in a poll backoff) hands over less often than once per round."""
    a, b = cls(url), cls(url)
    name = f"h-{uuid.uuid4().hex[:8]}"
    locks = [a.lock(name), b.lock(name)]
    samples: list[float] = []
    last = {"by": -1, "at": 0.0}

    def player(me: int) -> None:
        acquire, release = locks[me]
        for _ in range(rounds):
            acquire()
            now = time.perf_counter()
            if last["by"] not in (-1, me):
                samples.append(now - last["at"])
            time.sleep(0.01)
            last["by"], last["at"] = me, time.perf_counter()
            release()

    threads = [threading.Thread(target=player, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a.close()
    b.close()
    samples.sort()
    if not samples:
        return float("nan"), float("nan"), 0
    return statistics.median(samples) * 1000, samples[max(0, int(len(samples) * 0.99) - 1)] * 1000, len(samples)


def worker(key: str, url: str, name: str, seconds: float) -> None:
    lib = LIBS[key](url)
    acquire, release = lib.lock(name)
    acquire()
    release()
    print("READY", flush=True)
    sys.stdin.readline()
    n = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        acquire()
        release()
        n += 1
    lib.close()
    print(n, flush=True)


def processes(key: str, url: str, seconds: float, n: int = 8) -> float:
    name = f"p-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", key, url, name, str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    total = 0
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 180)
        total += int(out.strip().splitlines()[-1])
    return total / seconds


@contextmanager
def servers(mysql_url: str | None, pg_url: str | None, only: str | None) -> Iterator[dict[str, str]]:
    urls: dict[str, str] = {}
    with ExitStack() as stack:
        if only in (None, "mysql"):
            if mysql_url is None:
                from tools.servers.mysql import mariadb_server

                mysql_url = stack.enter_context(mariadb_server()).url
            urls["mysql"] = mysql_url
        if only in (None, "postgres"):
            if pg_url is None:
                from tools.servers.postgres import postgres_server

                pg_url = stack.enter_context(postgres_server()).url
            urls["postgres"] = pg_url
        yield urls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mysql")
    ap.add_argument("--postgres")
    ap.add_argument("--only", choices=["mysql", "postgres"])
    ap.add_argument("--libs", help="comma-separated rows to run (default: all importable): " + ",".join(LIBS))
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=4, metavar=("LIB", "URL", "NAME", "SECONDS"))
    args = ap.parse_args()
    if args.worker:
        key, url, name, seconds = args.worker
        worker(key, url, name, float(seconds))
        return
    results: dict[str, dict[str, Any]] = {}
    with servers(args.mysql, args.postgres, args.only) as urls:
        for db, url in urls.items():
            wanted = [k for k, cls in LIBS.items() if cls.db == db and (not args.libs or k in args.libs.split(","))]
            keys = [k for k in wanted if available(k)]
            if not keys:
                continue
            libs = [LIBS[k](url) for k in keys]
            rates = uncontended(libs, args.seconds * len(libs))
            for lib in libs:
                lib.close()
            for key, rate in zip(keys, rates, strict=True):
                cls = LIBS[key]
                row: dict[str, Any] = {"uncontended": rate}
                row["handoff_p50_ms"], row["handoff_p99_ms"], row["handoff_samples"] = handoff(cls, url, args.rounds)
                row["processes_8"] = processes(key, url, args.seconds)
                results[cls.name] = row
                print(cls.name, {k: round(v, 2) for k, v in row.items()}, file=sys.stderr)
    print("| library | uncontended locks/s | vs raw | hand-off p50 ms | hand-off p99 ms | 8 processes locks/s |")
    print("|---|---|---|---|---|---|")
    raws = {"mysql": results.get(RawGetLock.name), "postgres": results.get(RawAdvisory.name)}
    for cls in LIBS.values():
        row = results.get(cls.name)
        if row is None:
            continue
        raw = raws.get(cls.db)
        ratio = f"{row['uncontended'] / raw['uncontended']:.2f}x" if raw else "-"
        cells = [f"{row['uncontended']:.0f}", ratio, f"{row['handoff_p50_ms']:.2f}", f"{row['handoff_p99_ms']:.2f}",
                 f"{row['processes_8']:.0f}"]  # fmt: skip
        print(f"| {cls.name} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""distlock's MySQL/MariaDB and PostgreSQL backends (both modes) against raw connection-bound locks and tooz:
``peers.py --only mysql,postgres``.

    .venv/bin/python benchmarks/sql_peers.py [--mysql URL] [--postgres URL] [--seconds 3] [--only mysql|postgres]
                                             [--libs mysql-raw,...] [--json FILE]

Without URLs it starts a MariaDB and a PostgreSQL server from the Debian packages (tools/servers/). Rows:
distlock lease mode (tables), distlock session mode (``?mode=session``; on MySQL also with ``session_lock=row``),
the raw server primitive (``SELECT GET_LOCK(name, t)`` / ``RELEASE_LOCK``, ``pg_advisory_lock`` /
``pg_advisory_unlock`` on one connection: the floor of a connection-bound lock, and a peer), and tooz's mysql /
postgresql drivers when tooz and its drivers import. What is measured, and how, is benchmarks/peers.py's
(docs/bench.md).
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks._measure import Distlock, Lib, Pair  # noqa: E402
from distlock._backends.sql import names as sn  # noqa: E402
from distlock._url import parse_url  # noqa: E402


class MysqlLease(Distlock):
    name, key = "distlock (lease)", "mysql-lease"


class MysqlSession(Distlock):
    name, key, query = "distlock (session)", "mysql-session", "mode=session"


class MysqlRow(Distlock):
    name, key, query = "distlock (session, row lock)", "mysql-row", "mode=session&session_lock=row"


class PgLease(Distlock):
    name, key = "distlock (lease)", "pg-lease"


class PgSession(Distlock):
    name, key, query = "distlock (session)", "pg-session", "mode=session"


def _kwargs(url: str) -> dict[str, Any]:
    cfg = parse_url(url)
    host, port = cfg.hosts[0]
    return {"host": host, "port": port, "user": cfg.username, "password": cfg.password, "db": cfg.path.lstrip("/")}


class RawGetLock(Lib):
    name, key = "raw GET_LOCK", "mysql-raw"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import pymysql

        k = _kwargs(url)
        self.conn = pymysql.connect(host=k["host"], port=k["port"], user=k["user"], password=k["password"],
                                    database=k["db"], autocommit=True)  # fmt: skip

    def lock(self, name: str) -> Pair:
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
    name, key = "raw pg_advisory_lock", "pg-raw"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import psycopg

        k = _kwargs(url)
        self.conn = psycopg.connect(host=k["host"], port=k["port"], user=k["user"], password=k["password"],
                                    dbname=k["db"], autocommit=True)  # fmt: skip

    def lock(self, name: str) -> Pair:
        key = sn.advisory_key(name)
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
    scheme = ""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        for module in ("pymysql",) if self.scheme == "mysql" else ("psycopg2",):
            __import__(module)  # tooz's driver imports it only when connecting: say so before
        from tooz import coordination

        k = _kwargs(url)
        turl = f"{self.scheme}://{k['user']}:{k['password']}@{k['host']}:{k['port']}/{k['db']}"
        self.coord = coordination.get_coordinator(turl, uuid.uuid4().hex.encode())
        self.coord.start()

    def lock(self, name: str) -> Pair:
        lk = self.coord.get_lock(name.encode())

        def acquire() -> None:
            assert lk.acquire(blocking=self.blocking)

        return acquire, lk.release

    def close(self) -> None:
        self.coord.stop()


class ToozMysql(Tooz):
    name, key, scheme = "tooz mysql", "mysql-tooz", "mysql"


class ToozPg(Tooz):
    name, key, scheme = "tooz postgresql", "pg-tooz", "postgresql"


class ToozPgBlocking(ToozPg):
    name, key, blocking = "tooz postgresql (blocking=True)", "pg-tooz-block", True


MYSQL_LIBS: list[type[Lib]] = [MysqlLease, MysqlSession, MysqlRow, RawGetLock, ToozMysql]
POSTGRES_LIBS: list[type[Lib]] = [PgLease, PgSession, RawAdvisory, ToozPg, ToozPgBlocking]


def main() -> None:
    import argparse

    from benchmarks import peers

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mysql", help="a MySQL/MariaDB URL to use instead of starting a server")
    ap.add_argument("--postgres", help="a PostgreSQL URL to use instead of starting a server")
    ap.add_argument("--only", choices=["mysql", "postgres"])
    ap.add_argument("--libs", help="comma-separated rows: " + ",".join(c.key for c in MYSQL_LIBS + POSTGRES_LIBS))
    peers.add_common_options(ap)
    args = ap.parse_args()
    urls = {db: url for db, url in (("mysql", args.mysql), ("postgres", args.postgres)) if url}
    peers.run_and_report(args, [args.only] if args.only else ["mysql", "postgres"], urls, args.libs)


if __name__ == "__main__":
    main()

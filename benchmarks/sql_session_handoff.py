#!/usr/bin/env python3
"""Where a session-mode hand-off goes: distlock's own statements sent bare, against the raw call and the whole lock.

    .venv/bin/python benchmarks/sql_session_handoff.py [--rounds 4] [--seconds 3] [--only mysql|postgres]
                                                       [--mysql URL] [--postgres URL]

Two processes take strict turns on one name (3 ms holds: ``distlock bench``'s hand-off, through
``benchmarks/_measure.py`` as every peers script); the hand-off is timed from the holder's release call to the
waiter's acquire returning. Per database, the variants (every round runs
each, every other round in reverse order; a line per round with each p50 and its multiple of the raw one):

* ``raw``: ``GET_LOCK`` / ``RELEASE_LOCK`` (``pg_advisory_lock`` / ``pg_advisory_unlock``) on two bare
  connections;
* ``lock+fence``: the raw call with the next fence drawn in the same statement (MariaDB ``NEXTVAL``, PostgreSQL
  ``nextval``), nothing written: what a fence costs the server when nobody else can read it;
* ``statements``: distlock's own statements, built by the library (``sql/session.py``: the blocking acquire of a
  connection whose holder record is written, and the release), sent from bare connections: the server's part
  and the driver's, no distlock Python between them;
* ``distlock``: two stores with ``?mode=session``, ``lock.acquire()`` / ``lock.release()``.

``statements`` against ``raw`` is what the server and the wire add; ``distlock`` against ``statements`` is
the client's part. Without URLs it starts a MariaDB and a PostgreSQL server (tools/servers/).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks import _measure, sql_peers  # noqa: E402
from benchmarks._measure import Lib, Pair  # noqa: E402


def _connect(db: str, url: str) -> Any:
    k = sql_peers._kwargs(url)
    if db == "mysql":
        import pymysql

        return pymysql.connect(
            host=k["host"], port=k["port"], user=k["user"], password=k["password"], database=k["db"],
            autocommit=True, client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS,
        )  # fmt: skip
    import psycopg

    return psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True)


def _run(conn: Any, sql: str, params: Any) -> None:
    """Send ``sql`` and read every answer (a MariaDB multi-statement has one per statement)."""
    with conn.cursor() as cur:
        cur.execute(sql, params)
        while True:
            if cur.description is not None:
                cur.fetchall()
            if not cur.nextset():
                return


class _Bare(Lib):
    """A lock taken with given statements on a bare connection (no distlock code between them)."""

    db = ""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.conn = _connect(self.db, url)

    def statements(self, name: str) -> tuple[str, Any, str, Any]:
        raise NotImplementedError

    def lock(self, name: str) -> Pair:
        take, take_params, give, give_params = self.statements(name)
        return (lambda: _run(self.conn, take, take_params)), (lambda: _run(self.conn, give, give_params))

    def close(self) -> None:
        self.conn.close()


class _LockFence(_Bare):
    """The raw call with the next fence drawn in the same statement, nothing written."""

    def statements(self, name: str) -> tuple[str, Any, str, Any]:
        if self.db == "mysql":
            return "SELECT GET_LOCK(%s, 60), NEXTVAL(distlock_fence_seq)", (name,), "SELECT RELEASE_LOCK(%s)", (name,)
        key = zlib.crc32(name.encode())  # the same in every process (hash() is salted per process)
        return ("SELECT pg_advisory_lock(%s::bigint), nextval('distlock_fence_seq')", (key,),
                "SELECT pg_advisory_unlock(%s::bigint)", (key,))  # fmt: skip


class _Statements(_Bare):
    """distlock's own statements, built by the library: the blocking acquire of a connection whose holder record
    is written (every acquire after a connection's first of the name), and the release."""

    def statements(self, name: str) -> tuple[str, Any, str, Any]:
        import distlock
        from distlock._backends.sql import session as ss
        from distlock._core import ids
        from distlock._core.types import Claim, Mode

        with distlock.connect(f"{self.url}?mode=session") as store:  # the tables and the fence sequence
            b: Any = store._acquirer.backend
            claim = Claim(name=f"bench/{name}", mode=Mode.EXCLUSIVE, token=ids.new_token(),
                          owner=ids.owner_id("bench", None), ttl=30.0, want=1)  # fmt: skip
            take = ss.session_acquire(b.dialect, b.prefix, claim, 60.0, None, b.fast_session, recorded=True)
            give = ss.session_unlock(b.dialect, claim)
        return take.sql, take.params, give.sql, give.params


class MysqlLockFence(_LockFence):
    db = "mysql"


class PgLockFence(_LockFence):
    db = "postgres"


class MysqlStatements(_Statements):
    db = "mysql"


class PgStatements(_Statements):
    db = "postgres"


VARIANTS: dict[str, dict[str, type[Lib]]] = {
    "mysql": {"raw": sql_peers.RawGetLock, "lock+fence": MysqlLockFence, "statements": MysqlStatements,
              "distlock": sql_peers.MysqlSession},
    "postgres": {"raw": sql_peers.RawAdvisory, "lock+fence": PgLockFence, "statements": PgStatements,
                 "distlock": sql_peers.PgSession},
}  # fmt: skip


@contextlib.contextmanager
def _servers(args: argparse.Namespace, dbs: list[str]) -> Iterator[dict[str, str]]:
    from tools.servers.mysql import mariadb_server
    from tools.servers.postgres import postgres_server

    with contextlib.ExitStack() as stack:
        urls = {}
        for db in dbs:
            start = mariadb_server if db == "mysql" else postgres_server
            urls[db] = getattr(args, db) or str(stack.enter_context(start()).url)
        yield urls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--only", choices=["mysql", "postgres"])
    ap.add_argument("--mysql", help="a MariaDB URL to use instead of starting a server")
    ap.add_argument("--postgres", help="a PostgreSQL URL to use instead of starting a server")
    args = ap.parse_args()
    dbs = [args.only] if args.only else ["mysql", "postgres"]
    with _servers(args, dbs) as urls:
        for r in range(args.rounds):
            for db in dbs:
                variants = VARIANTS[db]
                names = list(variants)
                res = {v: _measure.handoff(variants[v], urls[db], args.seconds)["latency_ms"]["p50"]
                       for v in (names if r % 2 == 0 else names[::-1])}  # fmt: skip
                raw = res["raw"]
                print(f"round {r} {db}: " + " | ".join(f"{v} {res[v]:.3f} ms = {res[v] / raw:.2f}x" for v in names),
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()

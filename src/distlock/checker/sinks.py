"""The data sinks of ``distlock check --sink``: real resources the workers write to while they believe they hold
the lock, and the writers that decide how.

The lock is only half of the story: what matters is whether a holder that lost its lock (paused past its lease,
cut off by a gray link) can still change the data. Each holding of a worker makes two accesses to every
resource: a *read* right after the grant (the start of a read-modify-write; a fenced writer registers its fence
with it) and a *write* at the end of its critical section. Three writers, one resource each per sink:

* ``unfenced`` -- writes blindly. Under the pause fault it must be *seen* writing stale data: that proves the
  checker can catch a stale write.
* ``fenced`` -- the project's helpers with the holding's fence: ``fencing.check`` in the write's own SQL
  transaction, ``fencing.redis_set``, ``fencing.replace_file``. The resource refuses a fence lower than one it
  has seen.
* ``scoped`` -- guarded by the local lease: ``lock.check()`` right before the access (the sync API), or the
  access as the body of ``async with lock.lease_timeout():`` (the asyncio API), which is cancelled at the
  local lease end. Nothing at the resource compares fences.

Every resource records each access it *accepted*, in the order it accepted them, with the worker, the
operation, the holding's fence (for every writer, fenced or not: the record is the checker's, not the
writer's) and the writer's monotonic time. A write is *stale* when the resource had already accepted an
access with a higher fence: a newer holder had started on the resource (its read), so the write lands on
data a newer holder relies on. ``sink_analysis.sink_figures`` counts them.

* **sql** -- the SQLite file of the run by default; the PostgreSQL or MariaDB/MySQL server itself when that is
  the backend under test. One transaction per access: the fence check (fenced writer), a per-resource counter
  row bumped (its row lock orders the transactions; the counter is the order) and the record inserted.
* **redis** -- the backend's Redis when it is a single ``redis://`` server, else one the checker starts. The
  data is a hash (a field per access, written by ``redis_set`` for the fenced writer); a list logs every
  attempt in the same ``MULTI`` as the write, so the list's order is the server's order, and the hash says
  which attempts were accepted.
* **file** -- files in the run's directory: the data file (``replace_file`` for the fenced writer, a plain
  write otherwise) and an append-only log, both changed under one ``flock`` so the log's order is the order
  the file took the writes in.

The sinks' connections go straight to their servers, never through the gray-fault proxies: a link to the lock
server that is frozen while the data is reachable is the dangerous case.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import fencing
from .._errors import ConfigError, StaleFence

SINKS = ("sql", "redis", "file")
WRITERS = ("unfenced", "fenced", "scoped")
#: one access's record: kind ("read" or "write"), worker, op, fence, t
Record = dict[str, Any]


@dataclass(frozen=True)
class SinkSpec:
    """Which sinks and writers a run uses, and where the sinks are; picklable (each worker opens its own)."""

    sinks: tuple[str, ...]
    writers: tuple[str, ...]
    sql_url: str  # sqlite:///<path in the run's directory>, or the postgres/mysql backend's URL
    redis_url: str | None
    directory: str
    run: str  # the run's tag: every resource's name carries it

    def resource(self, writer: str) -> str:
        return f"distlock-check/{self.run}/{writer}"


class Sink:
    """One resource store; ``access`` is one accepted-or-refused access, ``accepted`` reads the order back."""

    kind = ""

    def create(self, resources: list[str]) -> None:
        """Make the resources (the parent, once, before the workers start)."""

    def access(self, resource: str, rec: Record, fence: int | None) -> bool:
        """Apply one access; False when the resource refused it (a stale fence), nothing changed then."""
        raise NotImplementedError

    def accepted(self, resource: str) -> list[Record]:
        """Every access ``resource`` accepted, in the order it accepted them."""
        raise NotImplementedError

    async def aaccess(self, resource: str, rec: Record, fence: int | None) -> bool:
        """``access`` from an event loop (``--api async``): the sink's asyncio client where it has one (and the
        ``fencing`` helpers' async twins), else the blocking call in a thread."""
        return await asyncio.to_thread(self.access, resource, rec, fence)

    def cleanup(self, resources: list[str]) -> None:
        """Remove what the run left on a server that outlives it."""

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        self.close()


# -- SQL ------------------------------------------------------------------------------------------------------
DATA, LOG = "distlock_check_data", "distlock_check_log"
#: in ``SqlSink._run``'s parameters: the value the statement before returned
N = object()


def sql_dialect(url: str) -> str:
    from .._url import parse_url

    backend = parse_url(url).backend
    if backend not in ("sqlite", "postgres", "mysql"):
        raise ConfigError(f"the sql sink writes to SQLite, PostgreSQL or MySQL, not {backend}")
    return backend


class SqlSink(Sink):
    kind = "sql"

    def __init__(self, url: str) -> None:
        self.url = url
        self.dialect = sql_dialect(url)
        self.p = "?" if self.dialect == "sqlite" else "%s"
        self._conn: Any = None
        self._aconn: Any = None

    def _connect(self) -> Any:
        from .._url import parse_url

        cfg = parse_url(self.url)
        if self.dialect == "sqlite":
            conn = sqlite3.connect(cfg.path, isolation_level=None, timeout=60.0, check_same_thread=False)
            conn.execute("PRAGMA synchronous=NORMAL")
            return conn
        host, port = cfg.hosts[0]
        if self.dialect == "postgres":
            import psycopg

            return psycopg.connect(host=host, port=port, user=cfg.username, password=cfg.password,
                                   dbname=cfg.path.strip("/") or None, connect_timeout=10)  # fmt: skip
        import pymysql

        return pymysql.connect(host=host, port=port, user=cfg.username or "root", password=cfg.password or "",
                               database=cfg.path.strip("/") or None, connect_timeout=10, read_timeout=30,
                               write_timeout=30)  # fmt: skip

    def _db(self) -> Any:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _run(self, statements: list[tuple[str, tuple[Any, ...]]], fence: tuple[str, int] | None = None) -> list[Any]:
        """One transaction: the fence check (if any), then ``statements``, where a parameter ``N`` stands for
        the first column of the row the statement before returned; the rows the last one returned."""
        conn = self._db()
        if self.dialect == "sqlite":
            conn.execute("BEGIN IMMEDIATE")
        try:
            if fence is not None:
                fencing.check(conn, *fence)
            cur = conn.cursor()
            rows: list[Any] = []
            for sql, params in statements:
                cur.execute(sql, _bound(params, rows))
                rows = list(cur.fetchall()) if cur.description else []
            cur.close()
            conn.execute("COMMIT") if self.dialect == "sqlite" else conn.commit()
            return rows
        except StaleFence:
            conn.execute("ROLLBACK") if self.dialect == "sqlite" else conn.rollback()
            raise
        except BaseException:
            self.close()  # a connection in an unknown state is not reused
            raise

    def create(self, resources: list[str]) -> None:
        if self.dialect == "sqlite":
            with contextlib.closing(sqlite3.connect(sqlite_path(self.url), isolation_level=None)) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
        conn = self._db()
        fencing.create_table(conn)
        text = "VARCHAR(200)" if self.dialect == "mysql" else "TEXT"
        p = self.p
        self._run(
            [
                (f"CREATE TABLE IF NOT EXISTS {DATA} (res {text} PRIMARY KEY, n BIGINT NOT NULL)", ()),
                (f"CREATE TABLE IF NOT EXISTS {LOG} (res {text} NOT NULL, n BIGINT NOT NULL, kind VARCHAR(8), "
                 "worker INTEGER, op VARCHAR(64), fence BIGINT, t DOUBLE PRECISION, PRIMARY KEY (res, n))", ()),
                *((f"INSERT INTO {DATA} (res, n) VALUES ({p}, 0)", (r,)) for r in resources),
            ]
        )  # fmt: skip

    def _logged(self, resource: str, rec: Record) -> list[tuple[str, tuple[Any, ...]]]:
        """An access: the resource's counter bumped (its row lock orders the transactions), its record logged."""
        p = self.p
        return [
            (f"UPDATE {DATA} SET n = n + 1 WHERE res = {p}", (resource,)),
            (f"SELECT n FROM {DATA} WHERE res = {p}", (resource,)),
            (f"INSERT INTO {LOG} (res, n, kind, worker, op, fence, t) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p})",
             (resource, N, rec["kind"], rec["worker"], rec["op"], rec["fence"], rec["t"])),
        ]  # fmt: skip

    def access(self, resource: str, rec: Record, fence: int | None) -> bool:
        try:
            self._run(self._logged(resource, rec), None if fence is None else (resource, fence))
        except StaleFence:
            return False
        return True

    async def aaccess(self, resource: str, rec: Record, fence: int | None) -> bool:
        if self.dialect == "sqlite":  # no asyncio driver for SQLite here: the blocking call in a thread
            return await super().aaccess(resource, rec, fence)
        conn = self._aconn = self._aconn or await self._aconnect()
        try:
            if fence is not None:
                await fencing.check_async(conn, resource, fence)
            rows: list[Any] = []
            async with conn.cursor() as cur:
                for sql, params in self._logged(resource, rec):
                    await cur.execute(sql, _bound(params, rows))
                    rows = list(await cur.fetchall()) if cur.description else []
            await conn.commit()
        except StaleFence:
            await conn.rollback()
            return False
        except BaseException:
            await self.aclose()  # (cancelled by lease_timeout() mid-transaction, too: never reused)
            raise
        return True

    async def _aconnect(self) -> Any:
        from .._url import parse_url

        cfg = parse_url(self.url)
        host, port = cfg.hosts[0]
        if self.dialect == "postgres":
            import psycopg

            return await psycopg.AsyncConnection.connect(host=host, port=port, user=cfg.username,
                                                         password=cfg.password, dbname=cfg.path.strip("/") or None,
                                                         connect_timeout=10)  # fmt: skip
        import aiomysql

        return await aiomysql.connect(host=host, port=port, user=cfg.username or "root", password=cfg.password or "",
                                      db=cfg.path.strip("/") or None, connect_timeout=10)  # fmt: skip

    async def aclose(self) -> None:
        conn, self._aconn = self._aconn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                done = conn.close()  # psycopg: a coroutine; aiomysql: closes at once
                if asyncio.iscoroutine(done):
                    await done
        self.close()

    def accepted(self, resource: str) -> list[Record]:
        p = self.p
        rows = self._run([(f"SELECT kind, worker, op, fence, t FROM {LOG} WHERE res = {p} ORDER BY n", (resource,))])
        return [{"kind": k, "worker": w, "op": o, "fence": f, "t": t} for k, w, o, f, t in rows]

    def cleanup(self, resources: list[str]) -> None:
        p = self.p
        for r in resources:
            self._run([(f"DELETE FROM {t} WHERE {c} = {p}", (r,)) for t, c in
                       ((LOG, "res"), (DATA, "res"), (fencing.TABLE, "resource"))])  # fmt: skip

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


def _bound(params: tuple[Any, ...], rows: list[Any]) -> tuple[Any, ...]:
    """``params`` with ``N`` replaced by the first column the statement before returned."""
    return tuple(rows[0][0] if v is N else v for v in params)


def sqlite_path(url: str) -> str:
    from .._url import parse_url

    return parse_url(url).path


# -- Redis ----------------------------------------------------------------------------------------------------
class _Logged:
    """A Redis client whose ``eval`` (the one call ``fencing.redis_set`` makes) runs in a ``MULTI`` with an
    ``RPUSH`` of the attempt to the log: the log's order is the order the server ran the scripts in."""

    def __init__(self, client: Any, log: str, entry: str) -> None:
        self._client, self._log, self._entry = client, log, entry

    def _pipe(self, args: tuple[Any, ...]) -> Any:
        pipe = self._client.pipeline(transaction=True)
        pipe.eval(*args)
        pipe.rpush(self._log, self._entry)
        return pipe

    def eval(self, *args: Any) -> Any:
        return self._pipe(args).execute()[0]


class _AsyncLogged(_Logged):
    """``_Logged`` on a ``redis.asyncio`` client, for ``fencing.redis_set_async``."""

    async def eval(self, *args: Any) -> Any:
        return (await self._pipe(args).execute())[0]


class RedisSink(Sink):
    kind = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self._client: Any = None
        self._aclient: Any = None

    def _db(self) -> Any:
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(self.url, socket_timeout=10, socket_connect_timeout=10)
        return self._client

    @staticmethod
    def _keys(resource: str) -> tuple[str, str]:
        return f"{resource}:data", f"{resource}:log"

    @classmethod
    def _plan(cls, client: Any, resource: str, rec: Record) -> tuple[str, str, str, Any]:
        """(data key, its field for this access, the entry, the unfenced write: a MULTI of HSET and RPUSH)."""
        data, log = cls._keys(resource)
        entry = json.dumps(rec, sort_keys=True)
        field = f"{rec['op']}:{rec['kind']}"
        pipe = client.pipeline(transaction=True)
        pipe.hset(data, field, entry)
        pipe.rpush(log, entry)
        return data, field, entry, pipe

    def access(self, resource: str, rec: Record, fence: int | None) -> bool:
        client = self._db()
        data, field, entry, blind = self._plan(client, resource, rec)
        try:
            if fence is None:
                blind.execute()
            else:
                fencing.redis_set(_Logged(client, self._keys(resource)[1], entry), data, entry, fence, field=field)
        except StaleFence:
            return False
        return True

    async def aaccess(self, resource: str, rec: Record, fence: int | None) -> bool:
        if self._aclient is None:
            import redis.asyncio

            self._aclient = redis.asyncio.Redis.from_url(self.url, socket_timeout=10, socket_connect_timeout=10)
        client = self._aclient
        data, field, entry, blind = self._plan(client, resource, rec)
        try:
            if fence is None:
                await blind.execute()
            else:
                logged = _AsyncLogged(client, self._keys(resource)[1], entry)
                await fencing.redis_set_async(logged, data, entry, fence, field=field)
        except StaleFence:
            return False
        return True

    async def aclose(self) -> None:
        client, self._aclient = self._aclient, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()
        self.close()

    def accepted(self, resource: str) -> list[Record]:
        data, log = self._keys(resource)
        client = self._db()
        taken = {f.decode() for f in client.hkeys(data)}
        attempts = [json.loads(e) for e in client.lrange(log, 0, -1)]
        return [r for r in attempts if f"{r['op']}:{r['kind']}" in taken]

    def cleanup(self, resources: list[str]) -> None:
        for r in resources:
            self._db().delete(*self._keys(r), fencing.fence_key(self._keys(r)[0]))

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


# -- local files ----------------------------------------------------------------------------------------------
class FileSink(Sink):
    kind = "file"

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def _paths(self, resource: str) -> tuple[Path, Path, Path]:
        base = self.directory / re.sub(r"[^A-Za-z0-9_.-]", "_", resource)
        return Path(f"{base}.data"), Path(f"{base}.log"), Path(f"{base}.lock")

    def access(self, resource: str, rec: Record, fence: int | None) -> bool:
        data, log, lock = self._paths(resource)
        entry = json.dumps(rec, sort_keys=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # the write and its log line, one at a time: the log is the order
            if fence is None:
                data.write_text(entry)
            else:
                try:
                    fencing.replace_file(data, entry, fence)
                except StaleFence:
                    return False
            with log.open("a") as fh:
                fh.write(entry + "\n")
            return True
        finally:
            os.close(fd)

    def accepted(self, resource: str) -> list[Record]:
        log = self._paths(resource)[1]
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def open_sink(kind: str, spec: SinkSpec) -> Sink:
    if kind == "sql":
        return SqlSink(spec.sql_url)
    if kind == "redis":
        if spec.redis_url is None:
            raise ConfigError("the redis sink has no server")
        return RedisSink(spec.redis_url)
    return FileSink(spec.directory)


__all__ = ["SINKS", "WRITERS", "FileSink", "RedisSink", "SinkSpec", "SqlSink", "open_sink"]

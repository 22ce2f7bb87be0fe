"""Fenced writes where the data lives: the resource refuses a writer whose fence is lower than one it has seen.

A lock's fence (``lock.fence``, ``election.term``) only protects data if the data's store compares it. These
helpers do the compare for you, atomically with the write, in the stores data usually lives in:

* **SQL**, through the connection (and the transaction) you already write with: ``check(conn, resource,
  fence)`` records ``fence`` for ``resource`` in a small table (``distlock_resource_fences``; ``create_table(conn)``
  once) and raises ``StaleFence`` if a higher one is recorded. Run it in the transaction of the write it
  guards: the row it updates stays locked until that transaction ends, so a stale writer cannot slip in
  between the check and the commit. psycopg 3, PyMySQL and sqlite3 connections (with SQLAlchemy, the driver
  connection of the session's transaction: ``session.connection().connection.driver_connection``);
  ``check_async`` for psycopg's ``AsyncConnection`` and aiomysql.
* **Redis** as a data store: ``redis_set(client, key, value, fence)`` (or a hash ``field``) writes only if no
  higher fence was recorded for that key, in one script; ``redis_set_async`` for ``redis.asyncio``.
* **Local files**: ``replace_file(path, data, fence)`` replaces the file atomically (a temporary file,
  ``fsync``, ``rename``) unless a higher fence was recorded beside it (``path.fence``).
* **An HTTP service**: the holder sends ``header(name, fence)`` with each request; ``fenced_wsgi`` /
  ``FencedASGI`` answer a stale one ``409 Conflict``, recording the highest fence per lock name in SQL
  (``SqlFences``) or Redis (``RedisFences``) so that it holds across the service's instances.
* **The lock itself**: ``store.check_fence(name, fence)`` asks the lock's store whether that fence is still a
  current holding (one round trip), for a resource that can reach the store.

Fences only go up per lock name; use one name per resource, or record per resource the fences of the one lock
that guards it. Equal fences pass: a holder's own second write carries the same fence.
"""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, unquote

from ._errors import ConfigError, StaleFence

__all__ = [
    "HEADER",
    "TABLE",
    "FencedASGI",
    "Fences",
    "RedisFences",
    "SqlFences",
    "check",
    "check_async",
    "create_table",
    "fence_key",
    "fenced_wsgi",
    "has_hash_tag",
    "header",
    "redis_set",
    "redis_set_async",
    "replace_file",
]

#: the table ``check`` records fences in (``table=`` picks another); not ``distlock_fences``, which a SQL lock
#: store in the same database keeps for its own counter
TABLE = "distlock_resource_fences"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?")


# -- SQL ----------------------------------------------------------------------------------------------------
def _dialect(conn: Any) -> tuple[str, Any]:
    """(dialect, DB-API connection) of what the caller writes with."""
    module = type(conn).__module__
    if module.startswith("sqlite3"):
        return "sqlite", conn
    if module.startswith("psycopg"):
        return "postgres", conn
    if module.startswith(("pymysql", "aiomysql", "MySQLdb")):
        return "mysql", conn
    raise ConfigError(
        f"fencing.check() takes a psycopg, PyMySQL, aiomysql or sqlite3 connection, not a {module} one (from "
        "SQLAlchemy, pass the one in the session's transaction: session.connection().connection.driver_connection)"
    )


def _table(table: str) -> str:
    if not _IDENT.fullmatch(table):
        raise ConfigError(f"fence table {table!r} is not a plain SQL identifier")
    return table


def _statements(dialect: str, table: str, resource: str, fence: int) -> list[tuple[str, Sequence[object]]]:
    """The check, as statements: the row made if missing, raised to ``fence`` unless it is higher (which
    locks it until the transaction ends), then read back: it holds ``fence`` exactly when the write may go on."""
    t = _table(table)
    p = "?" if dialect == "sqlite" else "%s"
    insert = {
        "postgres": f"INSERT INTO {t} (resource, fence) VALUES ({p}, {p}) ON CONFLICT (resource) DO NOTHING",
        # (not INSERT IGNORE: its duplicate-key warning becomes an exception or a warning in some drivers)
        "mysql": f"INSERT INTO {t} (resource, fence) VALUES ({p}, {p}) ON DUPLICATE KEY UPDATE resource = resource",
        "sqlite": f"INSERT OR IGNORE INTO {t} (resource, fence) VALUES ({p}, {p})",
    }[dialect]
    return [
        (insert, (resource, fence)),
        (f"UPDATE {t} SET fence = {p} WHERE resource = {p} AND fence <= {p}", (fence, resource, fence)),
        (f"SELECT fence FROM {t} WHERE resource = {p}", (resource,)),
    ]


def _fence(value: object) -> int:
    """A fence as the lock gave it (an int >= 0; its decimal string, as ``$DISTLOCK_FENCE`` carries it), else a
    one-line ``ConfigError``: a fence read wrong (``True``, ``2.5``, ``None``) must not be written as another."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"fence must be the lock's fence (an int >= 0, e.g. lock.fence), not {value!r}")
    return value


def _judge(resource: str, fence: int, row: Any) -> None:
    seen = None if row is None else int(row[0])
    if seen != fence:
        raise StaleFence(
            f"resource {resource!r} has seen fence {seen}: this writer's fence {fence} is stale (its lock was "
            "lost and taken by a newer holder); nothing was written"
        )


def create_table(conn: Any, table: str = TABLE) -> None:
    """Create the fence table if it is missing (once, at set-up: on MySQL a ``CREATE`` ends the transaction)."""
    dialect, raw = _dialect(conn)
    size = "VARCHAR(255)" if dialect == "mysql" else "TEXT"
    cur = raw.cursor()
    try:
        cur.execute(f"CREATE TABLE IF NOT EXISTS {_table(table)} (resource {size} PRIMARY KEY, fence BIGINT NOT NULL)")
    finally:
        cur.close()
    if dialect != "postgres" or not getattr(raw, "autocommit", False):
        raw.commit()


def check(conn: Any, resource: str, fence: int, *, table: str = TABLE) -> None:
    """Record ``fence`` for ``resource`` in the caller's current transaction, or raise ``StaleFence`` if the
    resource has seen a higher one (nothing is changed then; rolling back is the caller's). Call it in the
    transaction of the write it guards, before that write."""
    fence = _fence(fence)
    dialect, raw = _dialect(conn)
    cur = raw.cursor()
    try:
        for sql, params in _statements(dialect, table, resource, fence):
            cur.execute(sql, params)
        row = cur.fetchone()
    finally:
        cur.close()
    _judge(resource, fence, row)


async def check_async(conn: Any, resource: str, fence: int, *, table: str = TABLE) -> None:
    """``check`` on an asyncio connection (psycopg ``AsyncConnection``, aiomysql)."""
    fence = _fence(fence)
    dialect, raw = _dialect(conn)
    async with raw.cursor() as cur:
        for sql, params in _statements(dialect, table, resource, fence):
            await cur.execute(sql, params)
        row = await cur.fetchone()
    _judge(resource, fence, row)


# -- Redis --------------------------------------------------------------------------------------------------
#: KEYS: the data key and its fence key (``redis_set``), or the fence key alone (``RedisFences``: record only);
#: ARGV: fence, value, field ('' for a plain SET). The highest fence seen, or -1 if this one was recorded (and
#: the value written).
_REDIS_SCRIPT = """
local at = KEYS[#KEYS]
local seen = tonumber(redis.call('GET', at) or '-1')
if tonumber(ARGV[1]) < seen then return seen end
redis.call('SET', at, ARGV[1])
if #KEYS == 1 then return -1 end
if ARGV[3] == '' then redis.call('SET', KEYS[1], ARGV[2]) else redis.call('HSET', KEYS[1], ARGV[3], ARGV[2]) end
return -1
"""


def has_hash_tag(key: str) -> bool:
    """Does ``key`` name its Redis Cluster hash slot by a ``{tag}`` (a non-empty one, the first ``{...}``)?"""
    start = key.find("{")
    return start >= 0 and key.find("}", start + 1) > start + 1


def fence_key(key: str) -> str:
    """Where ``redis_set`` records ``key``'s fence: in ``key``'s Redis Cluster hash slot, except for a key with a
    ``}`` and no hash tag (no name can share its slot then: pass ``fence_key=`` on a cluster)."""
    if has_hash_tag(key) or "}" in key:
        return f"{key}:fence"
    return f"{{{key}}}:fence"


def _redis_args(key: str, value: bytes | str, fence: int, field: str | None, where: str | None) -> tuple[Any, ...]:
    return (_REDIS_SCRIPT, 2, key, where or fence_key(key), _fence(fence), value, field or "")


def _redis_judge(key: str, fence: int, seen: Any) -> None:
    if int(seen) != -1:
        raise StaleFence(f"Redis key {key!r} has seen fence {int(seen)}: this writer's fence {fence} is stale")


def redis_set(
    client: Any, key: str, value: bytes | str, fence: int, *, field: str | None = None, fence_key: str | None = None
) -> None:
    """``SET key value`` (``HSET key field value`` with ``field``) only if no fence higher than ``fence`` was
    recorded for ``key`` (at ``fence_key``, by default ``fencing.fence_key(key)``); ``StaleFence`` otherwise
    (nothing written). One script, atomic on the server."""
    _redis_judge(key, fence, client.eval(*_redis_args(key, value, fence, field, fence_key)))


async def redis_set_async(
    client: Any, key: str, value: bytes | str, fence: int, *, field: str | None = None, fence_key: str | None = None
) -> None:
    """``redis_set`` on a ``redis.asyncio`` client."""
    _redis_judge(key, fence, await client.eval(*_redis_args(key, value, fence, field, fence_key)))


# -- local files --------------------------------------------------------------------------------------------
def replace_file(path: str | os.PathLike[str], data: bytes | str, fence: int) -> None:
    """Replace the file at ``path`` with ``data`` unless a fence higher than ``fence`` was recorded for it
    (``StaleFence``, the file untouched). Writers of one host are serialised by an ``flock`` on the record
    ``path.fence``; the fence is recorded (and synced) before the file is replaced, so a crash in between
    leaves the old file and the new fence: a stale writer is still refused. The file is replaced atomically
    (a temporary file in its directory, ``fsync``, ``rename``, the directory synced). Local file systems:
    ``flock`` across NFS clients is not reliable."""
    import fcntl  # POSIX only

    fence = _fence(fence)
    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd = os.open(f"{target}.fence", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        seen_text = os.pread(fd, 64, 0).decode().strip()
        seen = int(seen_text) if seen_text else -1
        if fence < seen:
            raise StaleFence(f"file {str(target)!r} has seen fence {seen}: this writer's fence {fence} is stale")
        record = str(fence).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)
        os.fsync(fd)
        tmp_fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(tmp_fd, "wb") as out:
                out.write(payload)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        os.close(fd)  # (and the flock with it)


# -- an HTTP service ----------------------------------------------------------------------------------------
#: the request header a fenced caller sends: ``<fence> <lock name, percent-encoded>``
HEADER = "Distlock-Fence"


def header(name: str, fence: int) -> tuple[str, str]:
    """The header a holder sends with each request to a fenced service (``FencedASGI``, ``fenced_wsgi``):
    ``requests.post(url, headers=dict([fencing.header(lock.name, lock.fence)]))``."""
    return HEADER, f"{_fence(fence)} {quote(name, safe='')}"


def _parse(value: str) -> tuple[str, int] | None:
    fence, _, name = value.strip().partition(" ")
    if not fence.isdigit() or not name:
        return None
    return unquote(name), int(fence)


class SqlFences:
    """The highest fence per resource, in a SQL table (``check``) of a database every instance of the service
    reaches: ``connect()`` gives a new DB-API connection (closed after each record)."""

    def __init__(self, connect: Callable[[], Any], table: str = TABLE) -> None:
        self._connect = connect
        self._table = _table(table)

    def record(self, resource: str, fence: int) -> None:
        conn = self._connect()
        try:
            check(conn, resource, fence, table=self._table)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()


class RedisFences:
    """The highest fence per resource, in Redis (``redis.Redis``): one script per record (``redis_set``'s,
    with no data key)."""

    def __init__(self, client: Any, prefix: str = "distlock-fence:") -> None:
        self._client = client
        self._prefix = prefix

    def record(self, resource: str, fence: int) -> None:
        _redis_judge(resource, fence, self._client.eval(_REDIS_SCRIPT, 1, self._prefix + resource, _fence(fence)))


class Fences(Protocol):
    def record(self, resource: str, fence: int) -> None: ...


def _refusal(value: str | None, fences: Fences) -> str | None:
    """Why a request with this header value is refused (None: let it through)."""
    if value is None:
        return None  # not a fenced caller: the service decides what else it requires
    parsed = _parse(value)
    if parsed is None:
        return f"bad {HEADER} header: expected '<fence> <percent-encoded lock name>'"
    try:
        fences.record(*parsed)
    except StaleFence as stale:
        return str(stale)
    return None


def fenced_wsgi(app: Callable[..., Any], fences: Fences) -> Callable[..., Any]:
    """WSGI middleware: a request whose ``Distlock-Fence`` header carries a fence lower than one this resource
    (the lock name) has seen is answered ``409 Conflict`` and never reaches ``app``. The fence is recorded
    before the request is handed on, so it holds across every instance that shares ``fences``. It refuses a
    stale caller that arrives after a newer one; a write that must be atomic with its fence check belongs in
    the data store (``check``, ``redis_set``)."""

    def middleware(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        why = _refusal(environ.get("HTTP_DISTLOCK_FENCE"), fences)
        if why is None:
            return app(environ, start_response)
        body = why.encode()
        start_response("409 Conflict", [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]

    return middleware


class FencedASGI:
    """ASGI middleware, as ``fenced_wsgi``: a stale ``Distlock-Fence`` gets ``409 Conflict``. ``fences.record``
    runs on a worker thread (a database or Redis round trip must not block the event loop)."""

    def __init__(self, app: Callable[..., Any], fences: Fences) -> None:
        self._app = app
        self._fences = fences

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope.get("type") == "http":
            raw = dict(scope.get("headers") or []).get(HEADER.lower().encode())
            if raw is not None:
                why = await asyncio.to_thread(_refusal, raw.decode("latin-1"), self._fences)
                if why is not None:
                    body = why.encode()
                    await send({"type": "http.response.start", "status": 409,
                                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                            (b"content-length", str(len(body)).encode())]})  # fmt: skip
                    await send({"type": "http.response.body", "body": body})
                    return
        await self._app(scope, receive, send)

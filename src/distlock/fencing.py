"""Fenced writes where the data lives: the resource refuses a writer whose fence is lower than one it has seen.

A lock's fence (``lock.fence``, ``election.term``) only protects data if the data's store compares it. These
helpers do the compare for you, atomically with the write, in the stores data usually lives in:

* **SQL**, through the connection (and the transaction) you already write with: ``check(conn, resource,
  fence)`` records ``fence`` for ``resource`` in a small table (``distlock_fences``; ``create_table(conn)``
  once) and raises ``StaleFence`` if a higher one is recorded. Run it in the transaction of the write it
  guards: the row it updates stays locked until that transaction ends, so a stale writer cannot slip in
  between the check and the commit. psycopg 3, PyMySQL and sqlite3 connections (with SQLAlchemy, the driver
  connection of the session's transaction: ``session.connection().connection.driver_connection``);
  ``check_async`` for psycopg's ``AsyncConnection`` and aiomysql.
* **Redis** as a data store: ``redis_set(client, key, value, fence)`` (or a hash ``field``) writes only if no
  higher fence was recorded for that key, in one script; ``redis_set_async`` for ``redis.asyncio``.
* **Local files**: ``replace_file(path, data, fence)`` replaces the file atomically (a temporary file,
  ``fsync``, ``rename``) unless a higher fence was recorded beside it (``path.fence``).
* **The lock itself**: ``store.check_fence(name, fence)`` asks the lock's store whether that fence is still a
  current holding (one round trip), for a resource that can reach the store.

Fences only go up per lock name; use one name per resource, or record per resource the fences of the one lock
that guards it. Equal fences pass: a holder's own second write carries the same fence.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._errors import ConfigError, StaleFence

__all__ = [
    "TABLE",
    "check",
    "check_async",
    "create_table",
    "fence_key",
    "has_hash_tag",
    "redis_set",
    "redis_set_async",
    "replace_file",
]

#: the table ``check`` records fences in (``table=`` picks another)
TABLE = "distlock_fences"
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
    dialect, raw = _dialect(conn)
    cur = raw.cursor()
    try:
        for sql, params in _statements(dialect, table, resource, int(fence)):
            cur.execute(sql, params)
        row = cur.fetchone()
    finally:
        cur.close()
    _judge(resource, int(fence), row)


async def check_async(conn: Any, resource: str, fence: int, *, table: str = TABLE) -> None:
    """``check`` on an asyncio connection (psycopg ``AsyncConnection``, aiomysql)."""
    dialect, raw = _dialect(conn)
    async with raw.cursor() as cur:
        for sql, params in _statements(dialect, table, resource, int(fence)):
            await cur.execute(sql, params)
        row = await cur.fetchone()
    _judge(resource, int(fence), row)


# -- Redis --------------------------------------------------------------------------------------------------
#: KEYS: the data key, its fence key; ARGV: fence, value, field ('' for a plain SET). The highest fence seen,
#: or -1 if this one was recorded and the value written.
_REDIS_SCRIPT = """
local seen = tonumber(redis.call('GET', KEYS[2]) or '-1')
local fence = tonumber(ARGV[1])
if fence < seen then return seen end
redis.call('SET', KEYS[2], ARGV[1])
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
    return (_REDIS_SCRIPT, 2, key, where or fence_key(key), int(fence), value, field or "")


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

    target = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd = os.open(f"{target}.fence", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        seen_text = os.pread(fd, 64, 0).decode().strip()
        seen = int(seen_text) if seen_text else -1
        if int(fence) < seen:
            raise StaleFence(f"file {str(target)!r} has seen fence {seen}: this writer's fence {fence} is stale")
        record = str(int(fence)).encode()
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

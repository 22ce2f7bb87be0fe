"""The SQL text that differs between MySQL/MariaDB and PostgreSQL: each dialect's lease tables and primitives.

No I/O. The statements of each mode are in ``lease.py`` (lease tables), ``session.py`` (connection-bound
locks) and ``rowlock.py`` (MySQL's row locks); what they need to know of the database they find here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


def created_name(ddl: str) -> str:
    """The table/sequence/index a ``CREATE ... IF NOT EXISTS <name>`` statement creates."""
    m = re.search(r"IF NOT EXISTS\s+([A-Za-z0-9_]+)", ddl)
    return m.group(1) if m else ""


@dataclass(frozen=True)
class Dialect:
    """The SQL text that differs between the two databases (``%s`` placeholders in both drivers)."""

    name: str
    now: str  # an expression: seconds since the epoch, from the database's clock
    schema: tuple[str, ...]
    lock_name: str  # take the name's transaction lock and read the clock: (a, b) -> (locked, now)
    enqueue: str  # (token, key, name, mode, expires_at) -> join or refresh the deadline
    notify: str | None  # (channel, key): wake the listeners of the name, delivered at commit
    #: MySQL: ``lock_name`` with its answer kept in the session's ``@distlock_locked`` and ``@distlock_now``,
    #: for the statement sent after it in the same round trip (the transactional acquire, ``TxOps.acquire``)
    lock_into: str | None = None
    #: MySQL: ``lock_into`` sent right after a waiter's bell wait, in its round trip: the lock is taken only if
    #: the bell rang (``@distlock_rang`` = 1); else ``@distlock_locked`` is NULL and nothing is tried
    lock_after_bell: str | None = None


#: session mode: the last connection-bound holder of the name (its lock key, owner, mode, connection id)
_SESSION_COLUMNS = "lock_key VARCHAR(64) NULL, owner VARCHAR(255) NULL, mode VARCHAR(16) NULL, conn_id BIGINT NULL"


#: semaphores: a holding's permits, and the semaphore's declared and in-force capacities, copied into every live
#: row of the name (``sql/lease.py``); NULL in every other row, and in an older client's (one permit, no numbers)
WEIGHT_COLUMNS = {"holders": ("permits", "declared", "capacity"), "queue": ("want", "declared", "capacity")}
_HOLDER_WEIGHTS = ", ".join(f"{c} INTEGER NULL" for c in WEIGHT_COLUMNS["holders"])
_QUEUE_WEIGHTS = ", ".join(f"{c} INTEGER NULL" for c in WEIGHT_COLUMNS["queue"])


def _mysql_schema(p: str) -> tuple[str, ...]:
    opts = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_fences (name_key CHAR(64) NOT NULL PRIMARY KEY, name TEXT NOT NULL, "
        f"fence BIGINT NOT NULL, {_SESSION_COLUMNS}) {opts}",
        f"CREATE TABLE IF NOT EXISTS {p}_holders (token VARCHAR(64) NOT NULL PRIMARY KEY, "
        "name_key CHAR(64) NOT NULL, name TEXT NOT NULL, owner VARCHAR(255) NOT NULL, mode VARCHAR(16) NOT NULL, "
        f"fence BIGINT NOT NULL, expires_at DOUBLE NOT NULL, acquired_at DOUBLE NOT NULL, layout SMALLINT NOT NULL, "
        f"asked TEXT NULL, {_HOLDER_WEIGHTS}, KEY {p}_holders_name (name_key)) {opts}",
        f"CREATE TABLE IF NOT EXISTS {p}_queue (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "token VARCHAR(64) NOT NULL UNIQUE, name_key CHAR(64) NOT NULL, name TEXT NOT NULL, "
        f"mode VARCHAR(16) NOT NULL, expires_at DOUBLE NOT NULL, {_QUEUE_WEIGHTS}, "
        f"KEY {p}_queue_name (name_key, seq)) {opts}",
    )


def _pg_schema(p: str) -> tuple[str, ...]:
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_fences (name_key CHAR(64) PRIMARY KEY, name TEXT NOT NULL, "
        f"fence BIGINT NOT NULL, {_SESSION_COLUMNS})",
        f"CREATE TABLE IF NOT EXISTS {p}_holders (token VARCHAR(64) PRIMARY KEY, name_key CHAR(64) NOT NULL, "
        "name TEXT NOT NULL, owner TEXT NOT NULL, mode VARCHAR(16) NOT NULL, fence BIGINT NOT NULL, "
        "expires_at DOUBLE PRECISION NOT NULL, acquired_at DOUBLE PRECISION NOT NULL, layout SMALLINT NOT NULL, "
        f"asked TEXT NULL, {_HOLDER_WEIGHTS})",
        f"CREATE INDEX IF NOT EXISTS {p}_holders_name ON {p}_holders (name_key)",
        f"CREATE SEQUENCE IF NOT EXISTS {p}_fence_seq",
        f"CREATE TABLE IF NOT EXISTS {p}_queue (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
        "token VARCHAR(64) NOT NULL UNIQUE, name_key CHAR(64) NOT NULL, name TEXT NOT NULL, "
        "mode VARCHAR(16) NOT NULL, expires_at DOUBLE PRECISION NOT NULL, owner TEXT NULL, reply TEXT NULL, "
        f"{_QUEUE_WEIGHTS})",
        f"CREATE INDEX IF NOT EXISTS {p}_queue_name ON {p}_queue (name_key, seq)",
    )


#: MySQL: the session's idle timeout as it was before a transaction cut it (``MyDriver._begin`` keeps it in
#: ``@distlock_idle``)
MYSQL_IDLE_BEFORE = "CAST(COALESCE(@distlock_idle, @@session.wait_timeout) AS UNSIGNED)"


def mysql(prefix: str) -> Dialect:
    p = prefix
    return Dialect(
        name="mysql",
        now="UNIX_TIMESTAMP(NOW(6))",
        schema=_mysql_schema(p),
        lock_name="SELECT GET_LOCK(%s, %s), UNIX_TIMESTAMP(NOW(6))",
        enqueue=f"INSERT INTO {p}_queue (token, name_key, name, mode, expires_at) VALUES (%s, %s, %s, %s, %s) "
        "ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)",
        notify=None,
        # SET assigns left to right; NOW() is the statement's start, so the clock is read as lock_name's is
        lock_into="SET @distlock_locked = GET_LOCK(%s, %s), @distlock_now = UNIX_TIMESTAMP(NOW(6))",
        lock_after_bell="SET @distlock_locked = CASE WHEN @distlock_rang = 1 THEN GET_LOCK(%s, %s) END, "
        "@distlock_now = UNIX_TIMESTAMP(NOW(6))",
    )


def postgres(prefix: str) -> Dialect:
    p = prefix
    now = "extract(epoch from clock_timestamp())::float8"
    return Dialect(
        name="postgres",
        now=now,
        schema=_pg_schema(p),
        lock_name=f"SELECT pg_advisory_xact_lock(%s, %s)::text IS NOT NULL, {now}",
        enqueue=f"INSERT INTO {p}_queue (token, name_key, name, mode, expires_at) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (token) DO UPDATE SET expires_at = EXCLUDED.expires_at",
        notify="SELECT pg_notify(%s, %s)",
    )

"""Barriers of the SQL stores (MySQL/MariaDB and PostgreSQL, every mode): the statements, no I/O.

One table of their own, created at the first barrier call of a store (no lock or latch statement reads it, so a
barrier, a latch and a lock of one name never meet)::

    <prefix>_barriers(kind VARCHAR(16) = 'barrier' | 'double barrier', name_key CHAR(64) = SHA-256 of the name,
                      name, record = the JSON of ``_core/barrier.py``, expires_at BIGINT = when its last lease or
                      marker ends (ms of the wall clock), PRIMARY KEY (kind, name_key))

Each step is one transaction: the row is read ``FOR UPDATE``, the step applied, the row written back (deleted
when the record is empty). An arrival first inserts the row if it is missing (``INSERT IGNORE`` / ``ON CONFLICT
DO NOTHING``, so that two first arrivals queue on one row lock) and deletes every row whose time is up, of any
name: a barrier whose members all died leaves nothing once the store's barriers are used again.
"""

from __future__ import annotations

from collections.abc import Generator

from ..._core import barrier
from ..._errors import BackendError
from .dialects import Dialect
from .stmt import Result, Stmt


def table(dialect: Dialect, p: str) -> str:
    """The DDL of the barriers' table."""
    mysql = dialect.name == "mysql"
    text = "MEDIUMTEXT" if mysql else "TEXT"
    opts = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin" if mysql else ""
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_barriers (kind VARCHAR(16) NOT NULL, name_key CHAR(64) NOT NULL, "
        f"name TEXT NOT NULL, record {text} NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (kind, name_key)){opts}"
    )


def step(
    dialect: Dialect, p: str, kind: str, key: str, name: str, op: barrier.Op, now: int
) -> Generator[Stmt, Result, barrier.Reply]:
    where = "kind = %s AND name_key = %s"
    if op.kind == barrier.ARRIVE:
        yield Stmt(f"DELETE FROM {p}_barriers WHERE expires_at <= %s AND NOT ({where})", (now, kind, key))
        insert = "INSERT IGNORE INTO" if dialect.name == "mysql" else "INSERT INTO"
        tail = "" if dialect.name == "mysql" else " ON CONFLICT (kind, name_key) DO NOTHING"
        yield Stmt(
            f"{insert} {p}_barriers (kind, name_key, name, record, expires_at) VALUES (%s, %s, %s, '', %s){tail}",
            (kind, key, name, now),
        )
    found = yield Stmt(f"SELECT record FROM {p}_barriers WHERE {where} FOR UPDATE", (kind, key))
    data = str(found.rows[0][0]) if found.rows else ""
    try:
        record = barrier.decode(data or None)
    except ValueError:
        raise BackendError(f"the {kind} row of this name holds data distlock did not write", name=name) from None
    after, reply = barrier.step(record, op, now)
    new = barrier.encode(after)
    if new is None:
        if found.rows:
            yield Stmt(f"DELETE FROM {p}_barriers WHERE {where}", (kind, key))
    elif new != data:
        yield Stmt(
            f"UPDATE {p}_barriers SET record = %s, expires_at = %s WHERE {where}",
            (new, now + barrier.keep_ms(after, now), kind, key),
        )
    return reply

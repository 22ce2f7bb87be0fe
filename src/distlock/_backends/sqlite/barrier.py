"""Barriers of the SQLite and ``memory://`` stores: one row per barrier in a table of its own, which no lock or
latch query reads (so a barrier, a latch and a lock of one name never meet), created on the first barrier
call::

    distlock_barriers(kind, name, record, expires_at REAL, PRIMARY KEY (kind, name))
        -- kind: 'barrier' or 'double barrier'; record: the JSON of ``_core/barrier.py`` (open generation,
        -- its arrivals' leases, tripped markers); expires_at: when its last lease or marker ends

Each step is one ``BEGIN IMMEDIATE`` transaction (``Db.tx``) that first deletes every row whose time is up (of
any name: a barrier whose members all died leaves nothing once the file's barriers are used again), then reads
the row, applies the step and writes the row back, or deletes it when the record is empty. No async code: both
sides import it.
"""

from __future__ import annotations

import sqlite3

from ..._core import barrier
from ..._core.timing import wall_ms
from ..._core.types import PrimitiveInfo
from ..._errors import BackendError
from .ops import Ops

SCHEMA = """
CREATE TABLE IF NOT EXISTS distlock_barriers (
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    record TEXT NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY (kind, name)
)
"""


def listing(ops: Ops) -> list[tuple[str, str, PrimitiveInfo | None]]:
    """Every barrier row (kind, name, what ``list`` shows of it): a read, no write transaction."""
    conn, _now = ops.db.read()
    try:
        rows = conn.execute("SELECT kind, name, record FROM distlock_barriers").fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []  # no barrier was ever made in this database
        raise
    now = wall_ms()
    return [(str(k), str(n), barrier.summary(str(k), str(n), r, now)) for k, n, r in rows]


def step(ops: Ops, kind: str, name: str, op: barrier.Op) -> barrier.Reply:
    def body(conn: sqlite3.Connection, _now: float) -> barrier.Reply:
        now = wall_ms()
        conn.execute(SCHEMA)
        conn.execute("DELETE FROM distlock_barriers WHERE expires_at <= ?", (now / 1000,))
        row = conn.execute("SELECT record FROM distlock_barriers WHERE kind = ? AND name = ?", (kind, name)).fetchone()
        try:
            record = barrier.decode(None if row is None else row[0])
        except ValueError:
            raise BackendError(
                f"the {kind} row of this name holds data distlock did not write", name=name, backend=ops.db.scheme
            ) from None
        after, reply = barrier.step(record, op, now)
        data = barrier.encode(after)
        if data is None:
            conn.execute("DELETE FROM distlock_barriers WHERE kind = ? AND name = ?", (kind, name))
        elif data != barrier.encode(record):
            expires = (now + barrier.keep_ms(after, now)) / 1000
            conn.execute(
                "INSERT OR REPLACE INTO distlock_barriers (kind, name, record, expires_at) VALUES (?, ?, ?, ?)",
                (kind, name, data, expires),
            )
        return reply

    return ops.db.tx(body)

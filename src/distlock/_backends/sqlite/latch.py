"""Count-down latches of the SQLite and ``memory://`` stores: one row per latch in a table of its own, which no
lock query reads (so a latch and a lock of one name never meet), created on the first latch call::

    distlock_latches(name PK, round, initial, count, expires_at REAL NULL, recent)
        -- a latch: count > 0, expires_at NULL; its done marker: count = 0, expires_at = when it goes;
        -- recent: the ids of the last count-downs (``_core/latch.py``), so that one is never counted twice

Each creation and count-down is one ``BEGIN IMMEDIATE`` transaction (``Db.tx``) that first deletes every done
marker whose time is up (of any name: nothing stays of a latch once its marker has expired and the file's
latches are used again); a read is a plain read. The count-down that reaches 0 wakes the name's latch watchers where its waiters listen (in this
process by waker, in others by datagram), under a wake-up key no lock name can have (it starts with NUL).
No async code: both sides import it.
"""

from __future__ import annotations

import sqlite3

from ..._core.latch import LatchState, recent_after
from .ops import Ops

SCHEMA = """
CREATE TABLE IF NOT EXISTS distlock_latches (
    name TEXT PRIMARY KEY,
    round TEXT NOT NULL,
    initial INTEGER NOT NULL,
    count INTEGER NOT NULL,
    expires_at REAL,
    recent TEXT NOT NULL DEFAULT ''
)
"""


def wake_name(name: str) -> str:
    """The wake-up key of the latch ``name``: a NUL byte first, which no lock name has."""
    return "\x00latch\x00" + name


def _purge(conn: sqlite3.Connection, now: float) -> None:
    conn.execute(SCHEMA)
    conn.execute("DELETE FROM distlock_latches WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,))


def _row(conn: sqlite3.Connection, name: str) -> LatchState | None:
    row = conn.execute("SELECT round, initial, count FROM distlock_latches WHERE name = ?", (name,)).fetchone()
    return None if row is None else LatchState(str(row[0]), int(row[1]), int(row[2]))


def listing(ops: Ops) -> list[tuple[str, int, int]]:
    """Every latch (name, initial, count), its done marker while it stays: a read, no write transaction."""
    conn, now = ops.db.read()
    try:
        rows = conn.execute(
            "SELECT name, initial, count FROM distlock_latches WHERE expires_at IS NULL OR expires_at > ?", (now,)
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []  # no latch was ever made in this database
        raise
    return [(str(n), int(i), int(c)) for n, i, c in rows]


def open_latch(ops: Ops, name: str, count: int | None, round_id: str) -> LatchState | None:
    if count is None:  # a read (a waiter's, often): no write transaction; an expired marker still says "zero"
        conn, _now = ops.db.read()
        try:
            return _row(conn, name)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None  # no latch was ever made in this database
            raise

    def body(conn: sqlite3.Connection, now: float) -> LatchState | None:
        _purge(conn, now)
        state = _row(conn, name)
        if state is None and count is not None:
            conn.execute(
                "INSERT INTO distlock_latches (name, round, initial, count) VALUES (?, ?, ?, ?)",
                (name, round_id, count, count),
            )
            state = LatchState(round_id, count, count)
        return state

    return ops.db.tx(body)


def count_down(ops: Ops, name: str, round_id: str, step: str, linger: float) -> int:
    def body(conn: sqlite3.Connection, now: float) -> tuple[int, bool]:
        _purge(conn, now)
        row = conn.execute("SELECT round, count, recent FROM distlock_latches WHERE name = ?", (name,)).fetchone()
        if row is None or row[0] != round_id:
            return 0, False  # gone, or another round: nothing to take off
        if step in row[2].split() or row[1] <= 0:
            return max(0, int(row[1])), False  # counted already, or at zero: the count stands
        left = int(row[1]) - 1
        expires = now + linger if left == 0 else None
        conn.execute(
            "UPDATE distlock_latches SET count = ?, expires_at = ?, recent = ? WHERE name = ?",
            (left, expires, recent_after(row[2], step), name),
        )
        return left, left == 0

    left, reached = ops.db.tx(body)
    if reached:
        ops.wake(wake_name(name))
    return left

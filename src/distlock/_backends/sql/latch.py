"""Count-down latches of the SQL stores (MySQL/MariaDB and PostgreSQL, every mode): the statements, no I/O.

One table of their own, created at the first latch call of a store (no lock statement reads it, so a latch
and a lock of one name never meet)::

    <prefix>_latches(name_key CHAR(64) PK = SHA-256 of the name, name, round, initial, count,
                     expires_at NULL | the end of the done marker (the database's clock),
                     recent = the ids of the last count-downs, so that a retried one is not counted twice)

Each step is one transaction: a count-down reads the row ``FOR UPDATE`` and writes it back; the one that
reaches 0 writes ``expires_at`` = now + linger (the done marker) and, on PostgreSQL, a NOTIFY on the store's
wake-up channel whose payload is ``latch:<name key>`` (no lock's key: those are plain hex), delivered at
commit. Every creation first deletes the expired markers of every name: nothing of a latch stays once its
marker has expired and a latch of the store is created again. A read (``count=None``) writes nothing: an
expired marker it meets still says "at zero", which is what it stood for.
"""

from __future__ import annotations

from collections.abc import Generator

from ..._core.latch import LatchState, recent_after
from .dialects import Dialect
from .stmt import Result, Stmt, to_int


def table(dialect: Dialect, p: str) -> str:
    """The DDL of the latches' table."""
    real = "DOUBLE" if dialect.name == "mysql" else "DOUBLE PRECISION"
    opts = " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin" if dialect.name == "mysql" else ""
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_latches (name_key CHAR(64) NOT NULL PRIMARY KEY, name TEXT NOT NULL, "
        f"round VARCHAR(64) NOT NULL, initial BIGINT NOT NULL, count BIGINT NOT NULL, expires_at {real} NULL, "
        f"recent TEXT NOT NULL){opts}"
    )


def wake_key(key: str) -> str:
    """What wakes the latch of the name key ``key`` (a NOTIFY payload, a local waker's key)."""
    return "latch:" + key


def _state(row: tuple[object, ...]) -> LatchState:
    return LatchState(str(row[0]), to_int(row[1]), max(0, to_int(row[2])))


def listing(dialect: Dialect, p: str) -> Stmt:
    """Every latch (name, initial, count), its done marker while it lasts (``distlock list``)."""
    return Stmt(f"SELECT name, initial, count FROM {p}_latches WHERE expires_at IS NULL OR expires_at > {dialect.now}")


def open_latch(
    dialect: Dialect, p: str, key: str, name: str, count: int | None, round_id: str
) -> Generator[Stmt, Result, LatchState | None]:
    if count is not None:  # a creation (rare) sweeps; a waiter's read writes nothing
        yield Stmt(f"DELETE FROM {p}_latches WHERE expires_at IS NOT NULL AND expires_at <= {dialect.now}")
    select = Stmt(f"SELECT round, initial, count FROM {p}_latches WHERE name_key = %s", (key,))
    found = yield select
    if found.rows or count is None:
        return _state(found.rows[0]) if found.rows else None
    insert = "INSERT IGNORE INTO" if dialect.name == "mysql" else "INSERT INTO"
    tail = "" if dialect.name == "mysql" else " ON CONFLICT (name_key) DO NOTHING"
    yield Stmt(
        f"{insert} {p}_latches (name_key, name, round, initial, count, expires_at, recent) "
        f"VALUES (%s, %s, %s, %s, %s, NULL, ''){tail}",
        (key, name, round_id, count, count),
    )
    found = yield select  # ours, or the one a concurrent creator made first
    return _state(found.rows[0]) if found.rows else None


def count_down(
    dialect: Dialect, p: str, channel: str, key: str, round_id: str, step: str, linger: float
) -> Generator[Stmt, Result, tuple[int, bool]]:
    """(the count after, whether this step reached 0)."""
    found = yield Stmt(f"SELECT round, count, recent FROM {p}_latches WHERE name_key = %s FOR UPDATE", (key,))
    if not found.rows or str(found.rows[0][0]) != round_id:
        return 0, False  # gone, or another round: nothing to take off
    left, recent = to_int(found.rows[0][1]), str(found.rows[0][2])
    if left <= 0 or step in recent.split():
        return max(0, left), False  # at zero, or counted already: the count stands
    recent = recent_after(recent, step)
    if left > 1:
        yield Stmt(f"UPDATE {p}_latches SET count = %s, recent = %s WHERE name_key = %s", (left - 1, recent, key))
        return left - 1, False
    yield Stmt(
        f"UPDATE {p}_latches SET count = 0, recent = %s, expires_at = {dialect.now} + %s WHERE name_key = %s",
        (recent, linger, key),
    )
    if dialect.notify is not None:
        yield Stmt(dialect.notify, (channel, wake_key(key)))
    return 0, True

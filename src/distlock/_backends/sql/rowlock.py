"""SQL of MySQL/MariaDB's row-lock variant of the connection-bound mode (``mode=session&session_lock=row``).

No I/O: statements only (the backend class is ``_async/rowlock.py``). The holder records and the fence
sequence are the session mode's (``session.py``, whose clean-up tells a row-lock record by ``ROW_MARK``); the
statement machinery is in ``stmt.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..._core.types import Claim, Mode
from .names import name_filter, name_key
from .stmt import Stmt, to_int

# -- MySQL/MariaDB row-lock variant of the session mode (``session_lock=row``) -------------------------------
# The seeds' ``SELECT ... FOR UPDATE``: the holder keeps a transaction open on its pinned connection with a
# row lock on the name's row of ``<prefix>_rows`` (``LOCK IN SHARE MODE`` for rwlock readers); ROLLBACK
# releases it, and so does the server when the connection ends (crash, kill, ``wait_timeout``). InnoDB
# queues a new shared request behind a waiting exclusive one, so waiting writers are not starved.
ROW_MARK = "row"


def row_schema(p: str) -> tuple[str, ...]:
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_rows (name_key CHAR(64) NOT NULL PRIMARY KEY, name TEXT NOT NULL) "
        "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
    )


def row_acquire(p: str, claim: Claim, wait: float | None, idle_timeout: float | None) -> Stmt:
    """One round trip: open the transaction, lock the name's row (``FOR UPDATE NOWAIT`` / ``WAIT n``), then
    record the holder only if the row was locked. The last result set is empty when the name has no row
    yet (create it with ``row_create`` and try again); a lock that was not granted is an error, which
    the backend turns into "not acquired" after a ROLLBACK."""
    prefix = "" if idle_timeout is None else f"SET SESSION wait_timeout = {max(1, math.ceil(idle_timeout))}; "
    how = "LOCK IN SHARE MODE" if claim.mode is Mode.READ else "FOR UPDATE"
    limit = "NOWAIT" if wait is None else f"WAIT {max(1, math.ceil(wait))}"
    nk = name_key(claim.name)
    return Stmt(
        f"{prefix}SET @distlock_row = 0; START TRANSACTION; "
        f"SELECT @distlock_row := 1 FROM {p}_rows WHERE name_key = %s {how} {limit}; "
        f"REPLACE INTO {p}_session_holders (conn_id, name_key, name, lock_key, owner, mode, fence) "
        f"SELECT CONNECTION_ID(), %s, %s, '{ROW_MARK}', %s, %s, NEXTVAL({p}_fence_seq) FROM DUAL "
        "WHERE @distlock_row = 1 RETURNING fence, conn_id",
        (nk, nk, claim.name, claim.owner[:255], claim.mode.value),
    )


def row_acquired(sets: Sequence[Sequence[tuple[object, ...]]]) -> tuple[int, int] | None:
    """(fence, connection id) from the RETURNING of ``row_acquire``, or None if not taken."""
    if not sets or not sets[-1]:
        return None
    fence, conn_id = sets[-1][0]
    return to_int(fence), to_int(conn_id)


def row_create(p: str, name: str) -> Stmt:
    return Stmt(f"ROLLBACK; INSERT IGNORE INTO {p}_rows (name_key, name) VALUES (%s, %s)", (name_key(name), name))


def row_unlock(p: str) -> Stmt:
    """Answers whether the transaction (and so the row lock) was still there, then ends it and deletes the
    connection's row-lock record (its table is not transactional: the ROLLBACK leaves it), so a record stands
    for a holding until its release or its connection's end."""
    return Stmt(
        f"SELECT @@in_transaction; ROLLBACK; "
        f"DELETE FROM {p}_session_holders WHERE conn_id = CONNECTION_ID() AND lock_key = '{ROW_MARK}'"
    )


#: a row-lock record's connection is still there (the row lock ends with it; a release deletes the record).
#: Not ``INNODB_TRX``: MariaDB refreshes that table's cache at most every 0.1 s, so a closed holder's record
#: looked held and a new holder's looked free for that long
_LIVE = "IN (SELECT ID FROM information_schema.PROCESSLIST)"


def row_check(idle_timeout: float | None, p: str | None = None) -> Stmt:
    """Is the transaction (and so the row lock) still open; with ``p``, the release request made to this
    connection's holding too (``row_ask``)."""
    prefix = "" if idle_timeout is None else f"SET SESSION wait_timeout = {max(1, math.ceil(idle_timeout))}; "
    asked = "" if p is None else f", (SELECT a.asked FROM {p}_session_holders a WHERE a.conn_id = CONNECTION_ID())"
    return Stmt(f"{prefix}SELECT @@in_transaction{asked}")


def row_ask(p: str, name: str, request: str) -> Stmt:
    """``session.py``'s ``session_ask`` for the row-lock variant: a holder record whose connection is there."""
    return Stmt(
        f"UPDATE {p}_session_holders SET asked = %s WHERE name_key = %s AND lock_key = '{ROW_MARK}' "
        f"AND conn_id {_LIVE}",
        (request, name_key(name)),
    )


def row_holders(p: str, names: Sequence[str] | None, prefix: str) -> Stmt:
    """The columns of ``session.py``'s ``session_holders`` and whether the record's connection is still there
    (the holder keeps its transaction open until it releases, and the release deletes the record). Needs the
    PROCESS privilege to see other users' connections."""
    where, args = name_filter(names, prefix, "f")
    return Stmt(
        "SELECT f.name, f.owner, f.mode, f.fence, f.conn_id, f.conn_id, f.mode, "
        f"f.conn_id {_LIVE} "
        f"FROM {p}_session_holders f WHERE {where} AND f.lock_key = '{ROW_MARK}' ORDER BY f.name, f.fence",
        args,
    )

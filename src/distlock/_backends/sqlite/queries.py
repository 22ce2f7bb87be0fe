"""SQL of the embedded SQLite store: the schema and one function per statement.

Schema (created on first use, idempotent)::

    distlock_holders(token PK, name, owner, mode, fence, expires_at REAL unix seconds, acquired_at,
                     proc NULL,  -- the holder process (``procs.py``), NULL where it cannot be told
                     revoke NULL,  -- a release request to this holder, "<id>|<reason>" (``ask``)
                     permits NULL)  -- a semaphore holding's permits (NULL: 1)
    distlock_queue(seq INTEGER PK AUTOINCREMENT, token UNIQUE, name, mode, expires_at,
                   want NULL)  -- waiters; a semaphore claim's permits (NULL: 1)
    distlock_semaphores(name PK, declared, capacity)  -- a semaphore's numbers while it is in use (``arbiter``)
    distlock_counter(id = 1, fence, reserved) -- the one fence counter of the store (every name)
    distlock_fences(name PK, fence)           -- 0.1.0's per-name fences: emptied at the upgrade; a trigger
                                                 refuses the inserts of 0.1.0 clients from then on

Fences come from one counter, so nothing of a released name stays, and they are strictly increasing per
name across releases, ``break_lock`` and restarts (a global counter increases for every name).

Durability on power loss (the database runs ``synchronous=NORMAL``: a committed transaction may roll back
after a power cut): the counter reserves fences in blocks of FENCE_BLOCK. The transaction that hands out
the first fence past ``reserved`` raises it and commits with ``synchronous=FULL`` (fsync of the WAL), and
every store that opens the file moves ``fence`` up to ``reserved``. A power cut can roll back ``fence``
only to a value below the durable ``reserved``, and every fence handed out before the cut was at most
that ``reserved``: the next process starts above all of them. Cost: one fsync per FENCE_BLOCK grants and
one per store opened, instead of one per grant.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from ..._core.arbiter import Capacity, Held, Queued
from ..._core.types import Claim, Mode

SCHEMA = """
CREATE TABLE IF NOT EXISTS distlock_holders (
    token TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    owner TEXT NOT NULL,
    mode TEXT NOT NULL,
    fence INTEGER NOT NULL,
    expires_at REAL NOT NULL,
    acquired_at REAL NOT NULL,
    proc TEXT,
    revoke TEXT
);
CREATE INDEX IF NOT EXISTS distlock_holders_name ON distlock_holders(name);
CREATE TABLE IF NOT EXISTS distlock_queue (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    token TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    mode TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS distlock_queue_name ON distlock_queue(name, seq);
CREATE TABLE IF NOT EXISTS distlock_semaphores (
    name TEXT PRIMARY KEY,
    declared INTEGER NOT NULL,
    capacity INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS distlock_fences (
    name TEXT PRIMARY KEY,
    fence INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS distlock_counter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    fence INTEGER NOT NULL,
    reserved INTEGER NOT NULL
);
INSERT OR IGNORE INTO distlock_counter (id, fence, reserved) VALUES (1, 0, 0);
UPDATE distlock_counter SET fence = MAX(fence, reserved, (SELECT COALESCE(MAX(fence), 0) FROM distlock_fences));
DELETE FROM distlock_fences;
CREATE TRIGGER IF NOT EXISTS distlock_fences_v2 BEFORE INSERT ON distlock_fences BEGIN
    SELECT RAISE(ABORT, 'distlock: this store was upgraded to one fence counter; a 0.1.0 client cannot lock here');
END
"""

#: fences reserved per durable (``synchronous=FULL``) commit
FENCE_BLOCK = 1000


class NeedsSync(Exception):
    """The grant takes the first fence past the durable reservation: commit it with ``synchronous=FULL``."""


def use_wal(conn: sqlite3.Connection, busy: float) -> None:
    """Switch the file to write-ahead logging (a no-op once it is). The switch needs the file to itself, and
    SQLite answers "database is locked" at once, without its busy handler, when another connection holds
    it: several processes opening a new file together (a deployment's first start) met that. So it is
    retried, within the busy timeout as any wait for the file."""
    give_up = time.monotonic() + busy
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() >= give_up:
                raise
        time.sleep(0.005)


def create_schema(conn: sqlite3.Connection) -> None:
    """Create what is missing, take over 0.1.0's per-name fences (the counter starts above all of them, then
    their rows go), and move the counter past its last durable reservation (see the module docstring)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        for stmt in _statements(SCHEMA):
            conn.execute(stmt)
        _add_column(conn, "distlock_holders", "proc")
        _add_column(conn, "distlock_holders", "revoke")
        _add_column(conn, "distlock_holders", "permits", "INTEGER")
        _add_column(conn, "distlock_queue", "want", "INTEGER")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _add_column(conn: sqlite3.Connection, table: str, column: str, kind: str = "TEXT") -> None:
    """A file made before a column existed gets it (SQLite has no ``ADD COLUMN IF NOT EXISTS``). Each is
    nullable, so the rows already there, and those of clients that predate it (their INSERT names its
    columns), read NULL: ``proc`` NULL is never freed early, ``revoke`` NULL has no request, ``permits`` and
    ``want`` NULL count one permit (all an older client's semaphore holding takes)."""
    columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
    if column not in columns:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def _statements(script: str) -> list[str]:
    """Split on ``;`` at the end of a line (the trigger's body has its own ``;`` inside)."""
    out, cur = [], []
    for line in script.splitlines():
        cur.append(line)
        if line.rstrip().endswith(";") and not line.startswith("    "):
            out.append("\n".join(cur).strip())
            cur = []
    rest = "\n".join(cur).strip()
    if rest:
        out.append(rest)
    return [stmt for stmt in out if stmt]


def purge(conn: sqlite3.Connection, name: str, now: float) -> None:
    conn.execute("DELETE FROM distlock_holders WHERE name = ? AND expires_at <= ?", (name, now))
    conn.execute("DELETE FROM distlock_queue WHERE name = ? AND expires_at <= ?", (name, now))


def holders(conn: sqlite3.Connection, name: str) -> list[Held]:
    rows = conn.execute("SELECT token, mode, expires_at, permits FROM distlock_holders WHERE name = ?", (name,))
    return [Held(t, Mode(m), e, p or 1) for t, m, e, p in rows]


def queue_ahead(conn: sqlite3.Connection, name: str, token: str, limit: int | None) -> list[Queued]:
    """The entries the grant rule looks at for ``token``: the first ``limit`` (None: all) of those ahead of its
    own entry (of all, if it has none), then that entry (``arbiter.looks_ahead``). A check then reads a few
    rows, not the whole queue: with 1,000 waiters, reading it all at every hand-off was most of its cost."""
    own = conn.execute(
        "SELECT seq, mode, expires_at, want FROM distlock_queue WHERE token = ? AND name = ?", (token, name)
    ).fetchone()
    bound = own[0] if own is not None else 2**63 - 1
    rows = conn.execute(
        "SELECT token, mode, seq, expires_at, want FROM distlock_queue WHERE name = ? AND seq < ? ORDER BY seq "
        "LIMIT ?",
        (name, bound, -1 if limit is None else limit),
    )
    found = [Queued(t, Mode(m), s, e, w or 1) for t, m, s, e, w in rows]
    if own is not None:
        found.append(Queued(token, Mode(own[1]), own[0], own[2], own[3] or 1))
    return found


def capacity(conn: sqlite3.Connection, name: str) -> Capacity | None:
    """The numbers stored for the semaphore ``name`` (live or a crash's leftover: ``arbiter.decide`` tells)."""
    row = conn.execute("SELECT declared, capacity FROM distlock_semaphores WHERE name = ?", (name,)).fetchone()
    return None if row is None else Capacity(int(row[0]), int(row[1]))


def store_capacity(conn: sqlite3.Connection, name: str, numbers: Capacity) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO distlock_semaphores(name, declared, capacity) VALUES (?, ?, ?)",
        (name, numbers.declared, numbers.capacity),
    )


def resize(conn: sqlite3.Connection, name: str, now: float, permits: int) -> bool:
    """``set_permits``: the capacity in force of ``name`` if a semaphore holder or waiter of it is live (its
    declared number stays; a holding of an older client with no numbers stored takes ``permits`` as both)."""
    if not _in_use(conn, name, now):
        return False
    conn.execute(
        "INSERT INTO distlock_semaphores(name, declared, capacity) VALUES (?, ?, ?) "
        "ON CONFLICT(name) DO UPDATE SET capacity = excluded.capacity",
        (name, permits, permits),
    )
    return True


def drop_unused_capacity(conn: sqlite3.Connection, name: str, now: float) -> None:
    """After a release or an abandon: a semaphore's numbers go with its last live holder or waiter."""
    if not _in_use(conn, name, now):
        conn.execute("DELETE FROM distlock_semaphores WHERE name = ?", (name,))


def _in_use(conn: sqlite3.Connection, name: str, now: float) -> bool:
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM distlock_holders WHERE name = ? AND mode = 'semaphore' AND expires_at > ?) "
        "OR EXISTS (SELECT 1 FROM distlock_queue WHERE name = ? AND mode = 'semaphore' AND expires_at > ?)",
        (name, now, name, now),
    ).fetchone()
    return bool(row[0])


def fence_of(conn: sqlite3.Connection, token: str) -> int | None:
    row = conn.execute("SELECT fence FROM distlock_holders WHERE token = ?", (token,)).fetchone()
    return None if row is None else int(row[0])


def next_fence(conn: sqlite3.Connection, durable: bool) -> int:
    """The store's next fence. Past the reservation it raises NeedsSync unless this transaction will commit
    with ``synchronous=FULL`` (``durable``), and then reserves the next block."""
    row = conn.execute(
        "UPDATE distlock_counter SET fence = fence + 1 WHERE id = 1 AND fence < reserved RETURNING fence"
    ).fetchone()
    if row is not None:
        return int(row[0])
    if not durable:
        raise NeedsSync
    row = conn.execute(
        "UPDATE distlock_counter SET fence = fence + 1, reserved = fence + ? WHERE id = 1 RETURNING fence",
        (FENCE_BLOCK,),
    ).fetchone()
    return int(row[0])


def insert_holder(conn: sqlite3.Connection, claim: Claim, fence: int, now: float, proc: str | None) -> None:
    conn.execute(
        "INSERT INTO distlock_holders(token, name, owner, mode, fence, expires_at, acquired_at, proc, permits) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (claim.token, claim.name, claim.record, claim.mode.value, fence, now + claim.ttl, now, proc, _weight(claim)),
    )


def holder_procs(conn: sqlite3.Connection, name: str) -> list[str]:
    """The recorded processes holding ``name`` (each once)."""
    rows = conn.execute("SELECT DISTINCT proc FROM distlock_holders WHERE name = ? AND proc IS NOT NULL", (name,))
    return [str(r[0]) for r in rows]


def delete_of_proc(conn: sqlite3.Connection, name: str, proc: str) -> int:
    """Every holding of ``name`` by the process ``proc`` (its rwlock read holdings, its semaphore permits)."""
    return conn.execute("DELETE FROM distlock_holders WHERE name = ? AND proc = ?", (name, proc)).rowcount


def enqueue(conn: sqlite3.Connection, claim: Claim, expires_at: float) -> None:
    """Join the queue, or refresh the deadline of the entry we already have (keeping our place)."""
    conn.execute(
        "INSERT INTO distlock_queue(token, name, mode, expires_at, want) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT(token) DO UPDATE SET expires_at = excluded.expires_at",
        (claim.token, claim.name, claim.mode.value, expires_at, _weight(claim)),
    )


def _weight(claim: Claim) -> int | None:
    """The permits column of a claim's rows: a semaphore's ``want``; NULL for every other mode."""
    return claim.want if claim.mode is Mode.SEMAPHORE else None


def refresh(conn: sqlite3.Connection, token: str, now: float, expires_at: float) -> bool:
    """Push a live queue entry's deadline on (what ``enqueue`` does to an entry we have); False if it is gone
    or ran out (then a full try joins the queue again, at its end)."""
    return (
        conn.execute(
            "UPDATE distlock_queue SET expires_at = ? WHERE token = ? AND expires_at > ?", (expires_at, token, now)
        ).rowcount
        == 1
    )


def dequeue(conn: sqlite3.Connection, token: str) -> int:
    return conn.execute("DELETE FROM distlock_queue WHERE token = ?", (token,)).rowcount


def delete_holder(conn: sqlite3.Connection, token: str) -> int:
    return conn.execute("DELETE FROM distlock_holders WHERE token = ?", (token,)).rowcount


def delete_holder_returning(conn: sqlite3.Connection, token: str) -> float | None:
    """Compare-and-delete by token; returns the lease end it had (None: it was not there)."""
    row = conn.execute("DELETE FROM distlock_holders WHERE token = ? RETURNING expires_at", (token,)).fetchone()
    return None if row is None else float(row[0])


def extend(conn: sqlite3.Connection, token: str, now: float, ttl: float, disown: bool = False) -> bool:
    """Renew a live lease only: one that ran out may already belong to someone else. ``disown``: and forget its
    process (the lease is left to run out by itself)."""
    cur = conn.execute(
        f"UPDATE distlock_holders SET expires_at = ?{', proc = NULL' if disown else ''} "
        "WHERE token = ? AND expires_at > ?",
        (now + ttl, token, now),
    )
    return cur.rowcount == 1


def extend_asked(conn: sqlite3.Connection, token: str, now: float, ttl: float) -> tuple[bool, str | None]:
    """``extend`` that also reads back the release request made to the holder ("<id>|<reason>"), if any: the
    renewal carries it, in the same statement."""
    row = conn.execute(
        "UPDATE distlock_holders SET expires_at = ? WHERE token = ? AND expires_at > ? RETURNING revoke",
        (now + ttl, token, now),
    ).fetchone()
    return (False, None) if row is None else (True, row[0])


def ask(conn: sqlite3.Connection, name: str, now: float, request: str) -> int:
    """A release request ("<id>|<reason>") to every live holder of ``name``, in its own row (it goes with the
    row); how many there were."""
    return conn.execute(
        "UPDATE distlock_holders SET revoke = ? WHERE name = ? AND expires_at > ?", (request, name, now)
    ).rowcount


def set_owner(conn: sqlite3.Connection, token: str, record: str, now: float) -> bool:
    """An election leader's new owner string (``Claim.record``), if its lease is still live."""
    cur = conn.execute("UPDATE distlock_holders SET owner = ? WHERE token = ? AND expires_at > ?", (record, token, now))
    return cur.rowcount == 1


def is_live(conn: sqlite3.Connection, token: str, now: float) -> bool:
    row = conn.execute("SELECT 1 FROM distlock_holders WHERE token = ? AND expires_at > ?", (token, now)).fetchone()
    return row is not None


def _where(names: Sequence[str] | None, prefix: str) -> tuple[str, list[object]]:
    if names is not None:
        return f"name IN ({','.join('?' * len(names))})", list(names)
    return "substr(name, 1, ?) = ?", [len(prefix), prefix]


def live_rows(
    conn: sqlite3.Connection, names: Sequence[str] | None, prefix: str, now: float
) -> list[tuple[str, str, str, int, float, int | None]]:
    where, args = _where(names, prefix)
    rows = conn.execute(
        f"SELECT name, owner, mode, fence, expires_at, permits FROM distlock_holders WHERE {where} "
        "AND expires_at > ? ORDER BY name, fence",
        (*args, now),
    )
    return [(str(a), str(b), str(c), int(d), float(e), None if p is None else int(p)) for a, b, c, d, e, p in rows]


def waiting_counts(
    conn: sqlite3.Connection, names: Sequence[str] | None, prefix: str, now: float
) -> dict[str, tuple[int, int]]:
    """(live queue entries, the permits they want) per name."""
    where, args = _where(names, prefix)
    rows = conn.execute(
        f"SELECT name, count(*), sum(coalesce(want, 1)) FROM distlock_queue WHERE {where} AND expires_at > ? "
        "GROUP BY name",
        (*args, now),
    )
    return {str(n): (int(c), int(w)) for n, c, w in rows}


def capacities(conn: sqlite3.Connection, names: Sequence[str] | None, prefix: str) -> dict[str, int]:
    """The semaphores' capacities in force."""
    where, args = _where(names, prefix)
    rows = conn.execute(f"SELECT name, capacity FROM distlock_semaphores WHERE {where}", args)
    return {str(n): int(c) for n, c in rows}


def delete_all(conn: sqlite3.Connection, name: str) -> list[str]:
    rows = conn.execute("DELETE FROM distlock_holders WHERE name = ? RETURNING token", (name,))
    return [str(r[0]) for r in rows]

"""SQL of the MySQL/MariaDB and PostgreSQL backends: schema, dialects, and each operation as a script.

No I/O here. Every operation is a generator (sans-I/O): it yields :class:`Stmt` objects and is sent back
a :class:`Result` for each; its return value is the operation's answer. The backend runs the generator
inside one ``BEGIN ... COMMIT`` on one connection (``drive``), so the same logic serves both databases and
both drivers (psycopg on an event loop or not, PyMySQL in a worker thread); only the SQL text differs, and
that lives in a :class:`Dialect`.

Lease-table schema (created on first use, idempotent; ``distlock`` is the ``table_prefix`` option)::

    distlock_fences (name_key CHAR(64) PK, name TEXT, fence BIGINT)   -- 0.1.0's per-name fences: emptied
                                                                        at the upgrade (kept for the session
                                                                        mode's portable layout)
    distlock_holders(token PK, name_key, name, owner, mode, fence, expires_at DOUBLE, acquired_at DOUBLE,
                     layout SMALLINT NOT NULL)  -- no default: a 0.1.0 client's INSERT fails (mixed fleet)
    distlock_queue  (seq auto PK, token UNIQUE, name_key, name, mode, expires_at DOUBLE)   -- waiters
    distlock_fence_seq                         -- SEQUENCE: every fence of every name (MySQL without
                                                  sequences: distlock_fence_ids, an AUTO_INCREMENT ticket)

Fences come from one counter whose size does not grow with the names: drawn while the name's lock is
held, so they are strictly increasing per name, across releases, restarts and ``break_lock``. Opening a
store raises the sequence above every fence a 0.1.0 row recorded (``seed``), then deletes those rows.

``name_key`` is the hex SHA-256 of the UTF-8 name: names of any length are indexed without truncation.
Times are seconds since the epoch read from the DATABASE's clock (never the client's), once per
transaction, after the name's fence row is locked.

Atomicity: every acquire first takes the name's lock for the length of its transaction, a lock that
leaves no row: PostgreSQL ``pg_advisory_xact_lock(a, b)`` (the two-integer key space, apart from the
session mode's bigint keys; released by COMMIT/ROLLBACK), MySQL/MariaDB ``GET_LOCK`` on the same
connection, released by ``RELEASE_ALL_LOCKS()`` in the batch that commits or rolls back (pool connections
hold no other named lock). So all decisions about one name are serialised by the database; the decision
itself is :mod:`distlock._core.arbiter` (the same rule as SQLite), made between that lock and the COMMIT.

Renewals do not take that lock; they are serialised with acquires through the holder row itself: a
renewal's ``UPDATE`` holds the row lock until its COMMIT, and an acquire that read the row as expired
deletes it with ``... AND expires_at <= now``, which waits for that lock and re-evaluates the condition on
the committed row. If the DELETE removes fewer rows than the acquire saw expired, a renewal got there
first: the acquire decides nothing and tries again (zero extra round trips; the protocol model checks
that this, with the holder's own lease clock, keeps one live holder and tells the old holder first).
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass

from .arbiter import Held, Queued, may_acquire, retry_after, should_queue
from .types import Claim, Grant, HolderInfo, LockInfo, Mode

#: a queued waiter that stops re-trying for this long is dropped from the queue (F12 in docs/safety.md)
WAITER_TTL = 5.0
#: holder rows of this layout; 0.1.0's have none (``upgrade`` gives them 1)
LAYOUT = 2
#: ``sweep`` removes holder and queue rows that expired this long ago (crashed processes)
SWEEP_GRACE = 60.0
#: ``sweep`` removes at most this many 0.1.0 fence rows per call
SWEEP_BATCH = 5000

KIND_OF_MODE = {
    Mode.EXCLUSIVE.value: "lock",
    Mode.READ.value: "rwlock",
    Mode.WRITE.value: "rwlock",
    Mode.SEMAPHORE.value: "semaphore",
}

_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,40}$")


def valid_prefix(prefix: str) -> bool:
    return bool(_PREFIX.match(prefix))


def name_key(name: str) -> str:
    """The full SHA-256 of the name (hex): the primary key of a name in every table."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


def advisory_key(name: str) -> int:
    """PostgreSQL advisory lock key: the first 8 bytes of SHA-256(name) as a signed 64-bit integer."""
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:8], "big", signed=True)


def get_lock_name(name: str) -> str:
    """MySQL ``GET_LOCK`` name: the name itself up to 64 characters; longer names map to ``~`` and the
    unpadded base64url of their full SHA-256 (44 characters), never a truncation."""
    if len(name) <= 64:
        return name
    digest = base64.urlsafe_b64encode(hashlib.sha256(name.encode("utf-8")).digest()).decode().rstrip("=")
    return "~" + digest


def bell_name(key: str) -> str:
    """MySQL companion ``GET_LOCK`` a holder keeps while it holds ``key`` (waiters block on it)."""
    return "distlock-bell:" + key[:48]


@dataclass(frozen=True)
class Stmt:
    sql: str
    params: tuple[object, ...] = ()


@dataclass(frozen=True)
class Result:
    rows: list[tuple[object, ...]]
    rowcount: int


Script = Generator[Stmt, Result, object]


def created_name(ddl: str) -> str:
    """The table/sequence/index a ``CREATE ... IF NOT EXISTS <name>`` statement creates."""
    m = re.search(r"IF NOT EXISTS\s+([A-Za-z0-9_]+)", ddl)
    return m.group(1) if m else ""


def single(stmt: Stmt) -> Generator[Stmt, Result, Result]:
    """A script of one statement, returning its result."""
    r = yield stmt
    return r


@dataclass(frozen=True)
class Dialect:
    """The SQL text that differs between the two databases (``%s`` placeholders in both drivers)."""

    name: str
    now: str  # an expression: seconds since the epoch, from the database's clock
    schema: tuple[str, ...]
    lock_name: str  # take the name's transaction lock and read the clock: (a, b) -> (locked, now)
    enqueue: str  # (token, key, name, mode, expires_at) -> join or refresh the deadline
    notify: str | None  # (channel, key): wake the listeners of the name, delivered at commit


#: session mode: the last connection-bound holder of the name (its lock key, owner, mode, connection id)
_SESSION_COLUMNS = "lock_key VARCHAR(64) NULL, owner VARCHAR(255) NULL, mode VARCHAR(16) NULL, conn_id BIGINT NULL"


def _mysql_schema(p: str) -> tuple[str, ...]:
    opts = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_fences (name_key CHAR(64) NOT NULL PRIMARY KEY, name TEXT NOT NULL, "
        f"fence BIGINT NOT NULL, {_SESSION_COLUMNS}) {opts}",
        f"CREATE TABLE IF NOT EXISTS {p}_holders (token VARCHAR(64) NOT NULL PRIMARY KEY, "
        "name_key CHAR(64) NOT NULL, name TEXT NOT NULL, owner VARCHAR(255) NOT NULL, mode VARCHAR(16) NOT NULL, "
        f"fence BIGINT NOT NULL, expires_at DOUBLE NOT NULL, acquired_at DOUBLE NOT NULL, layout SMALLINT NOT NULL, "
        f"KEY {p}_holders_name (name_key)) {opts}",
        f"CREATE TABLE IF NOT EXISTS {p}_queue (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "token VARCHAR(64) NOT NULL UNIQUE, name_key CHAR(64) NOT NULL, name TEXT NOT NULL, "
        f"mode VARCHAR(16) NOT NULL, expires_at DOUBLE NOT NULL, KEY {p}_queue_name (name_key, seq)) {opts}",
    )


def _pg_schema(p: str) -> tuple[str, ...]:
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_fences (name_key CHAR(64) PRIMARY KEY, name TEXT NOT NULL, "
        f"fence BIGINT NOT NULL, {_SESSION_COLUMNS})",
        f"CREATE TABLE IF NOT EXISTS {p}_holders (token VARCHAR(64) PRIMARY KEY, name_key CHAR(64) NOT NULL, "
        "name TEXT NOT NULL, owner TEXT NOT NULL, mode VARCHAR(16) NOT NULL, fence BIGINT NOT NULL, "
        "expires_at DOUBLE PRECISION NOT NULL, acquired_at DOUBLE PRECISION NOT NULL, layout SMALLINT NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {p}_holders_name ON {p}_holders (name_key)",
        f"CREATE SEQUENCE IF NOT EXISTS {p}_fence_seq",
        f"CREATE TABLE IF NOT EXISTS {p}_queue (seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
        "token VARCHAR(64) NOT NULL UNIQUE, name_key CHAR(64) NOT NULL, name TEXT NOT NULL, "
        "mode VARCHAR(16) NOT NULL, expires_at DOUBLE PRECISION NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {p}_queue_name ON {p}_queue (name_key, seq)",
    )


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


def _f(value: object) -> float:
    return float(value)  # type: ignore[arg-type]


def _i(value: object) -> int:
    return int(value)  # type: ignore[call-overload,no-any-return]


class Ops:
    """The operations of the lease-table mode, as scripts over one dialect and one table prefix."""

    def __init__(self, dialect: Dialect, prefix: str, channel: str) -> None:
        self.d = dialect
        self.p = prefix
        self.channel = channel
        #: MySQL/MariaDB: the server has SEQUENCE (MariaDB >= 10.5); set by the backend once it knows
        self.sequences = dialect.name == "postgres"
        #: MySQL: seconds an acquire waits for the name's GET_LOCK (another acquire's transaction)
        self.name_wait = 5.0

    def _notify(self, key: str) -> Generator[Stmt, Result, None]:
        if self.d.notify is not None:
            yield Stmt(self.d.notify, (self.channel, key))

    def now(self) -> Generator[Stmt, Result, float]:
        r = yield Stmt(f"SELECT {self.d.now}")
        return _f(r.rows[0][0])

    def _lock_name(self, key: str) -> Stmt:
        """The name's transaction lock: PostgreSQL's two-int advisory key from SHA-256(prefix:key); MySQL's
        GET_LOCK name ``prefix:key`` (cut to 64 characters: a collision only serialises two names)."""
        if self.d.name == "postgres":
            h = hashlib.sha256(f"{self.p}:{key}".encode()).digest()
            a, b = (int.from_bytes(h[i : i + 4], "big", signed=True) for i in (0, 4))
            return Stmt(self.d.lock_name, (a, b))
        return Stmt(self.d.lock_name, (f"{self.p}:{key}"[:64], self.name_wait))

    def _insert_holder(self, claim: Claim, key: str, now: float) -> Stmt:
        """Insert the holding with a fence from the store's one counter; the statement returns the fence."""
        p = self.p
        cols = f"INSERT INTO {p}_holders (token, name_key, name, owner, mode, fence, expires_at, acquired_at, layout) "
        args = (claim.token, key, claim.name, claim.owner[:255], claim.mode.value, now + claim.ttl, now)
        if self.d.name == "postgres":
            fence = f"nextval('{p}_fence_seq')"
        elif self.sequences:
            fence = f"NEXTVAL({p}_fence_seq)"
        else:  # MySQL without sequences: an AUTO_INCREMENT ticket, its row deleted at once (one statement batch)
            return Stmt(
                f"INSERT INTO {p}_fence_ids () VALUES (); DELETE FROM {p}_fence_ids WHERE id = LAST_INSERT_ID(); "
                f"{cols}VALUES (%s, %s, %s, %s, %s, LAST_INSERT_ID(), %s, %s, {LAYOUT}); SELECT LAST_INSERT_ID()",
                args,
            )
        return Stmt(f"{cols}VALUES (%s, %s, %s, %s, %s, {fence}, %s, %s, {LAYOUT}) RETURNING fence", args)

    def acquire(self, claim: Claim, key: str) -> Generator[Stmt, Result, Grant]:
        p = self.p
        r = yield self._lock_name(key)
        if r.rows[0][0] in (0, None):  # MySQL: not granted within name_wait (a stuck transaction)
            return Grant(False, retry_after=0.05)
        now = _f(r.rows[0][1])
        r = yield Stmt(
            f"SELECT 0, token, mode, expires_at, 0 FROM {p}_holders WHERE name_key = %s UNION ALL "
            f"SELECT 1, token, mode, expires_at, seq FROM {p}_queue WHERE name_key = %s",
            (key, key),
        )
        holders: list[Held] = []
        queue: list[Queued] = []
        stale_holders = stale_waiters = 0
        for kind, token, mode, expires, seq in r.rows:
            if _f(expires) <= now:
                if kind == 0:
                    stale_holders += 1
                else:
                    stale_waiters += 1
            elif kind == 0:
                holders.append(Held(str(token), Mode(str(mode)), _f(expires)))
            else:
                queue.append(Queued(str(token), Mode(str(mode)), _i(seq), _f(expires)))
        queue.sort(key=lambda q: q.seq)
        if stale_holders:
            # Waits for the row lock of a renewal in flight and re-evaluates on its committed row: a renewal
            # that committed meanwhile makes this delete fewer rows than we saw expired. Then our look at the
            # holders is out of date: decide nothing, try again (the renewed lease is live).
            d = yield Stmt(f"DELETE FROM {p}_holders WHERE name_key = %s AND expires_at <= %s", (key, now))
            if d.rowcount < stale_holders:
                return Grant(False, retry_after=0.0)
        if stale_waiters:
            yield Stmt(f"DELETE FROM {p}_queue WHERE name_key = %s AND expires_at <= %s", (key, now))
        if any(h.token == claim.token for h in holders):  # a retry after a lost reply: already ours
            r = yield Stmt(f"SELECT fence FROM {p}_holders WHERE token = %s", (claim.token,))
            return Grant(True, fence=_i(r.rows[0][0]))
        if may_acquire(claim.mode, claim.token, claim.permits, claim.fair, holders, queue):
            r = yield self._insert_holder(claim, key, now)
            fence = _i(r.rows[0][0])
            if any(q.token == claim.token for q in queue):
                yield Stmt(f"DELETE FROM {p}_queue WHERE token = %s", (claim.token,))
            return Grant(True, fence=fence)
        if should_queue(claim.mode, claim.fair):
            yield Stmt(self.d.enqueue, (claim.token, key, claim.name, claim.mode.value, now + WAITER_TTL))
        return Grant(False, retry_after=retry_after(holders, now))

    def abandon(self, claim: Claim, key: str) -> Generator[Stmt, Result, bool]:
        """Delete the claim's queue entry and holding. The name's lock first: an acquire of this claim that
        was cancelled in flight (its connection shut down) may still be running on the server, and holds
        that lock until it commits or rolls back; deleting before then would miss what it commits."""
        p = self.p
        yield self._lock_name(key)
        a = yield Stmt(f"DELETE FROM {p}_queue WHERE token = %s", (claim.token,))
        b = yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s", (claim.token,))
        if a.rowcount or b.rowcount:
            yield from self._notify(key)
            return True
        return False

    def release(self, claim: Claim, key: str) -> Generator[Stmt, Result, bool]:
        """Compare-and-delete by token, in autocommit (no transaction needed: one row, by its key); True if
        it was still a live lease. PostgreSQL: one statement that also notifies the name's waiters. MySQL:
        delete it if live; only if that found nothing, delete an expired remnant."""
        p = self.p
        if self.d.notify is not None:
            r = yield Stmt(
                f"WITH d AS (DELETE FROM {p}_holders WHERE token = %s RETURNING expires_at) "
                f"SELECT (SELECT expires_at FROM d) > {self.d.now}, pg_notify(%s, %s)",
                (claim.token, self.channel, key),
            )
            return bool(r.rows and r.rows[0][0])
        r = yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s AND expires_at > {self.d.now}", (claim.token,))
        if r.rowcount == 1:
            return True
        yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s", (claim.token,))
        return False

    def renew(self, claims: Sequence[Claim]) -> Generator[Stmt, Result, list[bool]]:
        """Extend every live lease in ``claims``: one UPDATE per distinct TTL (normally one), one SELECT."""
        p = self.p
        now = yield from self.now()
        by_ttl: dict[float, list[str]] = {}
        for c in claims:
            by_ttl.setdefault(c.ttl, []).append(c.token)
        for ttl, tokens in by_ttl.items():
            marks = ", ".join(["%s"] * len(tokens))
            yield Stmt(
                f"UPDATE {p}_holders SET expires_at = %s WHERE token IN ({marks}) AND expires_at > %s",
                (now + ttl, *tokens, now),
            )
        tokens = [c.token for c in claims]
        marks = ", ".join(["%s"] * len(tokens))
        r = yield Stmt(f"SELECT token FROM {p}_holders WHERE token IN ({marks}) AND expires_at > %s", (*tokens, now))
        alive = {str(row[0]) for row in r.rows}
        return [c.token in alive for c in claims]

    def holds(self, claim: Claim) -> Generator[Stmt, Result, bool]:
        r = yield Stmt(f"SELECT 1 FROM {self.p}_holders WHERE token = %s AND expires_at > {self.d.now}", (claim.token,))
        return bool(r.rows)

    def inspect(self, names: Sequence[str] | None, prefix: str = "") -> Generator[Stmt, Result, list[LockInfo]]:
        p = self.p
        now = yield from self.now()
        if names is not None:
            where = f"name_key IN ({', '.join(['%s'] * len(names))})"
            args: tuple[object, ...] = tuple(name_key(n) for n in names)
        else:
            where = "SUBSTR(name, 1, %s) = %s"
            args = (len(prefix), prefix)
        r = yield Stmt(
            f"SELECT name, owner, mode, fence, expires_at FROM {p}_holders WHERE {where} AND expires_at > %s "
            "ORDER BY name, fence",
            (*args, now),
        )
        w = yield Stmt(
            f"SELECT name_key, COUNT(*) FROM {p}_queue WHERE {where} AND expires_at > %s GROUP BY name_key",
            (*args, now),
        )
        waiting = {str(k): _i(c) for k, c in w.rows}
        by_name: dict[str, list[HolderInfo]] = {}
        kinds: dict[str, str] = {}
        for name, owner, mode, fence, expires in r.rows:
            n = str(name)
            by_name.setdefault(n, []).append(HolderInfo(str(owner), _i(fence), str(mode), max(0.0, _f(expires) - now)))
            kinds[n] = KIND_OF_MODE[str(mode)]
        return [LockInfo(n, kinds[n], tuple(hs), waiting.get(name_key(n), 0)) for n, hs in sorted(by_name.items())]

    def break_lock(self, name: str) -> Generator[Stmt, Result, list[str]]:
        p = self.p
        key = name_key(name)
        r = yield Stmt(f"SELECT token FROM {p}_holders WHERE name_key = %s FOR UPDATE", (key,))
        tokens = [str(row[0]) for row in r.rows]
        if tokens:
            yield Stmt(f"DELETE FROM {p}_holders WHERE name_key = %s", (key,))
            yield from self._notify(key)
        return tokens

    def sweep(self, grace: float = SWEEP_GRACE, batch: int = SWEEP_BATCH) -> Generator[Stmt, Result, int]:
        """Remove what nobody will come back for: holder and queue rows expired for ``grace`` seconds
        (crashed processes; the name's next acquire would remove them too), and 0.1.0's per-name fence rows
        (run after ``seed``: the counter is above them), at most ``batch`` of those per call; returns how
        many it removed. Safe at any time: an expired row is no holding."""
        p = self.p
        now = yield from self.now()
        yield Stmt(f"DELETE FROM {p}_holders WHERE expires_at < %s", (now - grace,))
        yield Stmt(f"DELETE FROM {p}_queue WHERE expires_at < %s", (now - grace,))
        if self.d.name == "postgres":
            r = yield Stmt(
                f"DELETE FROM {p}_fences WHERE name_key IN "
                f"(SELECT name_key FROM {p}_fences WHERE lock_key IS NULL LIMIT {int(batch)})"
            )
        else:
            r = yield Stmt(f"DELETE FROM {p}_fences WHERE lock_key IS NULL LIMIT {int(batch)}")
        return r.rowcount

    def seed(self) -> Generator[Stmt, Result, None]:
        """Raise the fence counter above every fence a 0.1.0 name row recorded (only ever up)."""
        p = self.p
        r = yield Stmt(f"SELECT COALESCE(MAX(fence), 0) FROM {p}_fences WHERE lock_key IS NULL")
        top = _i(r.rows[0][0])
        if top <= 0:
            return
        if self.d.name == "postgres":
            yield Stmt(f"SELECT setval('{p}_fence_seq', %s) FROM {p}_fence_seq WHERE last_value < %s", (top, top))
        elif self.sequences:
            yield Stmt(f"SELECT SETVAL({p}_fence_seq, %s)", (top,))  # MariaDB's SETVAL never moves down
        else:  # an explicit id above the counter raises it; one below leaves it
            yield Stmt(f"INSERT IGNORE INTO {p}_fence_ids (id) VALUES (%s)", (top,))
            yield Stmt(f"DELETE FROM {p}_fence_ids WHERE id = %s", (top,))

    def upgrade(self) -> Generator[Stmt, Result, None]:
        """0.1.0 tables: the layout column without a default (a 0.1.0 client's acquire then fails instead of
        writing per-name fences next to ours); rows it already holds count as layout 1."""
        p = self.p
        yield Stmt(f"ALTER TABLE {p}_holders ADD COLUMN IF NOT EXISTS layout SMALLINT NOT NULL DEFAULT 1")
        yield Stmt(f"ALTER TABLE {p}_holders ALTER COLUMN layout DROP DEFAULT")

    def extra_schema(self) -> tuple[str, ...]:
        """The fence counter where the dialect's schema does not have it (MySQL/MariaDB)."""
        p = self.p
        if self.d.name == "postgres":
            return ()
        if self.sequences:
            return (f"CREATE SEQUENCE IF NOT EXISTS {p}_fence_seq",)
        return (
            f"CREATE TABLE IF NOT EXISTS {p}_fence_ids (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY) ENGINE=InnoDB",
        )


# -- connection-bound (session) mode ---------------------------------------------------------------------
# One round trip per acquire: take the lock and, only if it was taken, draw a fence and record this
# connection as a holder, so inspect() can tell a live holder (the recorded connection still holds the
# lock) from a stale record.
#
# Fast layout (PostgreSQL; MariaDB >= 10.5): fences from one global SEQUENCE ``<prefix>_fence_seq`` (never
# goes down, survives restarts: a global counter is increasing per name too), holder records in
# ``<prefix>_session_holders`` keyed by connection id, an UNLOGGED table (PostgreSQL) / a non-transactional
# Aria table (MariaDB): no redo log on the lock path; records of connection-bound locks need not survive a
# restart, the locks do not either. One statement: ``INSERT/REPLACE ... SELECT ... WHERE <lock taken>
# RETURNING fence``.
#
# Portable layout (MySQL without sequences or RETURNING): the fence row of ``<prefix>_fences`` is bumped and
# carries the last holder's lock key, owner, mode and connection id; a multi-statement
# (``GET_LOCK``; conditional upsert; ``SELECT LAST_INSERT_ID()``).


def session_schema(dialect: Dialect, p: str, fast: bool) -> tuple[str, ...]:
    if not fast:
        return ()
    cols = (
        "conn_id BIGINT NOT NULL PRIMARY KEY, name_key CHAR(64) NOT NULL, name TEXT NOT NULL, "
        "lock_key VARCHAR(64) NOT NULL, owner VARCHAR(255) NOT NULL, mode VARCHAR(16) NOT NULL, "
        "fence BIGINT NOT NULL"
    )
    if dialect.name == "mysql":
        return (
            f"CREATE SEQUENCE IF NOT EXISTS {p}_fence_seq",
            f"CREATE TABLE IF NOT EXISTS {p}_session_holders ({cols}, KEY {p}_session_holders_name (name_key)) "
            "ENGINE=Aria TRANSACTIONAL=0 DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        )
    return (
        f"CREATE SEQUENCE IF NOT EXISTS {p}_fence_seq",
        f"CREATE UNLOGGED TABLE IF NOT EXISTS {p}_session_holders ({cols})",
        f"CREATE INDEX IF NOT EXISTS {p}_session_holders_name ON {p}_session_holders (name_key)",
    )


def session_lock_key(dialect: Dialect, name: str) -> str:
    """What the server locks: the GET_LOCK name (MySQL) or the advisory key as text (PostgreSQL)."""
    return get_lock_name(name) if dialect.name == "mysql" else str(advisory_key(name))


def session_acquire(
    dialect: Dialect, p: str, claim: Claim, wait: float | None, idle_timeout: float | None, fast: bool
) -> Stmt:
    """Try (``wait=None``) or wait up to ``wait`` seconds for the lock; the answer is read by
    :func:`session_acquired`. ``idle_timeout``: set the connection's idle timeout (the session lease) too."""
    key = session_lock_key(dialect, claim.name)
    owner = claim.owner[:255]
    nk = name_key(claim.name)
    if dialect.name == "mysql":
        prefix = "" if idle_timeout is None else f"SET SESSION wait_timeout = {max(1, math.ceil(idle_timeout))}; "
        secs = 0 if wait is None else wait
        if fast:
            record = (
                f"REPLACE INTO {p}_session_holders (conn_id, name_key, name, lock_key, owner, mode, fence) "
                f"SELECT CONNECTION_ID(), %s, %s, %s, %s, %s, NEXTVAL({p}_fence_seq) FROM DUAL "
            )
            if wait is None:  # GET_LOCK(name, 0) never blocks: one statement
                return Stmt(
                    f"{prefix}{record}WHERE GET_LOCK(%s, 0) = 1 RETURNING fence, conn_id",
                    (nk, claim.name, key, owner, claim.mode.value, key),
                )
            # a blocking GET_LOCK must not run inside the REPLACE: that would hold the holder table's lock
            return Stmt(
                f"{prefix}SELECT GET_LOCK(%s, %s); {record}WHERE IS_USED_LOCK(%s) = CONNECTION_ID() "
                "RETURNING fence, conn_id",
                (key, secs, nk, claim.name, key, owner, claim.mode.value, key),
            )
        return Stmt(
            f"{prefix}SELECT GET_LOCK(%s, %s); "
            f"INSERT INTO {p}_fences (name_key, name, fence, lock_key, owner, mode, conn_id) "
            "SELECT %s, %s, LAST_INSERT_ID(1), %s, %s, %s, CONNECTION_ID() FROM DUAL "
            "WHERE IS_USED_LOCK(%s) = CONNECTION_ID() "
            "ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1), lock_key = VALUES(lock_key), "
            "owner = VALUES(owner), mode = VALUES(mode), conn_id = VALUES(conn_id); "
            "SELECT LAST_INSERT_ID(), CONNECTION_ID()",
            (key, secs, nk, claim.name, key, owner, claim.mode.value, key),
        )
    shared = "_shared" if claim.mode is Mode.READ else ""
    ms = "0" if idle_timeout is None else str(max(1, math.ceil(idle_timeout * 1000)))
    if wait is None:
        lock = f"pg_try_advisory_lock{shared}(%s::bigint) AS got"
        args: tuple[object, ...] = (ms, int(key))
    else:
        lock = f"set_config('lock_timeout', %s, false) AS lt, (pg_advisory_lock{shared}(%s::bigint))::text = '' AS got"
        args = (ms, f"{max(1, int(wait * 1000))}ms", int(key))
    return Stmt(
        f"WITH l AS (SELECT set_config('idle_session_timeout', %s, false) AS it, {lock}) "
        f"INSERT INTO {p}_session_holders AS h (conn_id, name_key, name, lock_key, owner, mode, fence) "
        f"SELECT pg_backend_pid(), %s, %s, %s, %s, %s, nextval('{p}_fence_seq') FROM l WHERE l.got "
        "ON CONFLICT (conn_id) DO UPDATE SET name_key = EXCLUDED.name_key, name = EXCLUDED.name, "
        "lock_key = EXCLUDED.lock_key, owner = EXCLUDED.owner, mode = EXCLUDED.mode, fence = EXCLUDED.fence "
        "RETURNING h.fence, h.conn_id",
        (*args, nk, claim.name, key, owner, claim.mode.value),
    )


def session_acquired(
    dialect: Dialect, sets: Sequence[Sequence[tuple[object, ...]]], fast: bool
) -> tuple[int, int] | None:
    """(fence, connection id) from the result sets of :func:`session_acquire`, or None if not taken."""
    if dialect.name == "mysql" and not fast:
        # result sets: GET_LOCK's, then (LAST_INSERT_ID(), CONNECTION_ID()); SET and INSERT return none
        if len(sets) < 2 or not sets[0] or sets[0][0][0] != 1:
            return None
    if not sets or not sets[-1]:
        return None
    fence, conn_id = sets[-1][0]
    return _i(fence), _i(conn_id)


def session_unlock(dialect: Dialect, claim: Claim) -> Stmt:
    key = session_lock_key(dialect, claim.name)
    if dialect.name == "mysql":
        return Stmt("SELECT RELEASE_LOCK(%s)", (key,))
    shared = "_shared" if claim.mode is Mode.READ else ""
    return Stmt(f"SELECT pg_advisory_unlock{shared}(%s::bigint)", (int(key),))


def _pg_key_match(alias: str, key_sql: str) -> str:
    return (
        f"{alias}.locktype = 'advisory' AND {alias}.granted AND {alias}.objsubid = 1 "
        f"AND {alias}.classid::bigint = (({key_sql} >> 32) & 4294967295) "
        f"AND {alias}.objid::bigint = ({key_sql} & 4294967295)"
    )


def session_check(dialect: Dialect, claim: Claim, idle_timeout: float | None) -> Stmt:
    """Does this very connection still hold the lock? (Also renews its idle timeout, the session lease.)"""
    key = session_lock_key(dialect, claim.name)
    if dialect.name == "mysql":
        prefix = "" if idle_timeout is None else f"SET SESSION wait_timeout = {max(1, math.ceil(idle_timeout))}; "
        return Stmt(f"{prefix}SELECT IS_USED_LOCK(%s) = CONNECTION_ID()", (key,))
    ms = "0" if idle_timeout is None else str(max(1, math.ceil(idle_timeout * 1000)))
    return Stmt(
        "SELECT set_config('idle_session_timeout', %s, false) IS NOT NULL AND EXISTS (SELECT 1 FROM pg_locks l "
        f"WHERE l.pid = pg_backend_pid() AND {_pg_key_match('l', '%s::bigint')})",
        (ms, int(key), int(key)),
    )


def session_holders(dialect: Dialect, p: str, names: Sequence[str] | None, prefix: str, fast: bool) -> Stmt:
    """Rows (name, owner, mode, fence, recorded conn id, holding conn id, holding mode) of held names."""
    table = f"{p}_session_holders" if fast else f"{p}_fences"
    if names is not None:
        where = f"f.name_key IN ({', '.join(['%s'] * len(names))})"
        args: tuple[object, ...] = tuple(name_key(n) for n in names)
    else:
        where = "SUBSTR(f.name, 1, %s) = %s"
        args = (len(prefix), prefix)
    if dialect.name == "mysql":
        return Stmt(
            "SELECT f.name, f.owner, f.mode, f.fence, f.conn_id, IS_USED_LOCK(f.lock_key), 'lock' "
            f"FROM {table} f WHERE {where} AND f.lock_key IS NOT NULL AND IS_USED_LOCK(f.lock_key) IS NOT NULL "
            "ORDER BY f.name",
            args,
        )
    # every connection that holds the key: ours show their record, others (another application) their pid
    return Stmt(
        "SELECT f.name, f.owner, f.mode, f.fence, f.conn_id, l.pid, l.mode "
        f"FROM {table} f JOIN pg_locks l ON {_pg_key_match('l', 'f.lock_key::bigint')} "
        f"WHERE {where} ORDER BY f.name, l.pid",
        args,
    )


def session_cleanup(dialect: Dialect, p: str, fast: bool) -> Stmt | None:
    """Delete holder records of connections that no longer hold their lock (run at open and close)."""
    if not fast:
        return None
    if dialect.name == "mysql":
        return Stmt(
            f"DELETE FROM {p}_session_holders WHERE IS_USED_LOCK(lock_key) IS NULL OR IS_USED_LOCK(lock_key) <> conn_id"
        )
    return Stmt(
        f"DELETE FROM {p}_session_holders h WHERE NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = h.conn_id "
        f"AND {_pg_key_match('l', 'h.lock_key::bigint')})"
    )


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
    yet (create it with :func:`row_create` and try again); a lock that was not granted is an error, which
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


def row_create(p: str, name: str) -> Stmt:
    return Stmt(f"ROLLBACK; INSERT IGNORE INTO {p}_rows (name_key, name) VALUES (%s, %s)", (name_key(name), name))


def row_unlock(p: str) -> Stmt:
    """Answers whether the transaction (and so the row lock) was still there, then ends it."""
    return Stmt("SELECT @@in_transaction; ROLLBACK")


def row_check(idle_timeout: float | None) -> Stmt:
    prefix = "" if idle_timeout is None else f"SET SESSION wait_timeout = {max(1, math.ceil(idle_timeout))}; "
    return Stmt(f"{prefix}SELECT @@in_transaction")


def row_holders(p: str, names: Sequence[str] | None, prefix: str) -> Stmt:
    """The columns of :func:`session_holders` and whether the record's connection is inside a transaction now
    (the holder keeps its transaction open until it releases; a connection's next acquire replaces its
    record). Needs the PROCESS privilege to see other users' transactions."""
    if names is not None:
        where = f"f.name_key IN ({', '.join(['%s'] * len(names))})"
        args: tuple[object, ...] = tuple(name_key(n) for n in names)
    else:
        where = "SUBSTR(f.name, 1, %s) = %s"
        args = (len(prefix), prefix)
    return Stmt(
        "SELECT f.name, f.owner, f.mode, f.fence, f.conn_id, f.conn_id, f.mode, "
        "f.conn_id IN (SELECT trx_mysql_thread_id FROM information_schema.INNODB_TRX) "
        f"FROM {p}_session_holders f WHERE {where} AND f.lock_key = '{ROW_MARK}' ORDER BY f.name, f.fence",
        args,
    )

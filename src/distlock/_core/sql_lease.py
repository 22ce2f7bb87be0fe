"""SQL of the MySQL/MariaDB and PostgreSQL backends: schema, dialects, and each operation as a script.

No I/O here. Every operation is a generator (sans-I/O): it yields :class:`Stmt` objects and is sent back
a :class:`Result` for each; its return value is the operation's answer. The backend runs the generator
inside one ``BEGIN ... COMMIT`` on one connection (``drive``), so the same logic serves both databases and
both drivers (psycopg on an event loop or not, PyMySQL in a worker thread); only the SQL text differs, and
that lives in a :class:`Dialect`.

Lease-table schema (created on first use, idempotent; ``distlock`` is the ``table_prefix`` option)::

    distlock_fences (name_key CHAR(64) PK, name TEXT, fence BIGINT)   -- one row per name ever locked;
                                                                        the fence never goes down
    distlock_holders(token PK, name_key, name, owner, mode, fence, expires_at DOUBLE, acquired_at DOUBLE)
    distlock_queue  (seq auto PK, token UNIQUE, name_key, name, mode, expires_at DOUBLE)   -- waiters

``name_key`` is the hex SHA-256 of the UTF-8 name: names of any length are indexed without truncation.
Times are seconds since the epoch read from the DATABASE's clock (never the client's), once per
transaction, after the name's fence row is locked.

Atomicity: every acquire first locks the name's fence row (an upsert, which takes the row lock even when
the row exists), so all decisions about one name are serialised by the database; the decision itself is
:mod:`distlock._core.arbiter` (the same rule as SQLite), made between that lock and the COMMIT.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass

from .arbiter import Held, Queued, may_acquire, retry_after, should_queue
from .types import Claim, Grant, HolderInfo, LockInfo, Mode

#: a queued waiter that stops re-trying for this long is dropped from the queue (SAFETY F12)
WAITER_TTL = 5.0

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
    lock_fence: str  # create-or-lock the name's fence row: (key, name)
    read_fence_returns: bool  # lock_fence returns (fence, now); else run SELECT fence, now
    enqueue: str  # (token, key, name, mode, expires_at) -> join or refresh the deadline
    bump_fence: tuple[str, ...]  # session mode: +1 in one autocommit statement, last one returns it
    notify: str | None  # (channel, key): wake the listeners of the name, delivered at commit


def _mysql_schema(p: str) -> tuple[str, ...]:
    opts = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_fences (name_key CHAR(64) NOT NULL PRIMARY KEY, name TEXT NOT NULL, "
        f"fence BIGINT NOT NULL) {opts}",
        f"CREATE TABLE IF NOT EXISTS {p}_holders (token VARCHAR(64) NOT NULL PRIMARY KEY, "
        "name_key CHAR(64) NOT NULL, name TEXT NOT NULL, owner VARCHAR(255) NOT NULL, mode VARCHAR(16) NOT NULL, "
        f"fence BIGINT NOT NULL, expires_at DOUBLE NOT NULL, acquired_at DOUBLE NOT NULL, "
        f"KEY {p}_holders_name (name_key)) {opts}",
        f"CREATE TABLE IF NOT EXISTS {p}_queue (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
        "token VARCHAR(64) NOT NULL UNIQUE, name_key CHAR(64) NOT NULL, name TEXT NOT NULL, "
        f"mode VARCHAR(16) NOT NULL, expires_at DOUBLE NOT NULL, KEY {p}_queue_name (name_key, seq)) {opts}",
    )


def _pg_schema(p: str) -> tuple[str, ...]:
    return (
        f"CREATE TABLE IF NOT EXISTS {p}_fences (name_key CHAR(64) PRIMARY KEY, name TEXT NOT NULL, "
        "fence BIGINT NOT NULL)",
        f"CREATE TABLE IF NOT EXISTS {p}_holders (token VARCHAR(64) PRIMARY KEY, name_key CHAR(64) NOT NULL, "
        "name TEXT NOT NULL, owner TEXT NOT NULL, mode VARCHAR(16) NOT NULL, fence BIGINT NOT NULL, "
        "expires_at DOUBLE PRECISION NOT NULL, acquired_at DOUBLE PRECISION NOT NULL)",
        f"CREATE INDEX IF NOT EXISTS {p}_holders_name ON {p}_holders (name_key)",
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
        lock_fence=f"INSERT INTO {p}_fences (name_key, name, fence) VALUES (%s, %s, 0) "
        "ON DUPLICATE KEY UPDATE fence = fence",
        read_fence_returns=False,
        enqueue=f"INSERT INTO {p}_queue (token, name_key, name, mode, expires_at) VALUES (%s, %s, %s, %s, %s) "
        "ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)",
        bump_fence=(
            f"INSERT INTO {p}_fences (name_key, name, fence) VALUES (%s, %s, LAST_INSERT_ID(1)) "
            "ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)",
            "SELECT LAST_INSERT_ID()",
        ),
        notify=None,
    )


def postgres(prefix: str) -> Dialect:
    p = prefix
    now = "extract(epoch from clock_timestamp())::float8"
    return Dialect(
        name="postgres",
        now=now,
        schema=_pg_schema(p),
        lock_fence=f"INSERT INTO {p}_fences AS f (name_key, name, fence) VALUES (%s, %s, 0) "
        f"ON CONFLICT (name_key) DO UPDATE SET fence = f.fence RETURNING f.fence, {now}",
        read_fence_returns=True,
        enqueue=f"INSERT INTO {p}_queue (token, name_key, name, mode, expires_at) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (token) DO UPDATE SET expires_at = EXCLUDED.expires_at",
        bump_fence=(
            f"INSERT INTO {p}_fences AS f (name_key, name, fence) VALUES (%s, %s, 1) "
            "ON CONFLICT (name_key) DO UPDATE SET fence = f.fence + 1 RETURNING f.fence",
        ),
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

    def _notify(self, key: str) -> Generator[Stmt, Result, None]:
        if self.d.notify is not None:
            yield Stmt(self.d.notify, (self.channel, key))

    def now(self) -> Generator[Stmt, Result, float]:
        r = yield Stmt(f"SELECT {self.d.now}")
        return _f(r.rows[0][0])

    def acquire(self, claim: Claim, key: str) -> Generator[Stmt, Result, Grant]:
        p = self.p
        r = yield Stmt(self.d.lock_fence, (key, claim.name))
        if not self.d.read_fence_returns:
            r = yield Stmt(f"SELECT fence, {self.d.now} FROM {p}_fences WHERE name_key = %s", (key,))
        fence, now = _i(r.rows[0][0]), _f(r.rows[0][1])
        r = yield Stmt(
            f"SELECT 0, token, mode, expires_at, 0 FROM {p}_holders WHERE name_key = %s UNION ALL "
            f"SELECT 1, token, mode, expires_at, seq FROM {p}_queue WHERE name_key = %s",
            (key, key),
        )
        holders: list[Held] = []
        queue: list[Queued] = []
        stale = False
        for kind, token, mode, expires, seq in r.rows:
            if _f(expires) <= now:
                stale = True
            elif kind == 0:
                holders.append(Held(str(token), Mode(str(mode)), _f(expires)))
            else:
                queue.append(Queued(str(token), Mode(str(mode)), _i(seq), _f(expires)))
        queue.sort(key=lambda q: q.seq)
        if stale:
            yield Stmt(f"DELETE FROM {p}_holders WHERE name_key = %s AND expires_at <= %s", (key, now))
            yield Stmt(f"DELETE FROM {p}_queue WHERE name_key = %s AND expires_at <= %s", (key, now))
        if any(h.token == claim.token for h in holders):  # a retry after a lost reply: already ours
            r = yield Stmt(f"SELECT fence FROM {p}_holders WHERE token = %s", (claim.token,))
            return Grant(True, fence=_i(r.rows[0][0]))
        if may_acquire(claim.mode, claim.token, claim.permits, claim.fair, holders, queue):
            fence += 1
            yield Stmt(f"UPDATE {p}_fences SET fence = %s WHERE name_key = %s", (fence, key))
            yield Stmt(
                f"INSERT INTO {p}_holders (token, name_key, name, owner, mode, fence, expires_at, acquired_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (claim.token, key, claim.name, claim.owner[:255], claim.mode.value, fence, now + claim.ttl, now),
            )
            if any(q.token == claim.token for q in queue):
                yield Stmt(f"DELETE FROM {p}_queue WHERE token = %s", (claim.token,))
            return Grant(True, fence=fence)
        if should_queue(claim.mode, claim.fair):
            yield Stmt(self.d.enqueue, (claim.token, key, claim.name, claim.mode.value, now + WAITER_TTL))
        return Grant(False, retry_after=retry_after(holders, now))

    def abandon(self, claim: Claim, key: str) -> Generator[Stmt, Result, bool]:
        p = self.p
        a = yield Stmt(f"DELETE FROM {p}_queue WHERE token = %s", (claim.token,))
        b = yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s", (claim.token,))
        if a.rowcount or b.rowcount:
            yield from self._notify(key)
            return True
        return False

    def release(self, claim: Claim, key: str) -> Generator[Stmt, Result, bool]:
        """Compare-and-delete by token; True if it was still a live lease."""
        p = self.p
        r = yield Stmt(f"SELECT expires_at - {self.d.now} FROM {p}_holders WHERE token = %s FOR UPDATE", (claim.token,))
        if not r.rows:
            return False
        yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s", (claim.token,))
        yield from self._notify(key)
        return _f(r.rows[0][0]) > 0

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

    def bump_fence(self, name: str) -> Generator[Stmt, Result, int]:
        """Session mode: the next fence of ``name`` (the caller holds the name's connection-bound lock)."""
        r = Result([], 0)
        for i, sql in enumerate(self.d.bump_fence):
            r = yield Stmt(sql, (name_key(name), name) if i == 0 else ())
        return _i(r.rows[0][0])

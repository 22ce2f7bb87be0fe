"""SQL of the MySQL/MariaDB and PostgreSQL backends: schema, dialects, and each operation as a script.

No I/O here. Every operation is a generator (sans-I/O): it yields ``Stmt`` objects and is sent back
a ``Result`` for each; its return value is the operation's answer. The backend runs the generator
inside one ``BEGIN ... COMMIT`` on one connection (``drive``), so the same logic serves both databases and
both drivers (psycopg on an event loop or not, PyMySQL in a worker thread); only the SQL text differs, and
that lives in a ``Dialect``.

PostgreSQL's lease mode runs ``StatementOps`` instead, on every connection (even through PgBouncer's
statement pooling, which refuses BEGIN): each statement on its own in autocommit, and each try of the acquire
as one batch of three statements, one transaction (the protocol of ``docs/models/sql_lease_statement.pml``;
see ``BatchOps``). MySQL/MariaDB run ``Ops`` (``docs/models/sql_lease.pml``).

Lease-table schema (created on first use, idempotent; ``distlock`` is the ``table_prefix`` option)::

    distlock_fences (name_key CHAR(64) PK, name TEXT, fence BIGINT)   -- 0.1.0's per-name fences: emptied
                                                                        at the upgrade (kept for the session
                                                                        mode's portable layout)
    distlock_holders(token PK, name_key, name, owner, mode, fence, expires_at DOUBLE, acquired_at DOUBLE,
                     layout SMALLINT NOT NULL)  -- no default: a 0.1.0 client's INSERT fails (mixed fleet)
    distlock_queue  (seq auto PK, token UNIQUE, name_key, name, mode, expires_at DOUBLE,    -- waiters
                     owner TEXT NULL)  -- PostgreSQL: the record a release's hand-over copies
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
itself is ``distlock._core.arbiter`` (the same rule as SQLite), made between that lock and the COMMIT.

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
import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace

from .arbiter import Held, Queued, decide, lease_infos, looks_ahead, should_queue
from .sql_dialects import Dialect
from .timing import WAITER_TTL, bound, monotonic
from .types import Claim, Grant, LockInfo, Mode

#: holder rows of this layout; 0.1.0's have none (``upgrade`` gives them 1)
LAYOUT = 2
#: the owner column's size on MySQL/MariaDB (``VARCHAR(255)``): an election's owner id and value must fit
OWNER_CHARS = 255
#: ``sweep`` removes holder and queue rows that expired this long ago (crashed processes)
SWEEP_GRACE = 60.0
#: ``sweep`` removes at most this many 0.1.0 fence rows per call
SWEEP_BATCH = 5000


_PREFIX = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,40}$")


def valid_prefix(prefix: str) -> bool:
    return bool(_PREFIX.match(prefix))


def name_key(name: str) -> str:
    """The full SHA-256 of the name (hex): the primary key of a name in every table."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()


def name_filter(names: Sequence[str] | None, prefix: str, table: str = "") -> tuple[str, tuple[object, ...]]:
    """The WHERE condition (and its arguments) for ``inspect``: these names, or every name that starts with
    ``prefix``; ``table``: the alias the columns are qualified with."""
    t = f"{table}." if table else ""
    if names is not None:
        return f"{t}name_key IN ({', '.join(['%s'] * len(names))})", tuple(name_key(n) for n in names)
    return f"SUBSTR({t}name, 1, %s) = %s", (len(prefix), prefix)


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


#: the prefix of the lease mode's companion ``GET_LOCK`` names (``bell_name``)
BELL_PREFIX = "distlock-bell:"
#: what ``get_lock_name`` makes of a name longer than 64 characters
_MAPPED = re.compile(r"~[A-Za-z0-9_-]{43}")


def bell_name(key: str) -> str:
    """MySQL companion ``GET_LOCK`` a holder keeps while it holds ``key`` (waiters block on it)."""
    return BELL_PREFIX + key[:48]


def get_lock_refused(name: str) -> str | None:
    """Why ``name`` cannot be a ``GET_LOCK`` session-mode name, or None: one that ``get_lock_name`` gives a
    longer name (``~`` + 43 base64url characters) would share that name's lock, and one starting with
    ``BELL_PREFIX`` a lease-mode store's companion lock on the same server."""
    if _MAPPED.fullmatch(name):
        return (
            "on MySQL (mode=session) a lock name may not have the shape ~<43 base64url characters>: that is the "
            "GET_LOCK name of a name longer than 64 characters; choose another name"
        )
    if name.startswith(BELL_PREFIX):
        return f"on MySQL a lock name may not start with {BELL_PREFIX!r}: those are distlock's own GET_LOCK names"
    return None


@dataclass(frozen=True)
class Stmt:
    sql: str
    params: tuple[object, ...] = ()
    #: set by ``BatchOps`` only: ``sql`` is several statements sent as ONE simple-protocol Query
    #: (one implicit transaction); the result is that of its statement at this index (0 = the first). The
    #: server reads a Query whole before it runs any of it, so a link that goes silent mid-send never leaves
    #: it holding the name's lock while it waits for the rest (a pipeline of extended-protocol statements
    #: runs each as it arrives: the lock was held for as long as the link stayed silent)
    batch: int | None = None
    #: a ``batch`` statement's statements one by one, each with its own parameters (``sql``/``params`` are
    #: them joined): a driver that keeps them prepared on the server runs these (still in ONE Query)
    parts: tuple[tuple[str, tuple[object, ...]], ...] = ()
    #: PostgreSQL: the statement takes the name's lock, and the server waits for it (and for any row lock
    #: after it) at most this many seconds, well inside the call's own bound: a wait that ends there is
    #: "busy", answered with no rows, never the call's timeout (``lock_timeout`` for this Query only)
    name_wait: float | None = None
    #: the script's final statement: it returns as soon as this one is answered. A driver that can send
    #: several statements in one round trip (MySQL) sends the transaction's COMMIT with it
    last: bool = False
    #: MySQL: with ``last``, the end to send instead of the driver's own (its COMMIT lets go of every named
    #: lock of the session; a grant behind a bell wait lets go of the name's only: the new holder keeps the
    #: bell, ``Ops.acquire_after_bell``)
    commit: str | None = None


def chain(*stmts: Stmt, last: bool = False) -> Stmt:
    """Statements sent one after another in ONE round trip (a MySQL multi-statement): the answer is the last
    result set that has rows (a SELECT or a RETURNING), so only one of them may be read. For a statement
    whose answer does not decide what comes next in the transaction."""
    return Stmt("; ".join(s.sql for s in stmts), tuple(v for s in stmts for v in s.params), last=last)


def batch(parts: Sequence[tuple[str, Sequence[object]]], answer: int, name_wait: float | None = None) -> Stmt:
    """One ``Stmt`` of several statements, answered by the result of ``parts[answer]``."""
    return Stmt(
        "; ".join(sql for sql, _ in parts),
        tuple(v for _, params in parts for v in params),
        batch=answer,
        parts=tuple((sql, tuple(params)) for sql, params in parts),
        name_wait=name_wait,
    )


@dataclass(frozen=True)
class Result:
    rows: list[tuple[object, ...]]
    rowcount: int


Script = Generator[Stmt, Result, object]


def token_digest(token: str) -> str:
    """How a hand-over NOTIFY names the waiter it granted the name to: the first 32 hex digits of the
    SHA-256 of its token (whoever may LISTEN must not learn tokens; the same expression runs in SQL)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True)
class HandOver:
    """A release granted the name to a queued waiter (PostgreSQL's NOTIFY payload after the name key:
    ``digest|fence|stamp``): the waiter's ``token_digest``, its fence, and the lease end the release gave
    its row, which is the deadline the waiter's queue entry had: the one its last write of it wrote (a refused
    try's, ``Grant.queued_until``, or its store's batched keep's)."""

    digest: str
    fence: int
    stamp: float


def handover_of(payload: str) -> tuple[str, HandOver | None]:
    """(name key, hand-over or None) of a NOTIFY payload: a plain wake-up is the name key alone; anything
    malformed after it is a wake-up, never a grant."""
    key, bar, rest = payload.partition("|")
    if not bar:
        return key, None
    parts = rest.split("|")
    try:
        return key, HandOver(parts[0], int(parts[1]), float(parts[2])) if len(parts) == 3 else None
    except ValueError:
        return key, None


def single(stmt: Stmt) -> Generator[Stmt, Result, Result]:
    """A script of one statement, returning its result."""
    r = yield stmt
    return r


def to_float(value: object) -> float:
    """A number the driver returned (Decimal, int, float or str) as a float."""
    return float(value)  # type: ignore[arg-type]


def to_int(value: object) -> int:
    """A number the driver returned as an int."""
    return int(value)  # type: ignore[call-overload,no-any-return]


class Ops:
    """The operations of the lease-table mode, as scripts over one dialect and one table prefix."""

    def __init__(self, dialect: Dialect, prefix: str, channel: str) -> None:
        self.d = dialect
        self.p = prefix
        self.channel = channel
        #: MySQL/MariaDB: the server has SEQUENCE (MariaDB >= 10.5); set by the backend once it knows
        self.sequences = dialect.name == "postgres"
        #: seconds an acquire waits on the server for the name's lock (another acquire's transaction): the
        #: backend makes it half its call bound, so that a lock held long (a client gone silent mid-acquire)
        #: is "busy, try again" to the others, never a call that timed out
        self.name_wait = 2.5

    def wait_for_name(self) -> float:
        """How long this try waits on the server for the name's lock: ``name_wait``, or half of what the call
        has left of its caller's deadline (``timing.Budget``) where that is less: a wait past it would turn a
        busy name into a call cut off at the deadline."""
        left = bound(None)
        return self.name_wait if left is None else min(self.name_wait, left / 2)

    #: the operations whose script runs without the driver's BEGIN/COMMIT (it is one batch that makes its
    #: own transaction, or statements that each stand alone)
    own_tx: frozenset[str] = frozenset()
    #: a release grants the name to the first queued exclusive claim (``StatementOps.release_to_next``)
    handover = False
    #: the queue rows carry their store's reply channel (``StatementOps``)
    replies = False
    reply: str | None = None
    #: PostgreSQL: until this moment (monotonic) the statements wake nobody, because the server refused a
    #: NOTIFY (its notification queue is full: ``mute``)
    muted_until = float("-inf")

    def mute(self, seconds: float) -> None:
        """Stop sending NOTIFYs for ``seconds``. PostgreSQL keeps every notification until each LISTEN
        session has read it, in a queue of bounded size; one session that stops reading (a stopped process,
        a LISTEN left idle in a transaction, any application's) fills it, and then every transaction that
        notifies fails at COMMIT. A release that notifies would then fail too and leave the name held until
        its lease end: for a while the statements call a function of the same arguments with no effect
        instead (the waiters elsewhere look again at least every second, ``LEASE_WAIT_SLICE``)."""
        self.muted_until = monotonic() + seconds

    def muted(self) -> bool:
        return monotonic() < self.muted_until

    def _wake(self, args: str) -> str:
        """The NOTIFY call of a statement, ``pg_notify(args)``; while ``muted``, ``textcat(args)``: the
        same two text arguments (the statement binds the same parameters), no effect, a value nobody reads."""
        return f"{'textcat' if self.muted() else 'pg_notify'}({args})"

    def takes_handover(self, claim: Claim) -> bool:
        """Whether a release may grant ``claim`` the name (``StatementOps.release_to_next``): an exclusive
        kind, where the store hands over, and a TTL no shorter than the queue deadline. The promoted row lasts
        until that deadline, so a waiter that died while queued then blocks the name no longer than a holder
        that died would (a claim with a shorter TTL is only woken, and takes the name with its own try)."""
        return self.handover and not claim.mode.shared and claim.ttl >= WAITER_TTL

    def queues(self, claim: Claim) -> bool:
        """Whether a refused try of ``claim`` joins (or refreshes) its queue entry: where the rule needs it
        (``should_queue``), and where a release may hand it the name."""
        return should_queue(claim.mode, claim.fair) or self.takes_handover(claim)

    def _notify(self, key: str) -> Generator[Stmt, Result, None]:
        for stmt in self._notify_stmt(key):  # noqa: UP028 (a list cannot take the driver's send())
            yield stmt

    def _notify_stmt(self, key: str) -> list[Stmt]:
        """The statement that wakes the name's listeners (PostgreSQL's NOTIFY), if the dialect has one."""
        return [] if self.d.notify is None or self.muted() else [Stmt(self.d.notify, (self.channel, key))]

    def now(self) -> Generator[Stmt, Result, float]:
        r = yield Stmt(f"SELECT {self.d.now}")
        return to_float(r.rows[0][0])

    def _lock_name(self, key: str) -> Stmt:
        """The name's transaction lock: PostgreSQL's two-int advisory key from SHA-256(prefix:key); MySQL's
        GET_LOCK name ``prefix:key`` (cut to 64 characters: a collision only serialises two names)."""
        if self.d.name == "postgres":
            h = hashlib.sha256(f"{self.p}:{key}".encode()).digest()
            a, b = (int.from_bytes(h[i : i + 4], "big", signed=True) for i in (0, 4))
            return Stmt(self.d.lock_name, (a, b))
        return Stmt(self.d.lock_name, (f"{self.p}:{key}"[:64], self.wait_for_name()))

    def _insert_holder(self, claim: Claim, key: str, now: float) -> Stmt:
        """Insert the holding with a fence from the store's one counter; the statement returns the fence."""
        p = self.p
        cols = f"INSERT INTO {p}_holders (token, name_key, name, owner, mode, fence, expires_at, acquired_at, layout) "
        # an election's record must fit whole (the backend checks); a plain owner id is only informational
        owner = claim.record if claim.value is not None else claim.owner[:OWNER_CHARS]
        args = (claim.token, key, claim.name, owner, claim.mode.value, now + claim.ttl, now)
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

    def _queue_read(
        self, claim: Claim, key: str, t: str, tp: tuple[object, ...], expired: bool
    ) -> tuple[list[str], list[object]]:
        """The queue rows of a try's read (``kind, token, mode, expires_at, seq`` with kind 1), as SELECTs to
        join with UNION ALL, and their arguments; ``t``: the try's clock (SQL, with arguments ``tp``);
        ``expired``: also the expired rows the try is to delete (the whole queue's, or the claim's own).

        Only what the rule looks at (``looks_ahead``) where that is a number: the
        first k live entries ahead of the claim's, and its own. Reading the whole queue made every try cost
        O(waiters) on the wire and in the client. A guard built on such a read stays exact: the rule grants
        on it only when it shows fewer than k ahead, which is then all of them."""
        p = self.p
        live = "" if expired else f" AND expires_at > {t}"
        k = looks_ahead(claim.mode, claim.fair, claim.permits)
        own = f"SELECT 1, token, mode, expires_at, seq FROM {p}_queue WHERE token = %s{live}"
        if k == 0:  # the rule looks at no entry ahead (a claim that is not fair): its own entry only
            return [own], [claim.token, *(() if expired else tp)]
        if k is None:
            return [f"SELECT 1, token, mode, expires_at, seq FROM {p}_queue WHERE name_key = %s{live}"], [
                key,
                *(() if expired else tp),
            ]
        ahead = (
            f"(SELECT 1, q.token, q.mode, q.expires_at, q.seq FROM {p}_queue q WHERE q.name_key = %s AND "
            f"q.expires_at > {t} AND q.token <> %s AND q.seq < COALESCE((SELECT m.seq FROM {p}_queue m "
            f"WHERE m.token = %s), 9223372036854775807) ORDER BY q.seq LIMIT {int(k)})"
        )
        return [ahead, own], [key, *tp, claim.token, claim.token, claim.token, *(() if expired else tp)]

    def acquire(self, claim: Claim, key: str) -> Generator[Stmt, Result, Grant]:
        """One try (MySQL/MariaDB; PostgreSQL runs ``BatchOps.acquire``): the name's lock, one read of
        its holders and of the queue entries the rule looks at, the decision in Python, then its writes.
        Two round trips when it grants or queues: the lock goes with the read (its answer and clock carried
        in session variables, ``Dialect.lock_into``), and the writes with the COMMIT (``Stmt.last``). Sent
        one by one, the five statements of an uncontended try cost a quarter more."""
        grant = yield from self._acquire(claim, key, after_bell=False)
        assert grant is not None  # None only after a bell
        return grant

    def acquire_after_bell(self, claim: Claim, key: str, keep_bell: bool) -> Generator[Stmt, Result, Grant | None]:
        """MySQL: ``acquire`` sent right behind a waiter's bell wait, its first round trip the bell's
        (``mysql/lease.py``); None when the bell did not ring (nobody rings it: the waiter polls instead; or
        the wait timed out: the caller decides whether to try, as at its deadline it must not).
        ``keep_bell``: the bell wait kept the bell it was granted, and a grant keeps it (its COMMIT lets go of
        the name's lock only); a refusal lets go of it with every other named lock, as any try does."""
        grant = yield from self._acquire(claim, key, after_bell=True, keep_bell=keep_bell)
        return grant

    def _acquire(
        self, claim: Claim, key: str, after_bell: bool, keep_bell: bool = False
    ) -> Generator[Stmt, Result, Grant | None]:
        p = self.p
        lock_into = self.d.lock_after_bell if after_bell else self.d.lock_into
        assert lock_into is not None, "the transactional acquire runs on MySQL/MariaDB"
        lock = self._lock_name(key)
        # expired queue entries are read too (deleted below), except those a short read leaves to the sweep
        queue_reads, qp = self._queue_read(claim, key, "@distlock_now", (), expired=True)
        r = yield Stmt(
            f"{lock_into}; SELECT 2, @distlock_locked, {'@distlock_bell_at' if after_bell else 'NULL'}, @distlock_now, 0 "
            "UNION ALL "
            f"SELECT 0, token, mode, expires_at, 0 FROM {p}_holders WHERE name_key = %s UNION ALL "
            + " UNION ALL ".join(queue_reads),
            (*lock.params, key, *qp),
        )
        # kind 2: the lock's answer and the clock; 0: a holder; 1: a queue entry (UNION ALL keeps no order)
        _, locked, bell_at, clock, _ = next(row for row in r.rows if to_int(row[0]) == 2)
        if locked is None and after_bell:
            return None  # after a bell wait that did not ring: not tried
        if locked is None or to_int(locked) != 1:  # not granted within name_wait (a stuck transaction)
            return Grant(False, retry_after=0.05)
        now = to_float(clock)
        # after a bell: the lease counts from this clock, which the server read this long after the bell wait
        # began, no earlier than the request was sent (``valid_for`` counts from that send)
        valid_for = claim.ttl + max(0.0, now - to_float(bell_at)) if after_bell else None
        holders: list[Held] = []
        queue: list[Queued] = []
        stale_holders = stale_waiters = 0
        for kind, token, mode, expires, seq in r.rows:
            if kind == 2:
                continue
            if to_float(expires) <= now:
                if kind == 0:
                    stale_holders += 1
                else:
                    stale_waiters += 1
            elif kind == 0:
                holders.append(Held(str(token), Mode(str(mode)), to_float(expires)))
            else:
                queue.append(Queued(str(token), Mode(str(mode)), to_int(seq), to_float(expires)))
        queue.sort(key=lambda q: q.seq)
        if stale_holders:
            # Waits for the row lock of a renewal in flight and re-evaluates on its committed row: a renewal
            # that committed meanwhile makes this delete fewer rows than we saw expired. Then our look at the
            # holders is out of date: decide nothing, try again (the renewed lease is live).
            d = yield Stmt(f"DELETE FROM {p}_holders WHERE name_key = %s AND expires_at <= %s", (key, now))
            if d.rowcount < stale_holders:
                return Grant(False, retry_after=0.0)
        # writes whose answer decides nothing go in the round trip of the statement after them
        stale = Stmt(f"DELETE FROM {p}_queue WHERE name_key = %s AND expires_at <= %s", (key, now))
        before = [stale] if stale_waiters else []
        decision = decide(claim, holders, queue, now, register_all=False)
        # a grant that keeps the bell: its COMMIT lets go of the name's lock only (a name lock is the
        # validated prefix and hex: safe as a literal)
        name_lock = str(lock.params[0])
        assert re.fullmatch(r"[A-Za-z0-9_:]+", name_lock), name_lock
        commit = f"COMMIT; DO RELEASE_LOCK('{name_lock}')" if keep_bell else None
        if decision.ours:
            r = yield replace(
                chain(*before, Stmt(f"SELECT fence FROM {p}_holders WHERE token = %s", (claim.token,)), last=True),
                commit=commit,
            )
            return Grant(True, fence=to_int(r.rows[0][0]))
        if decision.grant:
            queued = any(q.token == claim.token for q in queue)
            after = [Stmt(f"DELETE FROM {p}_queue WHERE token = %s", (claim.token,))] if queued else []
            if claim.value is not None:  # a new leader: its observers look again
                after.extend(self._notify_stmt(key))
            r = yield replace(chain(*before, self._insert_holder(claim, key, now), *after, last=True), commit=commit)
            return Grant(True, fence=to_int(r.rows[0][0]), valid_for=valid_for)
        place = None
        if decision.enqueue:
            # our place, which this store's wake-ups go by (``Wakers.place``): read once, when we join
            join = Stmt(self.d.enqueue, (claim.token, key, claim.name, claim.mode.value, now + WAITER_TTL))
            r = yield chain(
                *before, join, Stmt(f"SELECT seq FROM {p}_queue WHERE token = %s", (claim.token,)), last=True
            )
            place = to_int(r.rows[0][0]) if r.rows else None
        elif before:
            yield chain(*before, last=True)
        return Grant(False, retry_after=decision.retry_after, place=place)

    def abandon(self, claim: Claim, key: str) -> Generator[Stmt, Result, bool]:
        """Delete the claim's queue entry and holding. The name's lock first: an acquire of this claim that
        was cancelled in flight (its connection shut down) may still be running on the server, and holds
        that lock until it commits or rolls back; deleting before then would miss what it commits. A claim
        whose last try was answered (settled: nothing of it runs on the server) needs the deletes alone:
        ``abandon_settled``, which also cleans up many at once."""
        p = self.p
        yield self._lock_name(key)
        a = yield Stmt(f"DELETE FROM {p}_queue WHERE token = %s", (claim.token,))
        b = yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s", (claim.token,))
        if a.rowcount or b.rowcount:
            yield from self._notify(key)
            return True
        return False

    def abandon_settled(self, claims: Sequence[tuple[Claim, str]]) -> Generator[Stmt, Result, dict[str, bool]]:
        """``abandon`` of many ``settled`` claims (each with its name key) at once: a store's waiters that
        time out together clean up in one transaction, not one each (a thousand of them waited for the
        store's few pool connections past their deadlines). Which tokens had something deleted; here the
        deletes report only counts, so every token counts as found when any row went (a spare wake-up)."""
        p = self.p
        tokens = [c.token for c, _ in claims]
        marks = ", ".join(["%s"] * len(tokens))
        a = yield Stmt(f"DELETE FROM {p}_queue WHERE token IN ({marks})", tuple(tokens))
        b = yield Stmt(f"DELETE FROM {p}_holders WHERE token IN ({marks})", tuple(tokens))
        found = bool(a.rowcount or b.rowcount)
        if found:
            for key in dict.fromkeys(k for _, k in claims):
                yield from self._notify(key)
        return dict.fromkeys(tokens, found)

    def release_to_next(self, claim: Claim, key: str) -> Generator[Stmt, Result, tuple[bool, HandOver | None]]:
        """``release``, and the hand-over it made if any (``StatementOps``)."""
        ok = yield from self.release(claim, key)
        return ok, None

    def release(self, claim: Claim, key: str) -> Generator[Stmt, Result, bool]:
        """Compare-and-delete by token, in autocommit (no transaction needed: one row, by its key); True if
        it was still a live lease. PostgreSQL: one statement that also notifies the name's waiters. MySQL:
        delete it if live; only if that found nothing, delete an expired remnant."""
        p = self.p
        if self.d.notify is not None:
            r = yield Stmt(
                f"WITH d AS (DELETE FROM {p}_holders WHERE token = %s RETURNING expires_at) "
                f"SELECT (SELECT expires_at FROM d) > {self.d.now}, {self._wake('%s, %s')}",
                (claim.token, self.channel, key),
            )
            return bool(r.rows and r.rows[0][0])
        r = yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s AND expires_at > {self.d.now}", (claim.token,))
        if r.rowcount == 1:
            return True
        yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s", (claim.token,))
        return False

    def release_ringing(self, claim: Claim, companion: str) -> Generator[Stmt, Result, bool]:
        """MySQL: ``release``, and the waiters' bell (the ``GET_LOCK`` companion ``companion``) let go in
        the same round trip, on the connection that holds that bell (``mysql/lease.py``): whether our row was
        live, then the delete, then the let-go (after the delete: a waiter the bell wakes finds the row gone)."""
        p = self.p
        r = yield Stmt(
            f"SET @distlock_live = (SELECT expires_at > {self.d.now} FROM {p}_holders WHERE token = %s); "
            f"DELETE FROM {p}_holders WHERE token = %s; SELECT COALESCE(@distlock_live, 0), RELEASE_LOCK(%s)",
            (claim.token, claim.token, companion),
        )
        return bool(to_int(r.rows[0][0]))

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
        r = yield Stmt(
            f"SELECT token FROM {p}_holders WHERE token IN ({marks}) AND expires_at > %s", (*tokens, now), last=True
        )
        alive = {str(row[0]) for row in r.rows}
        return [c.token in alive for c in claims]

    def keep(self, tokens: Sequence[str]) -> Generator[Stmt, Result, dict[str, float]]:
        """Extend the live queue entries of ``tokens`` by ``WAITER_TTL`` (the waiters that only keep their
        place); the answer: the tokens whose entry was live, each with the deadline it has now."""
        now = yield from self.now()
        marks = ", ".join(["%s"] * len(tokens))
        yield Stmt(
            f"UPDATE {self.p}_queue SET expires_at = %s WHERE token IN ({marks}) AND expires_at > %s",
            (now + WAITER_TTL, *tokens, now),
        )
        r = yield Stmt(
            f"SELECT token, expires_at FROM {self.p}_queue WHERE token IN ({marks}) AND expires_at > %s",
            (*tokens, now),
            last=True,
        )
        return {str(row[0]): to_float(row[1]) for row in r.rows}

    def proclaim(self, claim: Claim, key: str, record: str) -> Generator[Stmt, Result, bool]:
        """An election leader's new owner record, if its lease is still live (the row lock orders it with an
        acquire that would delete the row as expired, as for renewals); observers are notified."""
        r = yield Stmt(
            f"UPDATE {self.p}_holders SET owner = %s WHERE token = %s AND expires_at > {self.d.now}",
            (record, claim.token),
        )
        if r.rowcount != 1:
            return False
        yield from self._notify(key)
        return True

    def holds(self, claim: Claim) -> Generator[Stmt, Result, bool]:
        r = yield Stmt(f"SELECT 1 FROM {self.p}_holders WHERE token = %s AND expires_at > {self.d.now}", (claim.token,))
        return bool(r.rows)

    def inspect(self, names: Sequence[str] | None, prefix: str = "") -> Generator[Stmt, Result, list[LockInfo]]:
        p = self.p
        now = yield from self.now()
        where, args = name_filter(names, prefix)
        r = yield Stmt(
            f"SELECT name, owner, mode, fence, expires_at FROM {p}_holders WHERE {where} AND expires_at > %s "
            "ORDER BY name, fence",
            (*args, now),
        )
        w = yield Stmt(
            f"SELECT name_key, COUNT(*) FROM {p}_queue WHERE {where} AND expires_at > %s GROUP BY name_key",
            (*args, now),
        )
        waiting = {str(k): to_int(c) for k, c in w.rows}
        rows = ((str(n), str(o), str(m), to_int(f), to_float(e)) for n, o, m, f, e in r.rows)
        return lease_infos(rows, lambda n: waiting.get(name_key(n), 0), now)

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
        top = to_int(r.rows[0][0])
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


class BatchOps(Ops):
    """The lease-mode acquire in ONE round trip when the name is free (PostgreSQL): the protocol of
    ``docs/models/sql_lease_statement.pml`` (``-DONE_CLOCK -DBLIND``, model-checked; see its header).

    Each try is one ``batch``, one transaction (the implicit transaction of ONE simple-protocol Query,
    which the server reads whole before it takes the name's lock), comparing every expiry with ONE clock reading
    (``now()``, the transaction's start): the name's lock as its own first
    statement, the stale-row DELETEs (they wait for an in-flight renewal's row lock), then the INSERT of our
    holding guarded by "the name's live holders, and the live queue entries ahead of us, are exactly the
    tokens we expect", the removal of our queue entry if we now hold, a refused claim that must queue
    (``should_queue``) joins or refreshes its entry, and last a read of the
    name (holders with their fences, queue, the clock) as the answer.

    The first try expects nobody (blind: no read first): a free name is granted in that one round trip.
    Otherwise ``decide`` rules on the answer's read (made under the name's lock,
    after our own writes); if it grants (a reader among readers, a free semaphore permit), a second try
    expects exactly what was read. The guard narrows the rule, never widens it: an INSERT happens only on
    a state the rule grants.
    """

    #: the clock every statement of a try compares with (PostgreSQL: the implicit transaction's start)
    NOW = "extract(epoch from now())::float8"
    own_tx = frozenset({"acquire"})

    def _guard(
        self, claim: Claim, key: str, holders: Sequence[str], ahead: Sequence[str], t: str
    ) -> tuple[str, str, list[object]]:
        """The guard of a try's INSERT: the name's live holders are exactly ``holders``, and the live queue
        entries ahead of the claim exactly ``ahead``; returns the FROM/WHERE of the live holders (for the
        answer's read), the condition and its arguments. ``t``: the try's one clock reading."""
        p = self.p
        live_h = f"FROM {p}_holders WHERE name_key = %s AND expires_at > {t}"
        live_q = (
            f"FROM {p}_queue q WHERE q.name_key = %s AND q.expires_at > {t} AND q.token <> %s AND q.seq < "
            f"COALESCE((SELECT m.seq FROM {p}_queue m WHERE m.token = %s), 9223372036854775807)"
        )
        # "exactly none" as NOT EXISTS: it stops at the first row, where a COUNT reads every entry ahead (a
        # waiter at the back of 1,000 would scan them all at every try)
        guard = [f"(SELECT COUNT(*) {live_h}) = %s" if holders else f"NOT EXISTS (SELECT 1 {live_h})"]
        gp: list[object] = [key, len(holders)] if holders else [key]
        if holders:
            guard.append(f"NOT EXISTS (SELECT 1 {live_h} AND token NOT IN ({', '.join(['%s'] * len(holders))}))")
            gp += [key, *holders]
        if looks_ahead(claim.mode, claim.fair, claim.permits) == 0:
            return live_h, " AND ".join(guard), gp  # the rule looks at no entry ahead: neither does the guard
        guard.append(f"(SELECT COUNT(*) {live_q}) = %s" if ahead else f"NOT EXISTS (SELECT 1 {live_q})")
        gp += [key, claim.token, claim.token, len(ahead)] if ahead else [key, claim.token, claim.token]
        if ahead:
            guard.append(f"NOT EXISTS (SELECT 1 {live_q} AND q.token NOT IN ({', '.join(['%s'] * len(ahead))}))")
            gp += [key, claim.token, claim.token, *ahead]
        return live_h, " AND ".join(guard), gp

    def _try(self, claim: Claim, key: str, holders: Sequence[str], ahead: Sequence[str]) -> Stmt:
        """One try: one ``batch`` answered by a read of the name (rows of kind 0: holders with their
        fences, 1: queue entries with their seq, 2: the clock and whether the name's lock was granted)."""
        raise NotImplementedError

    def acquire(self, claim: Claim, key: str) -> Generator[Stmt, Result, Grant]:
        holders: Sequence[str] = ()
        ahead: Sequence[str] = ()
        for _ in range(2):
            r = yield self._try(claim, key, holders, ahead)
            held: list[Held] = []
            queue: list[Queued] = []
            now, got = 0.0, 0
            wrote: float | None = None
            for kind, token, mode, expires, extra in r.rows:
                if kind == 2:
                    now, got = to_float(expires), to_int(extra)
                elif kind == 0:
                    if str(token) == claim.token:  # granted now, or already (a retry after a lost reply)
                        return Grant(True, fence=to_int(extra))
                    held.append(Held(str(token), Mode(str(mode)), to_float(expires)))
                elif kind in (1, 4):  # 4: our entry as this try wrote it (a hand-over echoes its deadline)
                    queue.append(Queued(str(token), Mode(str(mode)), to_int(extra), to_float(expires)))
                    if kind == 4:
                        wrote = to_float(expires)
            if not got:  # the name's lock not granted within name_wait (a stuck transaction): busy
                return Grant(False, retry_after=0.05)
            queue.sort(key=lambda q: q.seq)
            decision = decide(claim, held, queue, now, register_all=False)
            mine = next((q.seq for q in queue if q.token == claim.token), None)
            if not decision.grant:  # our place, if we queued: this store wakes its earliest waiter first
                return Grant(False, retry_after=decision.retry_after, place=mine, queued_until=wrote)
            holders = [h.token for h in held]
            ahead = [q.token for q in queue if q.token != claim.token and (mine is None or q.seq < mine)]
        return Grant(False, retry_after=0.0)  # the name keeps changing under us: the caller tries again


class StatementOps(BatchOps):
    """PostgreSQL lease mode, whether direct or through a pooler (even PgBouncer's statement pooling, where
    every statement is its own transaction and BEGIN is refused): no BEGIN is ever sent. The acquire is
    ``BatchOps``'s; the other writes are single statements or one multi-statement Query each.

    Renewals are one autocommit UPDATE per TTL, ``RETURNING`` the tokens still live. The driver runs every
    ``Stmt`` on its own (autocommit), a ``batch`` one as one Query, and never sends BEGIN.
    """

    own_tx = frozenset({"acquire", "renew", "abandon", "break_lock", "keep"})
    #: off where the queue table has no ``owner`` column (an older table the store's role may not alter)
    handover = True
    #: queue rows carry the ``reply`` channel of their store: ``reply`` is the channel this store LISTENs on
    #: for its own waiters' hand-overs while its listener is up (None otherwise); a try that queues names it,
    #: and the release that hands its waiter the name NOTIFYs there, so no other store reads it. Off where the
    #: queue table has no ``reply`` column (an older table the store's role may not alter)
    replies = True

    def _try(self, claim: Claim, key: str, holders: Sequence[str], ahead: Sequence[str]) -> Stmt:
        """One try as THREE statements in one transaction (the fewest the model allows: the lock alone and
        first, the DELETEs, then the guard in a later statement than the DELETEs): the name's advisory lock;
        both stale-row DELETEs; and one statement of the guarded INSERT, the queue bookkeeping (data-modifying
        CTEs, which see ``ins``'s RETURNING, never each other's writes in the table), the new leader's
        NOTIFY, and the answer's read (the statement's snapshot, plus what ``ins`` and ``iq`` returned)."""
        p = self.p
        t = self.NOW
        live_h, guard, gp = self._guard(claim, key, holders, ahead, t)
        owner = claim.record if claim.value is not None else claim.owner[:OWNER_CHARS]
        ctes = [
            f"ins AS (INSERT INTO {p}_holders (token, name_key, name, owner, mode, fence, expires_at, acquired_at, "
            f"layout) SELECT %s, %s, %s, %s, %s, nextval('{p}_fence_seq'), {t} + %s, {t}, {LAYOUT} WHERE {guard} "
            "RETURNING token, mode, expires_at, fence)",
            f"mine AS (SELECT 1 FROM ins UNION ALL SELECT 1 FROM {p}_holders WHERE token = %s)",
            f"dq AS (DELETE FROM {p}_queue WHERE token = %s AND EXISTS (SELECT 1 FROM mine))",
        ]
        params: list[object] = [claim.token, key, claim.name, owner, claim.mode.value, claim.ttl, *gp]
        params += [claim.token, claim.token]
        if self.handover:
            # A release may have granted us the name (our row, lease end = our queue deadline): CONFIRM it to
            # a full TTL from this try's clock, so the local lease counted from this try's send time cannot
            # outlive it (docs/models/sql_lease_handover.pml, NO_EXTEND is the failure without it). The
            # stale-row DELETE before it is what keeps a try with an older clock from reviving a row a
            # release passed over as expired (NO_STALE_DELETE).
            ctes.append(f"ext AS (UPDATE {p}_holders SET expires_at = {t} + %s WHERE token = %s AND expires_at > {t})")
            params += [claim.ttl, claim.token]
        reads = [
            f"SELECT 0, token, mode, expires_at, fence {live_h}",
            "SELECT 0, token, mode, expires_at, fence FROM ins",
        ]
        rp: list[object] = [key]
        queue_reads, qp = self._queue_read(claim, key, t, (), expired=False)  # the stale ones are gone already
        reads += queue_reads
        rp += qp
        if self.queues(claim):  # refused: join the queue, or refresh our entry's deadline
            # where a release may hand it the name, the entry carries the owner record the promoted row will
            # need (NULL otherwise: a release never promotes an entry without one)
            hands = self.takes_handover(claim)
            cols, marks = ("token, name_key, name, mode, owner", "%s, %s, %s, %s, %s") if hands else (
                "token, name_key, name, mode", "%s, %s, %s, %s")  # fmt: skip
            # the store's reply channel, read as this statement is made (its LISTEN is on before the send);
            # an election candidate's grant must reach every store's observers: it keeps the name's channel
            reply = self.reply if hands and claim.value is None else None
            refresh = "expires_at = EXCLUDED.expires_at"
            if self.replies and hands:
                cols, marks, refresh = cols + ", reply", marks + ", %s", refresh + ", reply = EXCLUDED.reply"
            ctes.append(
                f"iq AS (INSERT INTO {p}_queue ({cols}, expires_at) SELECT {marks}, {t} + {WAITER_TTL} "
                f"WHERE NOT EXISTS (SELECT 1 FROM mine) ON CONFLICT (token) DO UPDATE SET {refresh} "
                "RETURNING token, mode, expires_at, seq)"
            )
            params += [claim.token, key, claim.name, claim.mode.value, *((owner,) if hands else ())]
            params += [reply] if self.replies and hands else []
            reads.append("SELECT 4, token, mode, expires_at, seq FROM iq")  # 4: the deadline this try wrote
        reads.append(f"SELECT 2, NULL, NULL, {t}, 1")
        if claim.value is not None and self.d.notify is not None:  # a new leader: its observers look again
            reads.append(
                f"SELECT 3, NULL, NULL, 0, 0 FROM (SELECT {self._wake('%s, %s')} WHERE EXISTS (SELECT 1 FROM mine)) n"
            )
            rp += [self.channel, key]
        lock = self._lock_name(key)
        return batch([
            ("SELECT pg_advisory_xact_lock(%s, %s)", lock.params),
            (f"WITH h AS (DELETE FROM {p}_holders WHERE name_key = %s AND expires_at <= {t}) "
             f"DELETE FROM {p}_queue WHERE name_key = %s AND expires_at <= {t}", (key, key)),
            (f"WITH {', '.join(ctes)} {' UNION ALL '.join(reads)}", (*params, *rp)),
        ], 2, name_wait=self.wait_for_name())  # fmt: skip

    def release(self, claim: Claim, key: str) -> Generator[Stmt, Result, bool]:
        ok, _ = yield from self.release_to_next(claim, key)
        return ok

    def release_to_next(self, claim: Claim, key: str) -> Generator[Stmt, Result, tuple[bool, HandOver | None]]:
        """The release as the direct hand-over: ONE autocommit statement, without the name's lock
        (``docs/models/sql_lease_handover.pml``, HANDOVER with ONE_STATEMENT_RELEASE). It deletes our row and
        the holder rows expired at its clock (expired queue entries are left to the tries and the sweep: the
        promotion looks at live entries only, and deleting them cost O(waiters) per release), and if

        * our row was still live at its clock (the DELETE finds the latest committed version: a try that took
          the name over once our lease ran out deleted it first, and then nothing is promoted; while our row
          is live no try can be granted, so no holder row can appear that this statement's snapshot misses),
        * its snapshot shows no other live holder (readers), and the DELETE removed every row the snapshot
          saw expired (a renewal that committed while the DELETE waited for its row lock keeps its row, as in
          ``sql_lease_statement.pml``'s RECHECK_COUNT), and
        * the first live queue entry is an exclusive claim that carries its owner record,

        it deletes that entry and inserts a holder row for its waiter from what that DELETE returned (an
        entry its waiter deleted meanwhile is promoted to nothing): fence drawn, lease end = the entry's
        queue deadline, not a TTL (a waiter that died while queued holds no longer than its entry would have
        blocked the queue, F12; ``PROMOTE_TTL`` fails). The NOTIFY names the waiter (``token_digest``),
        its fence and that lease end, the stamp the waiter compares with the deadline its last refused try
        wrote before it holds on the NOTIFY alone. One round trip, as the plain release was (a bigger statement:
        about 0.27 ms against 0.15 ms on an idle connection of the project's VM). True if our row was live."""
        if not self.handover:
            ok = yield from Ops.release(self, claim, key)
            return ok, None
        p, t = self.p, self.NOW
        others = f"FROM {p}_holders WHERE name_key = %s AND token <> %s"  # our own row is ``d``'s
        channel = (
            "CASE WHEN pr.digest IS NULL THEN %s ELSE COALESCE((SELECT reply FROM dq), %s) END"
            if self.replies
            else "%s"
        )
        payload = "%s || COALESCE('|' || pr.digest || '|' || pr.fence || '|' || pr.expires_at::text, '')"
        r = yield Stmt(
            f"WITH d AS (DELETE FROM {p}_holders WHERE token = %s RETURNING expires_at), "
            f"seen AS (SELECT COUNT(*) AS n {others} AND expires_at <= {t}), "
            f"del AS (DELETE {others} AND expires_at <= {t} RETURNING 1), "
            f"hd AS (SELECT token FROM {p}_queue WHERE name_key = %s AND expires_at > {t} ORDER BY seq LIMIT 1), "
            f"dq AS (DELETE FROM {p}_queue WHERE token = (SELECT token FROM hd) AND mode IN (%s, %s) "
            f"AND owner IS NOT NULL AND (SELECT expires_at FROM d) > {t} "
            f"AND NOT EXISTS (SELECT 1 {others} AND expires_at > {t}) "
            "AND (SELECT COUNT(*) FROM del) = (SELECT n FROM seen) "
            f"RETURNING token, name, mode, owner, expires_at{', reply' if self.replies else ''}), "
            f"pr AS (INSERT INTO {p}_holders (token, name_key, name, owner, mode, fence, expires_at, acquired_at, "
            f"layout) SELECT token, %s, name, owner, mode, nextval('{p}_fence_seq'), expires_at, {t}, {LAYOUT} "
            "FROM dq ON CONFLICT (token) DO NOTHING "
            "RETURNING left(encode(sha256(convert_to(token, 'UTF8')), 'hex'), 32) AS digest, fence, expires_at) "
            f"SELECT COALESCE((SELECT expires_at FROM d) > {t}, false), pr.digest, pr.fence, pr.expires_at, "
            # a hand-over goes to the promoted waiter's store alone (its reply channel), a wake-up to every store
            f"{self._wake(f'{channel}, {payload}')} FROM (SELECT 1) one LEFT JOIN pr ON true",
            (
                claim.token,
                key,
                claim.token,
                key,
                claim.token,
                key,
                Mode.EXCLUSIVE.value,
                Mode.WRITE.value,
                key,
                claim.token,
                key,
                *((self.channel,) * (2 if self.replies else 1)),
                key,
            ),
        )
        live, digest_, fence, stamp, _ = r.rows[0]
        handed = None if fence is None else HandOver(str(digest_), to_int(fence), to_float(stamp))
        return bool(live), handed

    def abandon(self, claim: Claim, key: str) -> Generator[Stmt, Result, bool]:
        """One Query: the name's lock first (an acquire of this claim still running on the server finishes
        first, see ``Ops.abandon``), then both deletes in one statement, and
        the NOTIFY if either found something. If the queue entry was gone, a release may have just promoted
        it: that release holds the entry's row lock until it commits, so our DELETE waited for it, but our
        statement's snapshot is older than the row it made; a second statement (a later snapshot) deletes
        that row too. (If our DELETE found the entry, no release can promote it any more: a release promotes only
        from what its own DELETE of the entry returns.)"""
        p = self.p
        both = (
            f"WITH a AS (DELETE FROM {p}_queue WHERE token = %s RETURNING 1), "
            f"b AS (DELETE FROM {p}_holders WHERE token = %s RETURNING 1) "
            "SELECT (SELECT COUNT(*) FROM a), (SELECT COUNT(*) FROM b), (SELECT COUNT(*) FROM "
            f"(SELECT {self._wake('%s, %s')} WHERE EXISTS (SELECT 1 FROM a) OR EXISTS (SELECT 1 FROM b)) n)"
        )
        args = (claim.token, claim.token, self.channel, key)
        lock = self._lock_name(key)
        r = yield Stmt(f"SELECT pg_advisory_xact_lock(%s, %s); {both}", (*lock.params, *args), batch=1)
        queued, held = to_int(r.rows[0][0]), to_int(r.rows[0][1])
        if not queued:
            late = yield Stmt(
                f"WITH b AS (DELETE FROM {p}_holders WHERE token = %s RETURNING 1) SELECT (SELECT COUNT(*) FROM b), "
                f"(SELECT COUNT(*) FROM (SELECT {self._wake('%s, %s')} WHERE EXISTS (SELECT 1 FROM b)) n)",
                (claim.token, self.channel, key),
            )
            held += to_int(late.rows[0][0])
        return bool(queued or held)

    def abandon_settled(self, claims: Sequence[tuple[Claim, str]]) -> Generator[Stmt, Result, dict[str, bool]]:
        """``abandon`` of many settled claims: both deletes for all of them in one statement, which tells
        per token what it found and notifies each name once; then, for the tokens whose queue entry was
        already gone (a release may have promoted it, see ``abandon``), their holdings again in a later
        statement."""
        p = self.p
        tokens = [c.token for c, _ in claims]
        notify = f"SELECT 0, (SELECT COUNT(*) FROM (SELECT {self._wake('%s, name_key')} FROM k) n)::text"
        r = yield Stmt(
            f"WITH a AS (DELETE FROM {p}_queue WHERE token = ANY(%s) RETURNING token, name_key), "
            f"b AS (DELETE FROM {p}_holders WHERE token = ANY(%s) RETURNING token, name_key), "
            "k AS (SELECT DISTINCT name_key FROM (SELECT name_key FROM a UNION ALL SELECT name_key FROM b) x) "
            f"SELECT 1, token FROM a UNION ALL SELECT 2, token FROM b UNION ALL {notify}",
            (tokens, tokens, self.channel),
        )
        queued = {str(t) for kind, t in r.rows if kind == 1}
        found = queued | {str(t) for kind, t in r.rows if kind == 2}
        gone = [t for t in tokens if t not in queued]
        if gone:
            late = yield Stmt(
                f"WITH b AS (DELETE FROM {p}_holders WHERE token = ANY(%s) RETURNING token, name_key), "
                f"k AS (SELECT DISTINCT name_key FROM b) SELECT 2, token FROM b UNION ALL {notify}",
                (gone, self.channel),
            )
            found |= {str(t) for kind, t in late.rows if kind == 2}
        return {t: t in found for t in tokens}

    def renew(self, claims: Sequence[Claim]) -> Generator[Stmt, Result, list[bool]]:
        """One autocommit UPDATE per distinct TTL (normally one), returning the tokens it extended."""
        p = self.p
        by_ttl: dict[float, list[str]] = {}
        for c in claims:
            by_ttl.setdefault(c.ttl, []).append(c.token)
        alive: set[str] = set()
        for ttl, tokens in by_ttl.items():
            marks = ", ".join(["%s"] * len(tokens))
            r = yield Stmt(
                f"UPDATE {p}_holders SET expires_at = {self.NOW} + %s WHERE token IN ({marks}) "
                f"AND expires_at > {self.NOW} RETURNING token",
                (ttl, *tokens),
            )
            alive.update(str(row[0]) for row in r.rows)
        return [c.token in alive for c in claims]

    def keep(self, tokens: Sequence[str]) -> Generator[Stmt, Result, dict[str, float]]:
        """One autocommit UPDATE for all the waiters of a store that only keep their place (the deadline each
        entry has now: a waiter's hand-over stamp, as a refused try's)."""
        marks = ", ".join(["%s"] * len(tokens))
        r = yield Stmt(
            f"UPDATE {self.p}_queue SET expires_at = {self.NOW} + {WAITER_TTL} WHERE token IN ({marks}) "
            f"AND expires_at > {self.NOW} RETURNING token, expires_at",
            tuple(tokens),
        )
        return {str(row[0]): to_float(row[1]) for row in r.rows}

    def break_lock(self, name: str) -> Generator[Stmt, Result, list[str]]:
        """One statement: the deletes and their NOTIFY commit together (a NOTIFY refused at COMMIT undoes the
        deletes too, and running the whole again, muted, finds the same tokens)."""
        key = name_key(name)
        r = yield Stmt(
            f"WITH d AS (DELETE FROM {self.p}_holders WHERE name_key = %s RETURNING token) SELECT token FROM d "
            f"UNION ALL SELECT NULL FROM (SELECT {self._wake('%s, %s')} WHERE EXISTS (SELECT 1 FROM d)) n",
            (key, self.channel, key),
        )
        return [str(row[0]) for row in r.rows if row[0] is not None]

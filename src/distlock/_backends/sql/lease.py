"""The lease-table mode's tables and what both of its protocols share (MySQL/MariaDB and PostgreSQL).

No I/O here: every operation is a script (``stmt.py``). The lease mode has two protocols, one per file,
each model-checked on its own:

* ``lease_tx.py``, ``TxOps`` (MySQL/MariaDB, ``docs/models/sql_lease.pml``): each operation one short
  ``BEGIN ... COMMIT`` on one connection; the acquire decides in Python while it holds the name's lock.
* ``lease_autocommit.py``, ``AutocommitOps`` (PostgreSQL, ``docs/models/sql_lease_statement.pml`` and
  ``sql_lease_handover.pml``): never a BEGIN (it runs even through PgBouncer's statement pooling); each try
  of the acquire is one Query of three statements, one implicit transaction, and a release hands the name
  to the first queued waiter in one statement.

``LeaseOps`` here holds what both protocols run alike: the schema's extras, the upgrade, the seed and the sweep,
the name's lock, the read of the queue a try makes, and the calls that are the same statements on both
(``holds``, ``proclaim``, ``inspect``). Acquire, release, abandon, renew, keep and break are each protocol's
own: the models fix their statements and order, and they differ (a release that hands the name over in one
statement, an abandon that looks again for a promotion; MySQL's bell sent with a try or a release).

Lease-table schema (created on first use, idempotent; ``distlock`` is the ``table_prefix`` option)::

    distlock_fences (name_key CHAR(64) PK, name TEXT, fence BIGINT)   -- 0.1.0's per-name fences: emptied
                                                                        at the upgrade (kept for the session
                                                                        mode's portable layout)
    distlock_holders(token PK, name_key, name, owner, mode, fence, expires_at DOUBLE, acquired_at DOUBLE,
                     layout SMALLINT NOT NULL,  -- no default: a 0.1.0 client's INSERT fails (mixed fleet)
                     asked TEXT NULL,  -- a release request to this holder, "<id>|<reason>" (``ask``): the
                                          renewal reads it back; it goes with the row. Added at open to
                                          tables made before it (``schema.py``)
                     permits, declared, capacity INTEGER NULL)  -- semaphores (below); added at open too
    distlock_queue  (seq auto PK, token UNIQUE, name_key, name, mode, expires_at DOUBLE,    -- waiters
                     owner TEXT NULL,  -- PostgreSQL: the record a release's hand-over copies
                     want, declared, capacity INTEGER NULL)  -- semaphores (below); added at open
    distlock_fence_seq                         -- SEQUENCE: every fence of every name (MySQL without
                                                  sequences: distlock_fence_ids, an AUTO_INCREMENT ticket)

Fences come from one counter whose size does not grow with the names: drawn while the name's lock is
held, so they are strictly increasing per name, across releases, restarts and ``break_lock``. Opening a
store raises the sequence above every fence a 0.1.0 row recorded (``seed``), then deletes those rows.

Semaphores: a holder row's ``permits`` is its holding's weight, a queue row's ``want`` the permits its claim
asks for; and EVERY live row of a semaphore carries its two numbers (``arbiter.Capacity``: ``declared`` by its
first user, ``capacity`` in force). A try copies them from the name's live rows into its own (or, on a free name,
writes its own ``permits`` as both), and ``set_permits`` updates them in all the live rows, both under the name's
lock, so the live rows always agree; and the numbers last exactly as long as the semaphore has a live holder or
waiter, with no record of their own to clean up. NULL in every other row, and in an older client's (one permit).

``name_key`` is the hex SHA-256 of the UTF-8 name: names of any length are indexed without truncation.
Times are seconds since the epoch read from the DATABASE's clock (never the client's), once per
transaction, when the statement that takes the name's lock starts, not once the lock is granted (MySQL/MariaDB:
``NOW(6)`` in that statement, whose start it reads; PostgreSQL: ``now()``, the transaction's start;
``sql_lease_statement.pml``, ONE_CLOCK).

Atomicity: every acquire first takes the name's lock for the length of its transaction, a lock that
leaves no row: PostgreSQL ``pg_advisory_xact_lock(a, b)`` (the two-integer key space, apart from the
session mode's bigint keys; released by COMMIT/ROLLBACK), MySQL/MariaDB ``GET_LOCK`` on the same
connection, released by ``RELEASE_ALL_LOCKS()`` in the batch that commits or rolls back (pool connections
hold no other named lock). So all decisions about one name are serialised by the database; the decision
itself is ``distlock._core.arbiter`` (the same rule as SQLite), made between that lock and the COMMIT.

Renewals do not take that lock; they are serialised with acquires through the holder row itself: a
renewal's ``UPDATE`` holds the row lock until its COMMIT, and an acquire that finds the row expired
deletes it with ``... AND expires_at <= now``, which waits for that lock and re-evaluates the condition on
the committed row. MySQL/MariaDB: if the DELETE removes fewer rows than the acquire saw expired, a renewal
got there first: the acquire decides nothing and tries again (zero extra round trips; ``sql_lease.pml``,
FIX_RECHECK, checks that this, with the holder's own lease clock, keeps one live holder and tells the old
holder first). PostgreSQL: the mutex of the try's INSERT, a statement after the DELETE, sees the renewed row
live and inserts nothing (``sql_lease_statement.pml``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Sequence

from ..._core.arbiter import Capacity, lease_infos, looks_ahead, should_queue
from ..._core.timing import WAITER_TTL, bound, monotonic
from ..._core.types import Claim, LockInfo, Mode
from .dialects import WEIGHT_COLUMNS, Dialect
from .names import HandOver, name_filter, name_key
from .stmt import Result, Stmt, to_float, to_int

#: what a try near its caller's deadline keeps for its answer's way back (a WAN's round trip, a loaded client)
#: beside its wait on the server for the name's lock
ANSWER_TIME = 0.25

#: holder rows of this layout; 0.1.0's have none (``upgrade`` gives them 1)
LAYOUT = 2
#: the owner column's size on MySQL/MariaDB (``VARCHAR(255)``): an election's owner id and value must fit
OWNER_CHARS = 255
#: ``sweep`` removes holder and queue rows that expired this long ago (crashed processes)
SWEEP_GRACE = 60.0
#: ``sweep`` removes at most this many 0.1.0 fence rows per call
SWEEP_BATCH = 5000

#: what a release answers: whether the holding was still live, and the hand-over it made, if any
Released = tuple[bool, HandOver | None]

#: the semaphore columns of a read where the table has none (``LeaseOps.weights`` off)
NO_WEIGHTS = ", NULL, NULL, NULL"


def numbers(rows: Sequence[Sequence[object]], now: float) -> Capacity | None:
    """A semaphore's numbers, from the rows of a try's read (``kind, token, mode, expires_at, seq`` then the
    semaphore columns, ``LeaseOps.weights_of``): those of any live holder or queue row that has them."""
    for row in rows:
        if to_int(row[0]) in (0, 1, 4) and row[7] is not None and to_float(row[3]) > now:
            return Capacity(to_int(row[6]), to_int(row[7]))
    return None


def semaphore_numbers(claim: Claim, found: Capacity | None) -> tuple[int | None, int | None, int | None]:
    """What a claim's new row carries in its semaphore columns: its weight and the numbers it copies (found
    on the name's live rows, else its own declaration); NULLs for every other mode."""
    if claim.mode is not Mode.SEMAPHORE:
        return None, None, None
    if found is None:
        return claim.want, claim.permits, claim.permits
    return claim.want, found.declared, found.capacity


class LeaseOps:
    """The statements of the lease-table mode that both protocols run alike, over one dialect and one table
    prefix. A session-mode store uses it as it is (schema, upgrade, sweep); a lease-mode store runs one of
    its two protocols, ``TxOps`` or ``AutocommitOps``, which add the acquire, release, abandon, renewals."""

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
        has left of its caller's deadline (``timing.Budget``) beyond ``ANSWER_TIME`` where that is less: a wait
        past it would turn a busy name into a call cut off at the deadline."""
        left = bound(None)
        return self.name_wait if left is None else min(self.name_wait, max(0.0, left - ANSWER_TIME) / 2)

    #: the operations whose script runs without the driver's BEGIN/COMMIT (it is one batch that makes its
    #: own transaction, or statements that each stand alone)
    own_tx: frozenset[str] = frozenset()
    #: a release grants the name to the first queued exclusive claim (``AutocommitOps.release``)
    handover = False
    #: the queue rows carry their store's reply channel (``AutocommitOps``)
    replies = False
    reply: str | None = None
    #: the holders table has the ``asked`` column (release requests); False where the store's role could not
    #: add it to an older table (``schema.py``)
    asks = True
    #: the tables have the semaphore columns (``dialects.WEIGHT_COLUMNS``); False where the store's role could not
    #: add them to older tables (``schema.py``): then this store refuses semaphores
    weights = True
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
        """Whether a release may grant ``claim`` the name (``AutocommitOps.release``): an exclusive
        kind, where the store hands over, and a TTL no shorter than the queue deadline. The promoted row lasts
        until that deadline, so a waiter that died while queued then blocks the name no longer than a holder
        that died would (a claim with a shorter TTL is only woken, and takes the name with its own try)."""
        return self.handover and not claim.mode.shared and claim.ttl >= WAITER_TTL

    def queues(self, claim: Claim) -> bool:
        """Whether a refused try of ``claim`` joins (or refreshes) its queue entry: where the rule needs it
        (``should_queue``), and where a release may hand it the name."""
        return should_queue(claim.mode, claim.fair, claim.want) or self.takes_handover(claim)

    def weights_of(self, table: str, alias: str = "") -> str:
        """The semaphore columns a read of ``table``'s rows (``"holders"`` or ``"queue"``) appends to its own."""
        if not self.weights:
            return NO_WEIGHTS
        a = f"{alias}." if alias else ""
        return "".join(f", {a}{c}" for c in WEIGHT_COLUMNS[table])

    def resize(self, table: str) -> str:
        """``set_permits``: the UPDATE of ``table`` (holders or queue) that gives a semaphore's live rows a new
        capacity in force, to run under the name's lock (arguments: the capacity twice, the name key); an older
        client's rows, which have no numbers, get it as their declared one too."""
        return (
            f"UPDATE {self.p}_{table} SET capacity = %s, declared = COALESCE(declared, %s) "
            f"WHERE name_key = %s AND mode = '{Mode.SEMAPHORE.value}' AND expires_at > {self.d.now}"
        )

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

    def _queue_read(
        self, claim: Claim, key: str, t: str, tp: tuple[object, ...], expired: bool
    ) -> tuple[list[str], list[object]]:
        """The queue rows of a try's read (``kind, token, mode, expires_at, seq`` with kind 1, then the semaphore
        columns, ``weights_of``), as SELECTs to join with UNION ALL, and their arguments; ``t``: the try's clock (SQL, with arguments ``tp``);
        ``expired``: also the expired rows the try is to delete (the whole queue's, or the claim's own).

        Only what the rule looks at (``looks_ahead``) where that is a number: the
        first k live entries ahead of the claim's, and its own. Reading the whole queue made every try cost
        O(waiters) on the wire and in the client. A guard built on such a read stays exact: the rule grants
        on it only when it shows fewer than k ahead, which is then all of them."""
        p = self.p
        live = "" if expired else f" AND expires_at > {t}"
        k = looks_ahead(claim.mode, claim.fair, claim.permits)
        w = self.weights_of("queue")
        own = f"SELECT 1, token, mode, expires_at, seq{w} FROM {p}_queue WHERE token = %s{live}"
        if k == 0:  # the rule looks at no entry ahead (a claim that is not fair): its own entry only
            return [own], [claim.token, *(() if expired else tp)]
        if k is None:
            return [f"SELECT 1, token, mode, expires_at, seq{w} FROM {p}_queue WHERE name_key = %s{live}"], [
                key,
                *(() if expired else tp),
            ]
        ahead = (
            f"(SELECT 1, q.token, q.mode, q.expires_at, q.seq{self.weights_of('queue', 'q')} FROM {p}_queue q "
            "WHERE q.name_key = %s AND "
            f"q.expires_at > {t} AND q.token <> %s AND q.seq < COALESCE((SELECT m.seq FROM {p}_queue m "
            f"WHERE m.token = %s), 9223372036854775807) ORDER BY q.seq LIMIT {int(k)})"
        )
        return [ahead, own], [key, *tp, claim.token, claim.token, claim.token, *(() if expired else tp)]

    def ask(self, name: str, request: str) -> Generator[Stmt, Result, bool]:
        """A release request ("<id>|<reason>") into the row of every live holder of ``name``; whether there
        was one. Nothing is written for a free name; the request goes with the row (release, expiry)."""
        r = yield Stmt(
            f"UPDATE {self.p}_holders SET asked = %s WHERE name_key = %s AND expires_at > {self.d.now}",
            (request, name_key(name)),
        )
        return r.rowcount > 0

    def _asked_column(self) -> str:
        """What a renewal reads back beside each live token: the release request made to it (a table this
        store could not give the column reads NULL)."""
        return "asked" if self.asks else "NULL"

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
        weights = self.weights_of("holders")
        r = yield Stmt(
            f"SELECT name, owner, mode, fence, expires_at{weights} FROM {p}_holders WHERE {where} "
            "AND expires_at > %s ORDER BY name, fence",
            (*args, now),
        )
        wanted = "SUM(COALESCE(want, 1))" if self.weights else "COUNT(*)"
        w = yield Stmt(
            f"SELECT name_key, COUNT(*), {wanted} FROM {p}_queue WHERE {where} AND expires_at > %s GROUP BY name_key",
            (*args, now),
        )
        waiting = {str(k): (to_int(c), to_int(n)) for k, c, n in w.rows}
        sizes = {str(row[0]): to_int(row[7]) for row in r.rows if row[7] is not None}
        rows = (
            (str(n), str(o), str(m), to_int(f), to_float(e), None if x is None else to_int(x))
            for n, o, m, f, e, x, _, _ in r.rows
        )
        return lease_infos(rows, lambda n: waiting.get(name_key(n), (0, 0)), now, sizes.get)

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

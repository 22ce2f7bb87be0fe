"""The autocommit protocol of the lease-table mode: PostgreSQL, direct or through any pooler.

No I/O. No BEGIN is ever sent (PgBouncer's statement pooling refuses it): every write is one statement, or
one simple-protocol Query of several statements that runs as ONE implicit transaction. The acquire is the
protocol of ``docs/models/sql_lease_statement.pml`` (``-DONE_CLOCK -DBLIND``), the release's direct
hand-over that of ``docs/models/sql_lease_handover.pml`` (HANDOVER with ONE_STATEMENT_RELEASE, TRUST, STAMP,
KEEP; its statement is in ``lease_handover.py``). Renewals are one autocommit UPDATE per TTL, ``RETURNING``
the tokens still live.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

from ..._core.arbiter import Capacity, Held, Queued, decide, looks_ahead
from ..._core.timing import WAITER_TTL
from ..._core.types import Claim, Grant, Mode
from .lease import LAYOUT, NO_WEIGHTS, OWNER_CHARS, LeaseOps, Released, numbers
from .lease_handover import release_stmt, released
from .names import name_key
from .stmt import Result, Stmt, batch, to_float, to_int


def try_guard(
    p: str, claim: Claim, key: str, holders: Sequence[str], ahead: Sequence[str], t: str
) -> tuple[str, str, list[object]]:
    """The guard of a try's INSERT: the name's live holders are exactly ``holders``, and the live queue
    entries ahead of the claim exactly ``ahead``; returns the FROM/WHERE of the live holders (for the
    answer's read), the condition and its arguments. ``t``: the try's one clock reading; ``p`` the table prefix."""
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


class AutocommitOps(LeaseOps):
    """PostgreSQL lease mode, whether direct or through a pooler (even PgBouncer's statement pooling, where
    every statement is its own transaction and BEGIN is refused): no BEGIN is ever sent. The driver runs
    every ``Stmt`` on its own (autocommit), a ``batch`` one as one Query.

    The acquire takes ONE round trip when the name is free: the protocol of
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
    own_tx = frozenset({"acquire", "renew", "abandon", "break_lock", "keep", "set_permits"})
    #: off where the queue table has no ``owner`` column (an older table the store's role may not alter)
    handover = True
    #: queue rows carry the ``reply`` channel of their store: ``reply`` is the channel this store LISTENs on
    #: for its own waiters' hand-overs while its listener is up (None otherwise); a try that queues names it,
    #: and the release that hands its waiter the name NOTIFYs there, so no other store reads it. Off where the
    #: queue table has no ``reply`` column (an older table the store's role may not alter)
    replies = True

    def acquire(self, claim: Claim, key: str) -> Generator[Stmt, Result, Grant]:
        holders: Sequence[str] = ()
        ahead: Sequence[str] = ()
        expect: Capacity | None = None  # a semaphore's numbers the second try expects (the first: a free name)
        for _ in range(2):
            r = yield self._try(claim, key, holders, ahead, expect)
            held: list[Held] = []
            queue: list[Queued] = []
            now, got = 0.0, 0
            wrote: float | None = None
            for kind, token, mode, expires, extra, weight, *_ in r.rows:
                if kind == 2:
                    now, got = to_float(expires), to_int(extra)
                elif kind == 0:
                    if str(token) == claim.token:  # granted now, or already (a retry after a lost reply)
                        return Grant(True, fence=to_int(extra))
                    held.append(Held(str(token), Mode(str(mode)), to_float(expires), to_int(weight or 1)))
                elif kind in (1, 4):  # 4: our entry as this try wrote it (a hand-over echoes its deadline)
                    queue.append(Queued(str(token), Mode(str(mode)), to_int(extra), to_float(expires), to_int(weight or 1)))
                    if kind == 4:
                        wrote = to_float(expires)
            if not got:  # the name's lock not granted within name_wait (a stuck transaction): busy
                return Grant(False, retry_after=0.05)
            queue.sort(key=lambda q: q.seq)
            expect = numbers(r.rows, now) if claim.mode is Mode.SEMAPHORE else None
            decision = decide(claim, held, queue, now, register_all=False, stored=expect)
            mine = next((q.seq for q in queue if q.token == claim.token), None)
            if not decision.grant:  # our place, if we queued: this store wakes its earliest waiter first
                return Grant(False, retry_after=decision.retry_after, place=mine, queued_until=wrote)
            holders = [h.token for h in held]
            ahead = [q.token for q in queue if q.token != claim.token and (mine is None or q.seq < mine)]
        return Grant(False, retry_after=0.0)  # the name keeps changing under us: the caller tries again

    def _semaphore_parts(
        self, claim: Claim, key: str, expect: Capacity | None
    ) -> tuple[list[str], list[object], str, list[object], str, list[object]]:
        """A semaphore try's additions to ``_try``: the ``nums`` CTE (the numbers of the name's live rows) and its
        arguments; the guard that they are still what the try expects (``expect``; None: a free name, which
        a claim that declared no capacity cannot take) and its arguments; the columns and values a new row
        adds (its weight, then the numbers it copies: those of the live rows, else its own declaration)."""
        if claim.mode is not Mode.SEMAPHORE:
            return [], [], "", [], "", []
        p, t = self.p, self.NOW
        live = f"name_key = %s AND expires_at > {t} AND capacity IS NOT NULL"
        nums = [
            f"nums AS (SELECT declared, capacity FROM {p}_holders WHERE {live} UNION ALL "
            f"SELECT declared, capacity FROM {p}_queue WHERE {live} LIMIT 1)"
        ]
        if expect is None:
            guard = " AND NOT EXISTS (SELECT 1 FROM nums)" + ("" if claim.permits is not None else " AND false")
            gp: list[object] = []
        else:
            guard = " AND (SELECT declared FROM nums) = %s AND (SELECT capacity FROM nums) = %s"
            gp = [expect.declared, expect.capacity]
        values = ", %s, COALESCE((SELECT declared FROM nums), %s), COALESCE((SELECT capacity FROM nums), %s)"
        return nums, [key, key], guard, gp, values, [claim.want, claim.permits, claim.permits]

    def _try(
        self, claim: Claim, key: str, holders: Sequence[str], ahead: Sequence[str], expect: Capacity | None = None
    ) -> Stmt:
        """One try, one ``batch`` answered by a read of the name (rows of kind 0: holders with their fences,
        1: queue entries with their seq, 2: the clock and whether the name's lock was granted), as THREE
        statements in one transaction (the fewest the model allows: the lock alone and first, the DELETEs,
        then the mutex in a later statement than the DELETEs): the name's advisory lock;
        both stale-row DELETEs; and one statement of the guarded INSERT, the queue bookkeeping (data-modifying
        CTEs, which see ``ins``'s RETURNING, never each other's writes in the table), the new leader's
        NOTIFY, and the answer's read (the statement's snapshot, plus what ``ins`` and ``iq`` returned)."""
        p = self.p
        t = self.NOW
        live_h, guard, gp = try_guard(p, claim, key, holders, ahead, t)
        owner = claim.record if claim.value is not None else claim.owner[:OWNER_CHARS]
        nums, np_, sem_guard, sgp, sem_values, svp = self._semaphore_parts(claim, key, expect)
        weighs = ", permits, declared, capacity" if sem_values else ""
        ctes = [
            *nums,
            f"ins AS (INSERT INTO {p}_holders (token, name_key, name, owner, mode, fence, expires_at, acquired_at, "
            f"layout{weighs}) SELECT %s, %s, %s, %s, %s, nextval('{p}_fence_seq'), {t} + %s, {t}, {LAYOUT}{sem_values} "
            f"WHERE {guard}{sem_guard} RETURNING token, mode, expires_at, fence)",
            f"mine AS (SELECT 1 FROM ins UNION ALL SELECT 1 FROM {p}_holders WHERE token = %s)",
            f"dq AS (DELETE FROM {p}_queue WHERE token = %s AND EXISTS (SELECT 1 FROM mine))",
        ]
        params: list[object] = [*np_, claim.token, key, claim.name, owner, claim.mode.value, claim.ttl, *svp, *gp]
        params += [*sgp, claim.token, claim.token]
        if self.handover:
            # A release may have granted us the name (our row, lease end = our queue deadline): CONFIRM it to
            # a full TTL from this try's clock, so the local lease counted from this try's send time cannot
            # outlive it (docs/models/sql_lease_handover.pml, NO_EXTEND is the failure without it). The
            # stale-row DELETE before it is what keeps a try with an older clock from reviving a row a
            # release passed over as expired (NO_STALE_DELETE).
            ctes.append(f"ext AS (UPDATE {p}_holders SET expires_at = {t} + %s WHERE token = %s AND expires_at > {t})")
            params += [claim.ttl, claim.token]
        reads = [
            f"SELECT 0, token, mode, expires_at, fence{self.weights_of('holders')} {live_h}",
            f"SELECT 0, token, mode, expires_at, fence{NO_WEIGHTS} FROM ins",
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
            wants = ", want, declared, capacity" if sem_values else ""
            ctes.append(
                f"iq AS (INSERT INTO {p}_queue ({cols}, expires_at{wants}) SELECT {marks}, {t} + {WAITER_TTL}"
                f"{sem_values} WHERE NOT EXISTS (SELECT 1 FROM mine) ON CONFLICT (token) DO UPDATE SET {refresh} "
                "RETURNING token, mode, expires_at, seq)"
            )
            params += [claim.token, key, claim.name, claim.mode.value, *((owner,) if hands else ())]
            params += [reply] if self.replies and hands else []
            params += svp
            reads.append(f"SELECT 4, token, mode, expires_at, seq{NO_WEIGHTS} FROM iq")  # 4: the deadline this try wrote
        reads.append(f"SELECT 2, NULL, NULL, {t}, 1{NO_WEIGHTS}")
        if claim.value is not None and self.d.notify is not None:  # a new leader: its observers look again
            reads.append(
                f"SELECT 3, NULL, NULL, 0, 0{NO_WEIGHTS} FROM (SELECT {self._wake('%s, %s')} "
                "WHERE EXISTS (SELECT 1 FROM mine)) n"
            )
            rp += [self.channel, key]
        lock = self._lock_name(key)
        return batch([
            ("SELECT pg_advisory_xact_lock(%s, %s)", lock.params),
            (f"WITH h AS (DELETE FROM {p}_holders WHERE name_key = %s AND expires_at <= {t}) "
             f"DELETE FROM {p}_queue WHERE name_key = %s AND expires_at <= {t}", (key, key)),
            (f"WITH {', '.join(ctes)} {' UNION ALL '.join(reads)}", (*params, *rp)),
        ], 2, name_wait=self.wait_for_name())  # fmt: skip

    def release(self, claim: Claim, key: str) -> Generator[Stmt, Result, Released]:
        """The release as the direct hand-over (``lease_handover.py``): ONE autocommit statement, without the
        name's lock, that deletes our row and grants the name to the first queued exclusive claim where the
        protocol allows. True if our row was live."""
        if not self.handover:  # a queue table without the owner column: the release only wakes the waiters
            r = yield Stmt(
                f"WITH d AS (DELETE FROM {self.p}_holders WHERE token = %s RETURNING expires_at) "
                f"SELECT (SELECT expires_at FROM d) > {self.d.now}, {self._wake('%s, %s')}",
                (claim.token, self.channel, key),
            )
            return bool(r.rows and r.rows[0][0]), None
        r = yield release_stmt(self, claim, key, self.NOW)
        return released(r.rows[0])

    def abandon(self, claim: Claim, key: str) -> Generator[Stmt, Result, bool]:
        """One Query: the name's lock first (an acquire of this claim still running on the server finishes
        first, see ``TxOps.abandon``), then both deletes in one statement, and
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

    def renew(self, claims: Sequence[Claim]) -> Generator[Stmt, Result, list[tuple[bool, str | None]]]:
        """One autocommit UPDATE per distinct TTL (normally one), returning the tokens it extended and the
        release request made to each (``ask``)."""
        p = self.p
        by_ttl: dict[float, list[str]] = {}
        for c in claims:
            by_ttl.setdefault(c.ttl, []).append(c.token)
        alive: dict[str, str | None] = {}
        for ttl, tokens in by_ttl.items():
            marks = ", ".join(["%s"] * len(tokens))
            r = yield Stmt(
                f"UPDATE {p}_holders SET expires_at = {self.NOW} + %s WHERE token IN ({marks}) "
                f"AND expires_at > {self.NOW} RETURNING token, {self._asked_column()}",
                (ttl, *tokens),
            )
            alive.update((str(row[0]), None if row[1] is None else str(row[1])) for row in r.rows)
        return [(c.token in alive, alive.get(c.token)) for c in claims]

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

    def set_permits(self, name: str, permits: int) -> Generator[Stmt, Result, bool | None]:
        """A semaphore's capacity in force, in every live row of it (``LeaseOps.resize``), and the NOTIFY that
        wakes its waiters: one Query, the name's lock first; whether it is in use."""
        key = name_key(name)
        lock = self._lock_name(key)
        r = yield Stmt(
            f"SELECT pg_advisory_xact_lock(%s, %s); WITH h AS ({self.resize('holders')} RETURNING 1), "
            f"q AS ({self.resize('queue')} RETURNING 1), n AS (SELECT (SELECT COUNT(*) FROM h) + "
            "(SELECT COUNT(*) FROM q) AS n) "
            f"SELECT (SELECT n FROM n), (SELECT COUNT(*) FROM (SELECT {self._wake('%s, %s')} FROM n WHERE n.n > 0) w)",
            (*lock.params, permits, permits, key, permits, permits, key, self.channel, key),
            batch=1,
        )
        return to_int(r.rows[0][0]) > 0

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

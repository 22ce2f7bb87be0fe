"""The transactional protocol of the lease-table mode: MySQL/MariaDB (``docs/models/sql_lease.pml``).

No I/O. Each operation is one short ``BEGIN ... COMMIT`` on one pooled connection (the driver adds BEGIN to
the first round trip and the COMMIT to the last, ``Stmt.last``); the acquire takes the name's ``GET_LOCK``
first, reads, decides in Python (``arbiter.decide``) and writes before the COMMIT lets go of that lock. The
waiters' bell (a companion ``GET_LOCK``) is the backend's (``_backends/mysql/_async/lease_mode.py``); the
statements it sends with a try or a release are here (``acquire_after_bell``, ``release_ringing``).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from dataclasses import replace

from ..._core.arbiter import Capacity, Held, Queued, decide
from ..._core.timing import WAITER_TTL
from ..._core.types import Claim, Grant, Mode
from . import lease_bell
from .lease import LAYOUT, NO_WEIGHTS, OWNER_CHARS, LeaseOps, Released, numbers, semaphore_numbers
from .names import name_key
from .stmt import Result, Stmt, chain, to_float, to_int


class TxOps(LeaseOps):
    """The lease mode's operations on MySQL/MariaDB, each a script for one transaction."""

    def _holder_columns(self, claim: Claim, key: str, extra: str = "") -> tuple[str, tuple[object, ...]]:
        """The start of a holding's INSERT, and its first values (token, name key, name, owner, mode)."""
        cols = (
            f"INSERT INTO {self.p}_holders (token, name_key, name, owner, mode, fence, expires_at, acquired_at, "
            f"layout{extra}) "
        )
        # an election's record must fit whole (the backend checks); a plain owner id is only informational
        owner = claim.record if claim.value is not None else claim.owner[:OWNER_CHARS]
        return cols, (claim.token, key, claim.name, owner, claim.mode.value)

    def _insert_holder(self, claim: Claim, key: str, now: float, found: Capacity | None = None) -> Stmt:
        """Insert the holding with a fence from the store's one counter; the statement returns the fence. A
        semaphore's row also carries its weight and the semaphore's numbers (``found``: those of its live rows)."""
        p = self.p
        sem = claim.mode is Mode.SEMAPHORE
        extra, marks = (", permits, declared, capacity", ", %s, %s, %s") if sem else ("", "")
        cols, first = self._holder_columns(claim, key, extra)
        nums = semaphore_numbers(claim, found) if sem else ()
        args = (*first, now + claim.ttl, now, *nums)
        if self.sequences:
            fence = f"NEXTVAL({p}_fence_seq)"
        else:  # MySQL without sequences: an AUTO_INCREMENT ticket, its row deleted at once (one statement batch)
            return Stmt(
                f"INSERT INTO {p}_fence_ids () VALUES (); DELETE FROM {p}_fence_ids WHERE id = LAST_INSERT_ID(); "
                f"{cols}VALUES (%s, %s, %s, %s, %s, LAST_INSERT_ID(), %s, %s, {LAYOUT}{marks}); SELECT LAST_INSERT_ID()",
                args,
            )
        return Stmt(f"{cols}VALUES (%s, %s, %s, %s, %s, {fence}, %s, %s, {LAYOUT}{marks}) RETURNING fence", args)

    def _join(self, claim: Claim, key: str, expires_at: float, found: Capacity | None) -> Stmt:
        """Join the queue, or refresh the deadline of our entry; a semaphore's entry also carries its want and
        the semaphore's numbers (as ``_insert_holder``'s row)."""
        args = (claim.token, key, claim.name, claim.mode.value, expires_at)
        if claim.mode is not Mode.SEMAPHORE:
            return Stmt(self.d.enqueue, args)
        return Stmt(
            f"INSERT INTO {self.p}_queue (token, name_key, name, mode, expires_at, want, declared, capacity) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)",
            (*args, *semaphore_numbers(claim, found)),
        )

    def acquire(self, claim: Claim, key: str) -> Generator[Stmt, Result, Grant]:
        """One try: the name's lock, one read of
        its holders and of the queue entries the rule looks at, the decision in Python, then its writes.
        Two round trips when it grants or queues: the lock goes with the read (its answer and clock carried
        in session variables, ``Dialect.lock_into``), and the writes with the COMMIT (``Stmt.last``). Sent
        one by one, the five statements of an uncontended try cost a quarter more."""
        grant = yield from self._acquire(claim, key, after_bell=False)
        assert grant is not None  # None only after a bell
        return grant

    def acquire_after_bell(self, claim: Claim, key: str, keep_bell: bool) -> Generator[Stmt, Result, Grant | None]:
        """MySQL: ``acquire`` sent right behind a waiter's bell wait, its first round trip the bell's
        (``mysql/lease_mode.py``); None when the bell did not ring (nobody rings it: the waiter polls instead; or
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
        # a grant that keeps the bell: its COMMIT lets go of the name's lock only (a name lock is the
        # validated prefix and hex: safe as a literal)
        name_lock = str(lock.params[0])
        assert re.fullmatch(r"[A-Za-z0-9_:]+", name_lock), name_lock
        fast = after_bell and keep_bell and self.grants_on_server(claim, key)
        read = Stmt(
            f"SELECT 2, @distlock_locked, {'@distlock_bell_at' if after_bell else 'NULL'}, @distlock_now, 0"
            f"{NO_WEIGHTS} UNION ALL "
            f"SELECT 0, token, mode, expires_at, 0{self.weights_of('holders')} FROM {p}_holders WHERE name_key = %s "
            "UNION ALL " + " UNION ALL ".join(queue_reads),
            (key, *qp),
        )
        free: object = None  # the server's grant (``lease_bell.server_grant``): 1 if it granted, and the fence
        fence: object = None
        if fast:
            grant_sql, gp = lease_bell.server_grant(self, claim, key, name_lock)
            r = yield Stmt(
                f"{lock_into}; {grant_sql}; SELECT @distlock_locked, @distlock_bell_at, @distlock_now, "
                f"@distlock_free, IF(@distlock_free, LASTVAL({p}_fence_seq), NULL)",
                (*lock.params, *gp),
                commits=True,
            )
            locked, bell_at, clock, free, fence = r.rows[0]
            if locked is not None and to_int(locked) == 1 and to_int(free) != 1:
                # refused on the server, the name's lock still held: the try goes on as any does, from its read
                r = yield read
        else:
            r = yield replace(read, sql=f"{lock_into}; {read.sql}", params=(*lock.params, *read.params))
            # kind 2: the lock's answer and the clock; 0: a holder; 1: a queue entry (UNION ALL keeps no order)
            _, locked, bell_at, clock, *_ = next(row for row in r.rows if to_int(row[0]) == 2)
        if locked is None and after_bell:
            return None  # after a bell wait that did not ring: not tried
        if locked is None or to_int(locked) != 1:  # not granted within name_wait (a stuck transaction)
            return Grant(False, retry_after=0.05)
        now = to_float(clock)
        # after a bell: the lease counts from this clock, which the server read this long after the bell wait
        # began, no earlier than the request was sent (``valid_for`` counts from that send)
        valid_for = claim.ttl + max(0.0, now - to_float(bell_at)) if after_bell else None
        if free is not None and to_int(free) == 1:
            return Grant(True, fence=to_int(fence), valid_for=valid_for)
        holders: list[Held] = []
        queue: list[Queued] = []
        stale_holders = stale_waiters = 0
        for kind, token, mode, expires, seq, weight, *_ in r.rows:
            if kind == 2:
                continue
            if to_float(expires) <= now:
                if kind == 0:
                    stale_holders += 1
                else:
                    stale_waiters += 1
            elif kind == 0:
                holders.append(Held(str(token), Mode(str(mode)), to_float(expires), to_int(weight or 1)))
            else:
                queue.append(Queued(str(token), Mode(str(mode)), to_int(seq), to_float(expires), to_int(weight or 1)))
        queue.sort(key=lambda q: q.seq)
        found = numbers(r.rows, now) if claim.mode is Mode.SEMAPHORE else None
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
        decision = decide(claim, holders, queue, now, register_all=False, stored=found)
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
            insert = self._insert_holder(claim, key, now, found)
            r = yield replace(chain(*before, insert, *after, last=True), commit=commit)
            return Grant(True, fence=to_int(r.rows[0][0]), valid_for=valid_for)
        place = None
        if decision.enqueue:
            # our place, which this store's wake-ups go by (``Wakers.place``): read once, when we join
            join = self._join(claim, key, now + WAITER_TTL, found)
            r = yield chain(
                *before, join, Stmt(f"SELECT seq FROM {p}_queue WHERE token = %s", (claim.token,)), last=True
            )
            place = to_int(r.rows[0][0]) if r.rows else None
        elif before or fast:
            # after the server's refusal (``lease_bell.server_grant``) the name's lock and the bell are still held, and
            # only the driver's end of a statement lets go of them
            yield chain(*before, Stmt("DO 0"), last=True)
        return Grant(False, retry_after=decision.retry_after, place=place)

    def grants_on_server(self, claim: Claim, key: str) -> bool:
        """Whether a try behind a bell wait may be granted by the server in that round trip (``lease_bell.py``)."""
        return lease_bell.grants_on_server(self, claim, key)

    def end_bell_wait(self, conn_id: int, key: str, bell: str) -> Stmt:
        """The KILL of a bell wait's connection whose call did not come back (``lease_bell.py``)."""
        return lease_bell.end_bell_wait(self, conn_id, key, bell)

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

    def release(self, claim: Claim, key: str) -> Generator[Stmt, Result, Released]:
        """Compare-and-delete by token, in autocommit (no transaction needed: one row, by its key): delete it
        if live; only if that found nothing, delete an expired remnant. Whether it was still a live lease; a
        release here never hands the name over (the bell wakes the next waiter, whose try takes it)."""
        p = self.p
        r = yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s AND expires_at > {self.d.now}", (claim.token,))
        if r.rowcount == 1:
            return True, None
        yield Stmt(f"DELETE FROM {p}_holders WHERE token = %s", (claim.token,))
        return False, None

    def release_ringing(self, claim: Claim, companion: str) -> Generator[Stmt, Result, bool]:
        """MySQL: ``release``, and the waiters' bell (the ``GET_LOCK`` companion ``companion``) let go in
        the same round trip, on the connection that holds that bell (``mysql/lease_mode.py``): whether our row was
        live, then the delete, then the let-go (after the delete: a waiter the bell wakes finds the row gone)."""
        p = self.p
        r = yield Stmt(
            f"SET @distlock_live = (SELECT expires_at > {self.d.now} FROM {p}_holders WHERE token = %s); "
            f"DELETE FROM {p}_holders WHERE token = %s; SELECT COALESCE(@distlock_live, 0), RELEASE_LOCK(%s)",
            (claim.token, claim.token, companion),
        )
        return bool(to_int(r.rows[0][0]))

    def renew(self, claims: Sequence[Claim]) -> Generator[Stmt, Result, list[tuple[bool, str | None]]]:
        """Extend every live lease in ``claims``: one UPDATE per distinct TTL (normally one), one SELECT, which
        also reads back the release request made to each (``ask``)."""
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
            f"SELECT token, {self._asked_column()} FROM {p}_holders WHERE token IN ({marks}) AND expires_at > %s",
            (*tokens, now),
            last=True,
        )
        alive = {str(row[0]): None if row[1] is None else str(row[1]) for row in r.rows}
        return [(c.token in alive, alive.get(c.token)) for c in claims]

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

    def set_permits(self, name: str, permits: int) -> Generator[Stmt, Result, bool | None]:
        """A semaphore's capacity in force, in every live row of it, under the name's lock (``LeaseOps.resize``);
        whether it is in use (None: the name's lock was busy, nothing written)."""
        p, key = self.p, name_key(name)
        r = yield self._lock_name(key)
        if r.rows[0][0] is None or to_int(r.rows[0][0]) != 1:
            return None
        for table in ("holders", "queue"):
            yield Stmt(self.resize(table), (permits, permits, key))
        live = f"name_key = %s AND mode = '{Mode.SEMAPHORE.value}' AND expires_at > {self.d.now}"
        r = yield Stmt(
            f"SELECT EXISTS (SELECT 1 FROM {p}_holders WHERE {live}) OR EXISTS (SELECT 1 FROM {p}_queue WHERE {live})",
            (key, key),
            last=True,
        )
        return bool(to_int(r.rows[0][0]))

    def break_lock(self, name: str) -> Generator[Stmt, Result, list[str]]:
        p = self.p
        key = name_key(name)
        r = yield Stmt(f"SELECT token FROM {p}_holders WHERE name_key = %s FOR UPDATE", (key,))
        tokens = [str(row[0]) for row in r.rows]
        if tokens:
            yield Stmt(f"DELETE FROM {p}_holders WHERE name_key = %s", (key,))
            yield from self._notify(key)
        return tokens

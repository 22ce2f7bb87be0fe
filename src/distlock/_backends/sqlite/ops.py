"""The operations of a store, each one short transaction (``db.Db.tx``) or one read: acquire (grant, queue,
reclaim), keep a quiet waiter's place, release, renew, shorten, proclaim, abandon, inspect / list, break.
Each writes what the grant rule (``_core/arbiter.py``) decides and wakes the name's waiters after a change
(``process.Process.wake``).

They run under the store's guard (``Db.inline`` / ``Db.locked``), in a worker thread on the async side. No
async code: both sides import it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from ..._core import arbiter
from ..._core.timing import WAITER_TTL
from ..._core.types import Claim, Grant, LockInfo, Mode
from . import queries as sql
from .db import Db
from .process import Process
from .reclaim import LOCAL, reclaim
from .wake import WakeDir


class Place(Protocol):
    """A waiting attempt's place among the side's wakers of its name (``_async/ears.py``'s ``Ear``)."""

    @property
    def watching(self) -> bool: ...

    def watch(self) -> None: ...

    def unwatch(self) -> None: ...


class Ops:
    """A store's operations on its database (``db``); ``wake_dir``: the file's wake sockets (None: memory://,
    or none usable)."""

    def __init__(self, db: Db, process: Process[Any], wake_dir: WakeDir | None) -> None:
        self.db = db
        self.process = process
        self.wake_dir = wake_dir
        #: who holds, recorded with each holding of a file, and the judge of a dead holder (``reclaim``)
        self.local = LOCAL if db.owns else None

    def wake(self, name: str) -> None:
        self.process.wake((self.db.key, name), self.wake_dir)

    def acquire(self, claim: Claim, ear: Place | None = None) -> Grant:
        def body(conn: sqlite3.Connection, now: float) -> Grant:
            sql.purge(conn, claim.name, now)
            holders = sql.holders(conn, claim.name)
            ahead = arbiter.looks_ahead(claim.mode, claim.fair, claim.permits)
            queue = sql.queue_ahead(conn, claim.name, claim.token, ahead)  # only what the rule looks at
            stored = sql.capacity(conn, claim.name) if claim.mode is Mode.SEMAPHORE else None
            # Every refused claim registers (a local write), so inspect() counts the non-fair waiters too; only
            # fair claims and writers are held back by the entries ahead of them (the grant rule, ``arbiter``).
            decision = arbiter.decide(claim, holders, queue, now, register_all=True, stored=stored)
            if not decision.grant and not decision.ours and self.local is not None and reclaim(conn, claim.name, self.local):
                holders = sql.holders(conn, claim.name)
                decision = arbiter.decide(claim, holders, queue, now, register_all=True, stored=stored)
            if decision.ours:  # a retry after a lost reply: already ours
                return Grant(True, fence=sql.fence_of(conn, claim.token))
            if decision.store is not None:  # a semaphore's first live claim: its numbers
                sql.store_capacity(conn, claim.name, decision.store)
            if decision.grant:
                fence = sql.next_fence(conn, self.db.durable)
                sql.insert_holder(conn, claim, fence, now, self.local.own() if self.local else None)
                sql.dequeue(conn, claim.token)
                return Grant(True, fence=fence)
            if ear is not None and ear.watching and all(q.token != claim.token for q in queue):
                ear.unwatch()  # our entry ran out and joins again at the end: so does our place here
            sql.enqueue(conn, claim, now + WAITER_TTL)
            if ear is not None:
                ear.watch()  # in queue order: see Ear.watch
            return Grant(False, retry_after=decision.retry_after)

        grant = self.db.tx(body)
        if grant.acquired and claim.value is not None:
            self.wake(claim.name)  # a new leader: its observers (who listen where the waiters do) look again
        return grant

    def keep(self, claim: Claim) -> bool:
        """A quiet waiter's slice ended (``Attempt._quiet``): push its queue entry's deadline on."""

        def body(conn: sqlite3.Connection, now: float) -> bool:
            return sql.refresh(conn, claim.token, now, now + WAITER_TTL)

        return self.db.tx(body)

    def proclaim(self, claim: Claim, value: str) -> bool:
        record = replace(claim, value=value).record

        def body(conn: sqlite3.Connection, now: float) -> bool:
            return sql.set_owner(conn, claim.token, record, now)

        ok = self.db.tx(body)
        if ok:
            self.wake(claim.name)
        return ok

    def abandon(self, claim: Claim) -> None:
        def body(conn: sqlite3.Connection, now: float) -> int:
            gone = sql.dequeue(conn, claim.token) + sql.delete_holder(conn, claim.token)
            if claim.mode is Mode.SEMAPHORE:
                sql.drop_unused_capacity(conn, claim.name, now)
            return gone

        if self.db.tx(body):
            self.wake(claim.name)

    def release(self, claim: Claim) -> bool:
        def body(conn: sqlite3.Connection, now: float) -> bool:
            expires = sql.delete_holder_returning(conn, claim.token)
            if claim.mode is Mode.SEMAPHORE:
                sql.drop_unused_capacity(conn, claim.name, now)
            return expires is not None and expires > now

        ok = self.db.tx(body)
        self.wake(claim.name)
        return ok

    def renew(self, claims: Sequence[Claim]) -> list[tuple[bool, str | None]]:
        """Each lease extended (a live one only), with the release request made to its holder, if any."""

        def body(conn: sqlite3.Connection, now: float) -> list[tuple[bool, str | None]]:
            return [sql.extend_asked(conn, c.token, now, c.ttl) for c in claims]

        return self.db.tx(body)

    def request_release(self, name: str, request: str) -> bool:
        def body(conn: sqlite3.Connection, now: float) -> bool:
            return sql.ask(conn, name, now, request) > 0

        return self.db.tx(body)

    def shorten(self, claim: Claim, ttl: float) -> bool:
        """A renewal to ``ttl`` (the row's own token, a live lease only, the host's clock) that also lets the
        process go: the holding is left to end by itself (an at-most-once job's ``at_least``), after this
        process has exited too, so no acquirer may free it early as a dead process's (``reclaim``)."""

        def body(conn: sqlite3.Connection, now: float) -> bool:
            return sql.extend(conn, claim.token, now, ttl, disown=True)

        return self.db.tx(body)

    def set_permits(self, name: str, permits: int) -> bool:
        """A semaphore's capacity in force, if it is in use; its waiters look again (a bigger one lets more in)."""

        def body(conn: sqlite3.Connection, now: float) -> bool:
            return sql.resize(conn, name, now, permits)

        ok = self.db.tx(body)
        if ok:
            self.wake(name)
        return ok

    def holds(self, claim: Claim) -> bool:
        conn, now = self.db.read()
        return sql.is_live(conn, claim.token, now)

    def inspect(self, names: Sequence[str] | None, prefix: str = "") -> list[LockInfo]:
        conn, now = self.db.read()
        rows = sql.live_rows(conn, names, prefix, now)
        waiting = sql.waiting_counts(conn, names, prefix, now)
        sizes = sql.capacities(conn, names, prefix)
        return arbiter.lease_infos(rows, lambda n: waiting.get(n, (0, 0)), now, sizes.get)

    def break_lock(self, name: str) -> list[str]:
        def body(conn: sqlite3.Connection, now: float) -> list[str]:
            tokens = sql.delete_all(conn, name)
            sql.drop_unused_capacity(conn, name, now)
            return tokens

        tokens = self.db.tx(body)
        self.wake(name)
        return tokens

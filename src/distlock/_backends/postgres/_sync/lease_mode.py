# GENERATED from src/distlock/_backends/postgres/_async/lease_mode.py by scripts/gen_sync.py: edit that file, not this one.
"""PostgreSQL lease mode (the default): the lease tables, and wake-ups by LISTEN/NOTIFY.

A release, abandon or break (and an election's grant or proclaim) sends ``NOTIFY <prefix>_wake, '<name key>'``
in its transaction (the statements are in ``sql/lease_autocommit.py``), and each store keeps one
``LISTEN`` connection, started when a waiter first waits and stopped after ~10 s without waiters, that wakes
its waiters of that name at once (delivered at commit). A waiter still re-checks at the holder's lease end
and at least every second, so a lost notification costs latency, never the lock.

Through a connection pooler in transaction pooling, a LISTEN would register on whichever server connection
ran it, and that connection goes back to the pool: notifications would reach no one (or whoever takes it
next). There the store does not listen; its waiters poll instead, with the capped backoff of a store whose
push is down (2 ms growing to 50 ms, at the holder's lease end at the latest). NOTIFYs are still sent:
stores that reach PostgreSQL directly or through session pooling still wake at once. In statement pooling
(no transaction blocks) the operations are the same (``AutocommitOps``, ``sql/lease_autocommit.py``: every
try one multi-statement Query, the protocol of ``docs/models/sql_lease_statement.pml``); its waiters poll as
in transaction pooling.
"""

from __future__ import annotations

from typing import Any

import psycopg
import psycopg.sql

from .... import _rt_sync as rt
from ...._core import ids
from ...._core.timing import LEASE_WAIT_SLICE, monotonic
from ...._core.types import Grant
from ...._errors import BackendError
from ...._url import StoreConfig
from ...sql import lease_autocommit as ac
from ...sql import names as sn
from ...sql._sync.driver import SqlDriver
from ...sql._sync.lease_attempt import LeaseAttempt, lease_slice
from ...sql._sync.lease_mode import LeaseMode
from .. import _driver_sync as pg
from .driver import PgDriver


class PgLeaseMode(LeaseMode):
    """``mode=lease`` (the default) on PostgreSQL: the autocommit protocol, woken by LISTEN/NOTIFY."""

    # every connection, direct or through any pooler: no BEGIN, the one-round-trip acquire
    protocol = ac.AutocommitOps
    ops: ac.AutocommitOps
    # the listener wakes the first queued waiter wherever it waits
    push_wakes_head_anywhere = True
    driver: PgDriver

    def __init__(self, config: StoreConfig, driver: type[SqlDriver]) -> None:
        super().__init__(config, driver)
        self._listener: rt.Background | None = None
        self._listening = False
        # this store's own channel: the release that hands one of our waiters the name NOTIFYs there
        self._reply = f"{self.ops.channel}_{ids.new_token()[:16]}"

    def after_fork(self) -> None:
        """The listener (its connection, its task or thread) is the parent's, and so is the reply channel that
        hand-overs to the parent's waiters name: the child listens on a channel of its own, once it waits."""
        super().after_fork()
        self._listener = None
        self._listening = False
        self.ops.reply = None
        self._reply = f"{self.ops.channel}_{ids.new_token()[:16]}"

    @property
    def _can_listen(self) -> bool:
        return self.driver.pooler in (None, "session")  # see the module docstring

    def _ensure_listener(self) -> None:
        if not self._can_listen:
            return
        if self._listener is None or not self._listener.alive():
            self._listener = rt.Background(self._listen, name="distlock-postgres-listen")

    def _pushed(self) -> bool:
        return self._listening

    def _arm_push(self) -> None:
        # a NOTIFY sent before the LISTEN would be missed until the next poll: wait (bounded) until it is on
        self._ensure_listener()
        until = monotonic() + self._connect_timeout()
        while self._can_listen and not self._listening and monotonic() < until and not self._closed:
            rt.sleep(0.01)

    def _observe_slice(self) -> float:
        # observers are wakers too: while one watches, the listener stays up (it stops when none is left)
        self._ensure_listener()
        return LEASE_WAIT_SLICE if self._listening else super()._observe_slice()

    def _lease_wait(self, attempt: LeaseAttempt, grant: Grant, timeout: float | None) -> None:
        self._ensure_listener()
        delay = lease_slice(attempt, grant, timeout, backoff=not self._listening)
        assert attempt.waker is not None
        if attempt.waker.wait(delay):
            attempt.backoff.reset()

    def _listen(self) -> None:
        failures = 0
        while not self._closed:
            conn: Any = None
            try:
                conn = self.driver.connect()
                # quoted: an unquoted identifier is folded to lower case, and pg_notify's channel is not
                listen = psycopg.sql.SQL("LISTEN {}; LISTEN {}").format(
                    psycopg.sql.Identifier(self.ops.channel), psycopg.sql.Identifier(self._reply)
                )
                pg.guarded(conn, self._deadline(), conn.execute, listen)
                self._listening = True
                self.ops.reply = self._reply  # from now on our waiters' tries name it
                failures = 0
                idle = 0
                while not self._closed:
                    got = False
                    for note in conn.notifies(timeout=0.5):
                        got = True
                        key, handed = sn.handover_of(note.payload)
                        if handed is None:
                            self.wakers.wake(key)
                        else:  # a release granted the name to a waiter: ours?
                            self._handed_on(key, handed)
                    idle = 0 if got or bool(self.wakers) else idle + 1
                    if idle > 20:  # nobody has waited for ~10 s: stop listening, restart on demand
                        return
            except (psycopg.Error, OSError, BackendError):
                failures += 1
                self._listening = False
                self.ops.reply = None
                rt.sleep(min(2.0, 0.05 * 2**failures))
                if failures > 3 and not bool(self.wakers):
                    return

            finally:
                self._listening = False
                self.ops.reply = None  # a try made from now on names no channel: its hand-over goes to all
                if conn is not None:
                    try:
                        conn.close()
                    except psycopg.Error:
                        pass

    def close(self) -> None:
        super().close()
        if self._listener is not None:
            self._listener.join(0.0)

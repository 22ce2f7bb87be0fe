# GENERATED from src/distlock/_async/backends/mysql/lease.py by scripts/gen_sync.py: edit that file, not this one.
"""MySQL/MariaDB lease mode (the default): the lease tables, and wake-ups by a companion ``GET_LOCK``.

While a store holds a name it keeps ``GET_LOCK`` on the name's companion (``distlock-bell:<key>``) on one
"bell" connection, and releases it right after the holding's row is deleted; a waiter blocks in
``GET_LOCK(companion, t)`` (on a connection outside the pool) and re-tries as soon as that returns. When
no companion is held (the holder crashed, or its store could not take it) the waiter falls back to a short
capped backoff and re-checks at the holder's lease end at the latest. The bell is only a hint: its calls
get at most BELL_TIMEOUT, and a failure costs latency, never the lock. So nobody waits for them either: the
store's one bell thread makes them in the order they were asked for (a holding's GET_LOCK before its
RELEASE_LOCK), while ``acquire()`` and ``release()`` return (on asyncio they cost two thread hops per
acquire and release, a third of the time of an uncontended pair).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pymysql.err

from .... import _rt_sync as rt
from ...._core import sql_lease as sq
from ...._core.timing import monotonic
from ...._core.types import Claim, Grant
from ...._errors import BackendError
from ...._url import StoreConfig
from ..sql.lease import LeaseAttempt, LeaseBackend, lease_slice
from .driver import POOL, MyConn, MyDriver, shut_down

log = logging.getLogger("distlock")

#: a call on the bell connection (a wake-up hint) gets at most this long
BELL_TIMEOUT = 1.0
#: a waiter that finds nobody ringing looks again this much later (see ``_bell_wait_blocking``)
BELL_LATE = 0.001


class Lease(MyDriver, LeaseBackend):
    """``mode=lease`` (the default) on MySQL/MariaDB."""

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        # the transactional acquire (Ops, sql_lease.pml): measured against the one-batch acquire (BatchOps
        # as one multi-statement transaction) it was no faster uncontended and slower at hand-offs
        self._bell: MyConn | None = None
        self._bell_guard = threading.Lock()
        self._bells: dict[str, str] = {}  # token -> companion lock the bell connection holds for it
        #: the bell's calls, made by one thread in the order asked for (``_ring``)
        self._bell_line = ThreadPoolExecutor(max_workers=1, thread_name_prefix="distlock-bell")
        #: holdings whose let-go is asked for and not yet made: a take of their bell still queued is skipped
        #: (set operations are atomic; the caller's thread adds, the bell thread removes)
        self._ending: set[str] = set()

    # -- lease-mode wake-ups: the companion GET_LOCK ("bell") ------------------------------------------------
    def _ring(self, call: Callable[..., None], *args: Any) -> None:
        """Have the bell thread make ``call`` after the calls asked for before it; nobody waits for it."""
        try:
            self._bell_line.submit(call, *args)
        except RuntimeError:  # the store is closing: its bell connection goes, and the companions with it
            pass

    def _bell_call(self, sql: str, params: tuple[object, ...]) -> Any:
        """One statement on the bell connection (caller holds ``_bell_guard``); reconnects once."""
        if self._closed:  # a call queued before the close: no new bell connection
            return None
        for attempt in range(2):
            if self._bell is None or not self._bell.conn.open:
                self._bell = self._connect_blocking()
            self._bound(self._bell, monotonic() + min(self.call_timeout, BELL_TIMEOUT))  # only a hint
            try:
                with self._bell.conn.cursor() as cur:
                    cur.execute(sql, params)
                    row = cur.fetchone()
                    return None if row is None else row[0]
            except pymysql.err.MySQLError:
                self._close_blocking(self._bell)
                self._bell = None
                self._bells.clear()  # the companions went with the connection
                if attempt:
                    raise
        return None

    def _bell_hold(self, token: str, key: str) -> None:
        if token in self._ending:
            # The holding ended before the bell thread came to its take (a store looping acquire + release
            # asks for two bell calls per pair, each a round trip, and can ask faster than one thread makes
            # them): nobody needs this bell, and taking it late would keep waiters on a free name until the
            # let-go. The let-go that follows finds nothing to let go.
            return
        with self._bell_guard:
            try:
                if self._bell_call("SELECT GET_LOCK(%s, 0.02)", (sq.bell_name(key),)) == 1:
                    self._bells[token] = sq.bell_name(key)
            except (pymysql.err.MySQLError, BackendError):
                pass  # waiters fall back to re-checking

    def _bell_drop(self, tokens: Sequence[str]) -> None:
        with self._bell_guard:
            for token in tokens:
                self._ending.discard(token)
                companion = self._bells.pop(token, None)
                if companion is None:
                    continue
                try:
                    self._bell_call("SELECT RELEASE_LOCK(%s)", (companion,))
                except (pymysql.err.MySQLError, BackendError):
                    pass

    def _pushed(self) -> bool:
        return True  # the first queued waiter of a name waits on its bell (``_lease_wait``)

    def _granted(self, claim: Claim, key: str) -> None:
        if not self._closed:
            self._ring(self._bell_hold, claim.token, key)

    def _released(self, tokens: Sequence[str], key: str) -> None:
        self.wakers.wake(key)
        self._forget_bells(tokens)

    def _forget_bells(self, tokens: Sequence[str]) -> None:
        self._ending.update(tokens)
        self._ring(self._bell_drop, list(tokens))  # after any hold of theirs still queued: none stays behind

    def _bell_wait_blocking(self, c: MyConn, companion: str, timeout: float) -> int:
        """-1: nobody rings this name; 1: it rang (the holder let go); 0: timed out."""
        with c.guard, c.conn.cursor() as cur:
            self._bound(c, self._deadline(timeout))
            # One round trip: the companion is let go in the same SELECT as soon as it is granted. A holder
            # takes its bell right after its acquire returned (the bell thread): a waiter its try refused may
            # look before that, so it looks once more BELL_LATE later before it falls back to polling (a
            # capped backoff from 2 ms: the hand-over would wait for that poll instead of the bell).
            cur.execute(
                "SELECT CASE WHEN IS_USED_LOCK(%s) IS NULL AND SLEEP(%s) = 0 AND IS_USED_LOCK(%s) IS NULL THEN -1 "
                "WHEN GET_LOCK(%s, %s) = 1 THEN RELEASE_LOCK(%s) ELSE 0 END",
                (companion, BELL_LATE, companion, companion, timeout, companion),
            )
            row = cur.fetchone()
            return 0 if row is None or row[0] is None else int(row[0])

    def _lease_wait(self, attempt: LeaseAttempt, grant: Grant, timeout: float | None) -> None:
        assert attempt.waker is not None
        if attempt.waker.wait(0):  # a local release since our try
            attempt.backoff.reset()
            return
        delay = lease_slice(attempt, grant, timeout, backoff=False)
        if delay <= 0:
            return
        conn = self._borrow_dedicated()  # outside the bounded pool: it blocks for up to `delay`
        try:
            rang = rt.offload(
                self._bell_wait_blocking,
                conn,
                sq.bell_name(attempt.key),
                delay,
                interrupt=lambda: shut_down(conn),
                pool=POOL,
            )
        except pymysql.err.MySQLError as exc:  # only a hint: fall back to re-checking
            log.debug("bell wait failed: %s", exc)
            self._close_quietly(conn)
            rang = -1
        except BaseException:
            self._close_quietly(conn)  # cancelled: the thread may still be waiting on it
            raise
        else:
            self._give_back_dedicated(conn)
        if rang == -1:
            if attempt.waker.wait(lease_slice(attempt, grant, timeout, backoff=True)):
                attempt.backoff.reset()
        else:
            attempt.backoff.reset()

    def close(self) -> None:
        super().close()
        # the calls still queued are dropped (the companions go with the connection); one running ends within
        # BELL_TIMEOUT
        rt.offload(lambda: self._bell_line.shutdown(wait=True, cancel_futures=True), pool=POOL)
        with self._bell_guard:
            bell, self._bell = self._bell, None
            self._bells.clear()
        if bell is not None:
            rt.offload(self._close_blocking, bell, pool=POOL)

# GENERATED from src/distlock/_backends/mysql/_async/lease_mode.py by scripts/gen_sync.py: edit that file, not this one.
"""MySQL/MariaDB lease mode (the default): the lease tables, and wake-ups by a companion ``GET_LOCK``.

While a store holds a name it keeps ``GET_LOCK`` on the name's companion (``distlock-bell:<key>``) on one
"bell" connection, and releases it right after the holding's row is deleted; a waiter blocks in
``GET_LOCK(companion, t)`` (on a connection outside the pool) and re-tries as soon as that returns. When
no companion is held (the holder crashed, or its store could not take it) the waiter falls back to a short
capped backoff and re-checks at the holder's lease end at the latest. The bell is only a hint: its calls
get at most BELL_TIMEOUT, and a failure costs latency, never the lock. So nobody waits for them either: the
store's one bell worker (a thread, or a task on asyncio) makes them in the order they were asked for (a
holding's GET_LOCK before its RELEASE_LOCK), while ``acquire()`` and ``release()`` return.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator, Sequence
from functools import partial
from typing import Any, TypeVar

import pymysql.err

from .... import _rt_sync as rt
from ...._core import forks
from ...._core.timing import Budget, monotonic
from ...._core.types import Claim, Grant, Mode
from ...._errors import BackendError
from ...._url import StoreConfig
from ...sql import lease_tx as tx
from ...sql import names as sn
from ...sql import stmt as st
from ...sql._sync.driver import RetryableError, SqlDriver, StaleConnection
from ...sql._sync.lease_attempt import LeaseAttempt, lease_slice
from ...sql._sync.lease_mode import LeaseMode
from .. import _driver_sync as my
from .driver import Lead, MyConn, MyDriver, first_value

log = logging.getLogger("distlock")

T = TypeVar("T")
#: MySQL's answer to a KILL of a connection that is gone already
_NO_SUCH_THREAD = 1094

#: a call on the bell connection (a wake-up hint) gets at most this long
BELL_TIMEOUT = 1.0
#: a waiter that finds nobody ringing looks again this much later (see ``_bell_wait``)
BELL_LATE = 0.001
#: the waiter's bell wait: -1 if nobody rings the name (looked at twice, BELL_LATE apart), else it waits for
#: the companion (1: it rang; 0: timed out). Kept in ``@distlock_rang`` with the server's clock at its start
#: (``@distlock_bell_at``) for the try sent behind it in the same round trip (``TxOps.acquire_after_bell``),
#: and answered by the SELECT. ``{granted}``: what a granted wait does with the bell. A reader or a permit
#: lets it go in the same statement (``RELEASE_LOCK``: the next one may share the name too, and must be
#: woken); an exclusive claim KEEPS it (``1``): if its try takes the name, the bell is the new holder's at
#: once and the other waiters stay blocked on it until that holder lets go (a bell let go at once woke every
#: waiter of the name, and each sent a try the new holder refused); if the try is refused, its COMMIT lets
#: the bell go with every other named lock, waking the next waiter
_BELL_SQL = (
    "SET @distlock_bell_at = UNIX_TIMESTAMP(NOW(6)), @distlock_rang = (CASE WHEN IS_USED_LOCK(%s) IS NULL AND "
    "SLEEP(%s) = 0 AND IS_USED_LOCK(%s) IS NULL THEN -1 WHEN GET_LOCK(%s, %s) = 1 THEN {granted} ELSE 0 END); "
    "SELECT @distlock_rang"
)
_BELL_WAIT_STATEMENTS = 2


def _keeps_bell(claim: Claim) -> bool:
    """Whether a bell wait for ``claim`` keeps the bell it is granted (``_BELL_SQL``): the exclusive kinds."""
    return claim.mode in (Mode.EXCLUSIVE, Mode.WRITE)


class MyLeaseMode(LeaseMode):
    """``mode=lease`` (the default) on MySQL/MariaDB: the transactional protocol, woken by the bell."""

    # the transactional protocol (TxOps, sql_lease.pml): measured against the one-batch acquire of the
    # autocommit protocol (as one multi-statement transaction) it was no faster uncontended and slower at
    # hand-offs
    protocol = tx.TxOps
    ops: tx.TxOps
    driver: MyDriver

    def __init__(self, config: StoreConfig, driver: type[SqlDriver]) -> None:
        super().__init__(config, driver)
        self._bell: MyConn | None = None
        self._bells: dict[str, str] = {}  # token -> companion lock the bell connection holds for it
        #: holdings whose bell is the one their waiter's bell wait kept (``_lease_wait``): token -> that
        #: dedicated connection, kept out of the pool until the bell is let go, and the companion
        self._carried: dict[str, tuple[MyConn, str]] = {}
        #: the bell's calls, made by one worker in the order asked for (``_ring``; deque appends and pops are
        #: atomic: callers' threads append, the worker pops)
        self._bell_queue: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._bell_waker: rt.Waker | None = None
        self._bell_worker: rt.Background | None = None
        #: holdings whose let-go is asked for and not yet made: a take of their bell still queued is skipped
        #: (set operations are atomic; the caller's thread adds, the bell worker removes)
        self._ending: set[str] = set()
        #: bell waits whose grant may still run on the server, their connection not ended there
        #: (``_end_on_server``): token -> that connection's id and the waiter's attempt; ended after the
        #: store's next call the server answers (``_end_unended``)
        self._unended: dict[str, tuple[int, LeaseAttempt]] = {}
        self._ending_unended = False

    def after_fork(self) -> None:
        """The bell connection holds the companions of the parent's holdings, and the carried connections their
        bells: forgotten, never closed or let go of from the child (the parent's waiters would miss their
        wake-ups). The child's bell worker and connection start on its first grant."""
        super().after_fork()
        forks.abandon(self._bell, self._carried)
        self._bell = None
        self._bells = {}
        self._carried = {}
        self._bell_queue = deque()
        self._bell_waker = None
        self._bell_worker = None
        self._ending = set()
        self._unended = {}  # the parent's: the child must not end its connections

    # -- lease-mode wake-ups: the companion GET_LOCK ("bell") ------------------------------------------------
    def _ring(self, call: Callable[..., Any], *args: Any) -> None:
        """Have the bell worker make ``call`` after the calls asked for before it; nobody waits for it."""
        with self._mutex:
            if self._closed:  # the store is closing: its bell connection goes, and the companions with it
                return
            self._bell_queue.append((call, args))
            if self._bell_worker is None:
                self._bell_waker = rt.Waker()
                self._bell_worker = rt.Background(self._bell_line, "distlock-bell")
            waker = self._bell_waker
        assert waker is not None
        waker.notify()

    def _bell_line(self) -> None:
        """The bell worker: the queued calls one after the other, until the store closes."""
        assert self._bell_waker is not None
        while not self._closed:
            while self._bell_queue and not self._closed:
                call, args = self._bell_queue.popleft()
                try:
                    call(*args)
                except Exception:  # a hint that failed in an unforeseen way must not stop the later ones
                    log.exception("a bell call failed")
            self._bell_waker.wait(None)

    def _bell_call(self, sql: str, params: tuple[object, ...]) -> Any:
        """One statement on the bell connection (the bell worker's alone); reconnects once."""
        for attempt in range(2):
            if self._closed:  # a call queued before the close: no new bell connection
                return None
            if self._bell is None or not my.is_open(self._bell.conn):
                self._bell = self.driver.connect()
            conn = self._bell.conn
            try:
                return my.call(
                    conn, monotonic() + min(self.call_timeout, BELL_TIMEOUT), first_value, conn, sql, params
                )
            except pymysql.err.MySQLError:
                self._close_quietly(self._bell)
                self._bell = None
                self._bells.clear()  # the companions went with the connection
                if attempt:
                    raise
        return None

    def _bell_hold(self, token: str, key: str) -> None:
        if token in self._ending:
            # The holding ended before the bell worker came to its take (a store looping acquire + release
            # asks for two bell calls per pair, each a round trip, and can ask faster than one worker makes
            # them): nobody needs this bell, and taking it late would keep waiters on a free name until the
            # let-go. The let-go that follows finds nothing to let go.
            return
        try:
            if self._bell_call("SELECT GET_LOCK(%s, 0.02)", (sn.bell_name(key),)) == 1:
                self._bells[token] = sn.bell_name(key)
        except (pymysql.err.MySQLError, BackendError):
            pass  # waiters fall back to re-checking

    def _bell_drop(self, tokens: Sequence[str]) -> None:
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
        with self._mutex:
            carried = claim.token in self._carried
        if not carried:  # else its waiter's bell wait kept the bell: it is the holding's already
            self._ring(self._bell_hold, claim.token, key)

    def _release(self, claim: Claim) -> bool:
        """A holding whose bell its waiter's bell wait kept: the release and the bell's let-go in ONE round
        trip on that connection (``TxOps.release_ringing``), where the pooled release and the bell worker's
        let-go after it are two, one after the other, and a hop to the worker. Otherwise the usual way."""
        with self._mutex:
            carried = self._carried.pop(claim.token, None)
        if carried is None:
            return super()._release(claim)
        conn, companion = carried
        try:
            ok: bool = self.driver.run(conn, self.ops.release_ringing(claim, companion), False, self._deadline())
        except (StaleConnection, RetryableError):  # not run: the connection (and the bell) went
            self._close_quietly(conn)
            return super()._release(claim)
        except BaseException as exc:
            self._close_quietly(conn)  # the bell goes with it
            if self._db_error(exc):
                raise self._error("database error", exc) from exc
            raise
        self._give_back_dedicated(conn)
        self.wakers.wake(sn.name_key(claim.name))
        return ok

    def _drop_carried(self, conn: MyConn, companion: str) -> None:
        """Let go of a bell a holding that ended another way kept on its waiter's connection (the bell worker)."""
        try:
            let_go = st.single(st.Stmt("DO RELEASE_LOCK(%s)", (companion,)))
            self.driver.run(conn, let_go, False, self._deadline())
        except Exception:  # noqa: BLE001 - a hint: ending the connection lets go of it as well
            self._close_quietly(conn)
            return
        self._give_back_dedicated(conn)

    def _released(self, tokens: Sequence[str], key: str) -> None:
        self.wakers.wake(key)
        self._forget_bells(tokens)

    def _forget_bells(self, tokens: Sequence[str]) -> None:
        self._ending.update(tokens)
        self._ring(self._bell_drop, list(tokens))  # after any hold of theirs still queued: none stays behind
        with self._mutex:
            carried = [c for c in (self._carried.pop(t, None) for t in tokens) if c is not None]
        for conn, companion in carried:
            self._ring(self._drop_carried, conn, companion)

    def _bell_wait(self, c: MyConn, claim: Claim, timeout: float) -> tuple[int, Grant | None]:
        """The bell wait, and the try behind it in the same round trip: (-1: nobody rings this name; 1: it rang
        (the holder let go); 0: timed out) and the try's answer, made only if it rang (None otherwise).

        ``_BELL_SQL``. A holder takes its bell right after its acquire returned (the bell worker): a
        waiter its try refused may look before that, so it looks once more BELL_LATE later before it falls
        back to polling (a capped backoff from 2 ms: the hand-over would wait for that poll instead of the
        bell). When the bell rings the waiter tries at once, and that try's first round trip (the name's
        lock and the read) is the bell's own (``TxOps.acquire_after_bell``): a waiter woke, read the answer and
        only then sent its try before, a round trip more per hand-off. Not after a timeout: the caller may be
        at its deadline, where it sends no try (``LeaseAttempt.try_late``). An exclusive claim keeps the bell
        it is granted: a grant leaves it held on ``c`` for the new holding (the caller
        keeps ``c`` out of the pool), a refusal lets it go with its COMMIT."""
        key = sn.name_key(claim.name)
        companion = sn.bell_name(key)
        keep = _keeps_bell(claim)
        sql = _BELL_SQL.format(granted="1" if keep else "RELEASE_LOCK(%s)")
        params: tuple[object, ...] = (companion, BELL_LATE, companion, companion, timeout)
        lead = Lead(sql, params if keep else (*params, companion), _BELL_WAIT_STATEMENTS)
        script = self.ops.acquire_after_bell(claim, key, keep_bell=keep)
        grant: Grant | None = self.driver.run(c, script, True, self._deadline(timeout), lead)
        rang = lead.rows[0][0] if lead.rows else None
        return 0 if rang is None else int(rang), grant

    def _lease_wait(self, attempt: LeaseAttempt, grant: Grant, timeout: float | None) -> None:
        assert attempt.waker is not None
        if attempt.waker.wait(0):  # a local release since our try
            attempt.backoff.reset()
            return
        delay = lease_slice(attempt, grant, timeout, backoff=False)
        if delay <= 0:
            return
        conn = self._borrow_dedicated()  # outside the bounded pool: it blocks for up to `delay`
        attempt.settled = False  # the try behind the bell may still run on the server (see abandon)
        sent = monotonic()
        try:
            rang, tried = self._bell_wait(conn, attempt.claim, delay)
        except (pymysql.err.MySQLError, StaleConnection, RetryableError) as exc:
            # only a hint (and the try behind it is made again): fall back to re-checking
            log.debug("bell wait failed: %s", exc)
            self._end_on_server(conn, attempt)
            rang, tried = -1, None
        except BaseException:
            self._end_on_server(conn, attempt)  # cancelled mid-wait: the connection's state is unknown
            raise
        else:
            attempt.settled = True
            if rang == 1 and tried is not None and tried.acquired and _keeps_bell(attempt.claim):
                # the new holding keeps the bell its wait was granted: on this connection, until it lets go
                with self._mutex:
                    self._carried[attempt.claim.token] = (conn, sn.bell_name(attempt.key))
            else:
                self._give_back_dedicated(conn)
        if tried is not None:  # the caller's next try answers with it (``LeaseAttempt.try_acquire``)
            attempt.pretried = (tried, sent)
        if rang == -1:
            if attempt.waker.wait(lease_slice(attempt, grant, timeout, backoff=True)):
                attempt.backoff.reset()
        else:
            attempt.backoff.reset()

    def _end_on_server(self, conn: MyConn, attempt: LeaseAttempt) -> None:
        """Close a bell wait's connection whose call did not come back, and see it gone on the server before
        the abandon that follows looks. Where the server grants behind the bell (``lease_bell.server_grant``),
        the statements still run there after the client let go: when the bell rings they would commit a
        holding nobody has, after the abandon looked (the abandon takes the name's lock, but the grant may
        not have reached it yet). So the server ends that connection (``KILL CONNECTION``: it runs no further
        statement of the batch, and one that already holds the name's lock keeps it until it is gone, so the
        abandon's delete comes after). A batch sent but not begun yet (a busy server; a link that holds it
        back) is nothing a KILL finds: the connection is closed first, so it ends once that batch is done
        or was never read, and the KILL is made again until it is gone (``_kill``). One the server does not
        answer about within the clean-up's budget is ended after the store's next call that it answers
        (``_end_unended``), with the abandon behind it."""
        claim = attempt.claim
        conn_id = self.driver.connection_id(conn)
        self._close_quietly(conn)
        if conn_id is not None and _keeps_bell(claim) and self.ops.grants_on_server(claim, attempt.key):
            if not self._kill(conn_id, attempt.key, until_gone=True):  # not answered, or still there
                with self._mutex:
                    self._unended[claim.token] = (conn_id, attempt)

    def _kill(self, conn_id: int, key: str, until_gone: bool = False) -> bool | None:
        """``KILL CONNECTION`` of a bell wait's connection (``TxOps.end_bell_wait``: only while it is that
        wait). True: the server answered (the connection is ended, or was gone); None: it did not. With
        ``until_gone`` the KILL is made again, with the driver's count of connections ``conn_id`` in its round
        trip, until none is left (``until_gone``; a killed one stays until it has rolled back, one whose batch
        has not begun is not ended): False if one still is at the end of the clean-up's budget."""
        kill = self.ops.end_bell_wait(conn_id, key, sn.bell_name(key))
        if until_gone:
            return self.until_gone(st.Stmt(f"{kill.sql}; {self.driver.gone_sql}", (*kill.params, conn_id)))
        try:
            with Budget(self.cleanup_timeout):
                super()._tx(lambda: st.single(kill), tx=False)
        except BackendError as exc:
            cause = exc.__cause__
            if isinstance(cause, pymysql.err.MySQLError) and cause.args and cause.args[0] == _NO_SUCH_THREAD:
                return True  # gone already: it ended with its connection
            log.debug("could not end the bell wait's connection %s: %s", conn_id, exc)
            return None
        return True

    def _tx(
        self, make: Callable[[], Generator[st.Stmt, st.Result, T]], tx: bool = True, cut: list[int] | None = None
    ) -> T:
        result: T = super()._tx(make, tx, cut)
        if self._unended:  # the server answers again: end what a bell wait left running there
            self._end_unended()  # cancelled: what is left stays for the next call
        return result

    def _end_unended(self) -> None:
        """The bell waits ``_end_on_server`` could not end: each connection is ended now (``_kill``), then, if
        its attempt gave up, the attempt's holding that a grant behind the bell committed meanwhile is
        deleted by its token (``TxOps.abandon``, under the name's lock); an attempt still trying takes that
        holding as its own (its next try finds it) or deletes it when it gives up. What the server does not
        answer now stays for the next call; nothing is waited for past ``cleanup_timeout`` each. A connection
        still there at the end of that budget (its batch reached the server later still) is abandoned all
        the same: what it grants then lasts its lease (docs/sql.md)."""
        with self._mutex:
            if self._ending_unended:
                return
            self._ending_unended = True
            todo = list(self._unended.items())
        try:
            for token, (conn_id, attempt) in todo:
                if self._kill(conn_id, attempt.key, until_gone=True) is None:
                    return
                if attempt.gave_up:
                    claim, key = attempt.claim, attempt.key
                    try:
                        with Budget(self.cleanup_timeout):
                            done = super()._tx(partial(self.ops.abandon, claim, key), tx=self._in_tx("abandon"))
                    except BackendError as exc:
                        log.debug("could not delete what a bell wait left: %s", exc)
                        return
                    if done:
                        self._released([token], key)
                with self._mutex:
                    self._unended.pop(token, None)
        finally:
            self._ending_unended = False

    def close(self) -> None:
        super().close()
        # the calls still queued are dropped (the companions go with the connection); one running ends within
        # BELL_TIMEOUT
        self._bell_queue.clear()
        with self._mutex:
            worker, waker = self._bell_worker, self._bell_waker
        if worker is not None and waker is not None:
            waker.notify()
            worker.join(BELL_TIMEOUT + 1.0)
        bell, self._bell = self._bell, None
        self._bells.clear()
        if bell is not None:
            self._close_quietly(bell)
        with self._mutex:
            carried, self._carried = list(self._carried.values()), {}
        for conn, _ in carried:  # their bells go with them
            self._close_quietly(conn)

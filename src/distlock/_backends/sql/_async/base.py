"""What every SQL mode shares: the store's URL options, its connections, bounded calls, the schema, errors.

``SqlBase`` is the common base of the mode classes (``lease_mode.py``'s ``LeaseMode`` and the dialects' lease
modes, ``session.py``'s ``SessionMode``, ``rowlock.py``'s ``RowLockMode``). Each holds ONE driver object
(``self.driver``, a ``driver.SqlDriver``: ``PgDriver`` or ``MyDriver``) that the dialect package's
``Backend.open`` gives it: every connection, script and statement goes through that object.

Here: the URL options every mode reads, a small pool of connections for short transactions (``_tx``:
re-runs deadlocks, discards broken connections), connections outside that pool for calls that block on
the server on purpose (a waiter's wake-up wait, a session-mode holding), the call budget (``Budget``: every
call ends by a deadline), opening (the tables are created by ``schema.py``), and turning driver errors into
``BackendError``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Generator, Sequence
from typing import Any, Self, TypeVar

from .... import _rt_async as rt
from ...._async.backend import AsyncBackend
from ...._core import barrier as rules
from ...._core import forks
from ...._core.latch import LatchState
from ...._core.timing import Budget, budget_end, monotonic
from ...._core.types import Claim, PrimitiveInfo, primitive_infos
from ...._errors import BackendError, ConfigError
from ...._url import StoreConfig, scrub
from .. import lease as sq
from .. import names as sn
from .. import stmt as st
from . import barrier, latch
from .driver import RetryableError, SqlDriver, StaleConnection
from .schema import ensure_schema

log = logging.getLogger("distlock")

T = TypeVar("T")

#: connections kept idle outside the pool (waits, session holdings) per store
MAX_IDLE = 8
#: connections of a store's pool (lease-mode transactions, inspect, schema)
MAX_POOL = 4
#: default bound of one call (a transaction, a statement), URL option ``call_timeout``
CALL_TIMEOUT = 5.0
#: the clean-up after a failed or cancelled acquire (``abandon``) gets at most this long, then its
#: connection is closed and the lease bounds what is left on the server
CLEANUP_TIMEOUT = 1.0
#: a connection let go of mid-call that is still on the server is looked at again this much later, doubling
#: up to GONE_AGAIN_MAX (``SqlBase.until_gone``)
GONE_AGAIN = 0.002
GONE_AGAIN_MAX = 0.05
#: a renewal round trip gets at most this share of the shortest TTL in its batch (lease mode: then one more
#: try on a fresh connection, so a half-open pooled connection costs one try, not the holdings)
RENEW_SHARE = 0.25


def pop_mode(config: StoreConfig) -> str:
    """The URL option ``mode``: ``lease`` (default) or ``session``. Read once, when the store opens: it
    picks the backend class."""
    mode = (config.pop("mode", "lease") or "lease").lower()
    if mode not in ("lease", "session"):
        raise ConfigError(f"URL option mode={mode!r} must be 'lease' or 'session'", backend=config.scheme)
    return mode


class SqlBase(AsyncBackend):
    """The part of every SQL mode that does not depend on the mode; the driver is ``self.driver``."""

    fork_owned = True

    #: the lease tables' statements this mode runs (``LeaseOps``: the schema, upgrade and sweep alone; a
    #: lease mode runs its dialect's protocol)
    protocol: type[sq.LeaseOps] = sq.LeaseOps
    #: the session mode's sequence + holder-record layout (see ``sql/session.py``'s ``session_schema``); MySQL
    #: servers without sequences use the portable one (the driver finds out at open)
    fast_session = True
    #: session mode: its holder records have the ``asked`` column (``SessionMode``, ``schema.py``)
    session_asks = True
    #: a holding is the lock of the server connection pinned to it (a pooler that hands server connections
    #: to other clients between transactions would strand or share it)
    pins_connections = False

    def __init__(self, config: StoreConfig, driver: type[SqlDriver]) -> None:
        super().__init__(config)
        prefix = config.pop("table_prefix", "distlock") or "distlock"
        if not sn.valid_prefix(prefix):
            raise ConfigError(
                f"URL option table_prefix={prefix!r} is not a plain SQL identifier", backend=config.scheme
            )
        self.prefix = prefix
        self.connect_timeout = config.pop_float("connect_timeout", 10.0)
        self.call_timeout = config.pop_float("call_timeout", CALL_TIMEOUT)
        self.cleanup_timeout = min(self.call_timeout, CLEANUP_TIMEOUT)
        #: the database's driver: it reads its own URL options (the rest are refused there)
        self.driver = driver(self, config)
        self.dialect = self.driver.make_dialect(prefix)
        self.ops = type(self).protocol(self.dialect, prefix, channel=f"{prefix}_wake")
        # half the call's bound: a try that waited this long for the name's lock (held by another session's
        # transaction) is refused as busy, with time left for its answer; a wait as long as the call raced
        # the client's own deadline, and the try then failed as a call that timed out
        self.ops.name_wait = self.call_timeout / 2
        # one mutex for the pool, the idle dedicated connections and the modes' maps of holdings
        self._mutex = threading.Lock()
        self._idle: list[Any] = []
        self._open = 0  # pool connections open (idle or borrowed)
        self._pool_waiters: list[rt.Waker] = []
        self._dedicated_idle: list[Any] = []
        self._releasing: set[str] = set()  # tokens whose release is in flight
        self._closed = False

    def after_fork(self) -> None:
        """The pool and the idle connections are the parent's sessions: forgotten, never closed (closing sends
        the driver's goodbye on the parent's socket); the child opens its own as it needs them."""
        super().after_fork()
        forks.abandon(self._idle, self._dedicated_idle)
        self._mutex = threading.Lock()
        self._idle = []
        self._open = 0
        self._pool_waiters = []
        self._dedicated_idle = []
        self._releasing = set()

    async def list_primitives(self, prefix: str) -> Sequence[PrimitiveInfo] | None:
        """The latches and barriers of the store's tables; None where the driver cannot list the tables that
        exist (a listing creates none)."""
        if self.driver.existing_tables_sql is None:
            return None
        tables: st.Result = await self._tx(lambda: st.single(st.Stmt(str(self.driver.existing_tables_sql))), tx=False)
        existing = {str(row[0]).lower() for row in tables.rows}
        found = await latch.listing(self, existing)
        return primitive_infos(found, await barrier.listing(self, existing), prefix)

    # -- count-down latches (``sql/latch.py``; every mode) ------------------------------------------------------
    def latch_refused(self) -> str | None:
        return None

    async def latch_open(self, name: str, count: int | None, round_id: str) -> LatchState | None:
        return await latch.open_latch(self, name, count, round_id)

    async def latch_count_down(self, name: str, round_id: str, step: str, linger: float) -> int:
        left, wake = await latch.count_down(self, name, round_id, step, linger)
        if wake is not None:
            self._latch_woken(wake)
        return left

    # -- barriers (``sql/barrier.py``; every mode) -------------------------------------------------------------
    def barrier_refused(self, kind: str) -> str | None:
        return None

    async def barrier_step(self, kind: str, name: str, op: rules.Op) -> rules.Reply:
        return await barrier.step(self, kind, name, op)

    def _latch_woken(self, key: str) -> None:
        """A latch of this store reached zero: wake its waiters here (the lease mode's local wakers)."""

    # -- mode hooks ------------------------------------------------------------------------------------------
    def _mode_schema(self) -> Sequence[str]:
        """DDL the mode needs beyond the shared tables (created at open when missing)."""
        return ()

    def _open_cleanup(self) -> st.Stmt | None:
        """A statement run at open after the schema (the session mode clears records of dead connections)."""
        return None

    async def _release(self, claim: Claim) -> bool:
        raise NotImplementedError

    # -- bounds and errors -------------------------------------------------------------------------------
    def _deadline(self, extra: float = 0.0) -> float:
        """When the call starting now must be over: ``call_timeout`` (+ ``extra``: a server-side wait it
        makes on purpose), or the context's tighter ``Budget``."""
        own = monotonic() + self.call_timeout + extra
        budget = budget_end()
        return own if budget is None else min(own, budget)

    def _connect_timeout(self) -> float:
        budget = budget_end()
        return self.connect_timeout if budget is None else max(0.1, min(self.connect_timeout, budget - monotonic()))

    def _db_error(self, exc: BaseException) -> bool:
        return isinstance(exc, (StaleConnection, RetryableError)) or self.driver.driver_error(exc)

    def _error(self, what: str, exc: BaseException) -> BackendError:
        # one line: the driver's first (psycopg adds "LINE 1: <statement>" and a caret, or a hint)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return BackendError(f"{what}: {scrub(first, self.config.password)}", backend=self.scheme)

    # -- the pool: short transactions ----------------------------------------------------------------------
    async def _borrow(self) -> Any:
        """A connection of the store's pool (at most MAX_POOL open): short transactions share a few
        connections instead of opening one per concurrent caller (each connect costs a TLS/SCRAM handshake,
        and libpq computes SCRAM on the calling thread: the event loop on the async side)."""
        while True:
            with self._mutex:
                if self._idle:
                    return self._idle.pop()
                if self._open < MAX_POOL:
                    self._open += 1
                    break
                waker = rt.Waker()
                self._pool_waiters.append(waker)
            await waker.wait(0.05)
            with self._mutex:
                if waker in self._pool_waiters:
                    self._pool_waiters.remove(waker)
        try:
            if (budget := budget_end()) is not None and monotonic() >= budget:
                raise BackendError(f"database call timed out ({self.describe()})", backend=self.scheme)
            return await self.driver.connect()
        except BaseException:
            self._forget_conn()
            raise

    def _forget_conn(self) -> None:
        with self._mutex:
            self._open -= 1
            waiters, self._pool_waiters = self._pool_waiters[:1], self._pool_waiters[1:]
        for w in waiters:
            w.notify()

    async def _give_back(self, conn: Any) -> None:
        with self._mutex:
            closed = self._closed
            waiters: list[rt.Waker] = []
            if not closed:
                self._idle.append(conn)
                waiters, self._pool_waiters = self._pool_waiters[:1], self._pool_waiters[1:]
        if closed:
            await self._discard(conn)
            return
        for w in waiters:
            w.notify()

    async def _purge_idle(self) -> None:
        with self._mutex:
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            waiters, self._pool_waiters = self._pool_waiters[: len(idle)], self._pool_waiters[len(idle) :]
        for w in waiters:
            w.notify()
        for conn in idle:
            await self._close_quietly(conn)

    async def _discard(self, conn: Any) -> None:
        """Close a pool connection that is broken or in an unknown state."""
        self._forget_conn()
        await self._close_quietly(conn)

    async def _close_quietly(self, conn: Any) -> None:
        try:
            await self.driver.close(conn)
        except Exception as exc:  # noqa: BLE001 - closing a dead connection
            log.debug("closing a connection failed: %s", exc)

    async def _tx(
        self, make: Callable[[], Generator[st.Stmt, st.Result, T]], tx: bool = True, cut: list[int] | None = None
    ) -> T:
        """Run the script ``make()`` in one transaction on a pooled connection, retrying deadlocks. The whole
        of it (connects and retries included) ends within ``call_timeout`` or the context's Budget. ``cut``:
        the server's ids of the connections let go of mid-call (cancelled, or lost) are added to it: what
        they sent may still run there (``until_gone``)."""
        with Budget(self.call_timeout) as budget:
            for attempt in range(8):
                if budget.end is not None and monotonic() >= budget.end:
                    raise BackendError(f"database call timed out ({self.describe()})", backend=self.scheme)
                conn = await self._borrow()
                try:
                    result: T = await self.driver.run(conn, make(), tx, self._deadline())
                except (RetryableError, StaleConnection) as exc:
                    await self._discard(conn) if isinstance(exc, StaleConnection) else await self._give_back(conn)
                    if attempt == 7:
                        raise self._error("database busy", exc) from exc
                    await rt.sleep(0.001 * (attempt + 1))
                    continue
                except BaseException as exc:
                    if cut is not None and (not self._db_error(exc) or self.driver.broken(exc)):
                        cid = self.driver.connection_id(conn)
                        if cid is not None:
                            cut.append(cid)
                    if self._db_error(exc):
                        if self.driver.broken(exc):
                            await self._discard(conn)
                            await self._purge_idle()  # a link that went silent under one went under all
                        else:
                            await self._give_back(conn)
                        raise self._error("database error", exc) from exc
                    await self._discard(conn)  # cancelled mid-transaction: its state is unknown
                    raise
                await self._give_back(conn)
                return result
        raise AssertionError("unreachable")

    async def until_gone(self, look: st.Stmt) -> bool | None:
        """Make ``look`` (a statement answering how many server connections are still there: ``gone_sql``,
        or MySQL's conditional KILL of a bell wait with it) again, a little later each time, until it answers
        0, within the clean-up's budget. A call the client let go of mid-way (cancelled, or its link lost)
        may not have begun on the server yet: only once its connection has ended there is nothing of it
        left to run, and a clean-up that looks before then misses what it commits. True: gone; False: still
        there at the end of the budget (the context's, where sooner); None: the server did not answer."""
        pause = GONE_AGAIN
        try:
            with Budget(self.cleanup_timeout) as budget:
                while True:
                    # SqlBase's own: a mode's override may itself clean up after its calls (MySQL's bell waits)
                    r: st.Result = await SqlBase._tx(self, lambda: st.single(look), tx=False)
                    if not r.rows or not r.rows[0][0]:
                        return True
                    if monotonic() + pause >= (budget.end or 0.0):
                        return False
                    await rt.sleep(pause)
                    pause = min(2 * pause, GONE_AGAIN_MAX)
        except BackendError as exc:
            log.debug("could not see whether a connection let go of mid-call has ended: %s", exc)
            return None

    # -- dedicated connections: calls that block on the server on purpose --------------------------------
    async def _borrow_dedicated(self) -> Any:
        """A connection outside the bounded pool (a waiter's server-side wait, a session-mode holding):
        calls that block for seconds must not starve the short transactions of connections."""
        with self._mutex:
            if self._dedicated_idle:
                return self._dedicated_idle.pop()
        return await self.driver.connect()

    async def _give_back_dedicated(self, conn: Any) -> None:
        with self._mutex:
            if not self._closed and len(self._dedicated_idle) < MAX_IDLE:
                self._dedicated_idle.append(conn)
                return
        await self._close_quietly(conn)

    # -- opening ---------------------------------------------------------------------------------------
    @classmethod
    async def open(cls, config: StoreConfig, driver: type[SqlDriver] | None = None) -> Self:
        """Open the mode with its dialect's ``driver`` (the dialect package's ``Backend.open`` gives it)."""
        if driver is None:
            raise TypeError(f"{cls.__name__} opens with its dialect's driver class")
        backend = cls(config, driver)
        try:
            await backend._prepare()
        except BaseException:
            await backend.aclose()  # the connections the failed preparation opened, not left to the GC
            raise
        return backend

    async def _prepare(self) -> None:
        """What opening a store does before its first lock: the driver probes the server, then the tables
        that are missing are created."""
        await self.driver.prepare()
        await ensure_schema(self)

    @property
    def pooler(self) -> str | None:
        """What sits between this store and the database (``SqlDriver.pooler``)."""
        return self.driver.pooler

    async def _adopt(self, conn: Any) -> None:
        """A connection the driver opened while probing the server joins the pool (opening costs no extra
        connect)."""
        with self._mutex:
            self._open += 1
        await self._give_back(conn)

    # -- the backend interface: what both modes do alike ------------------------------------------------------
    async def release(self, claim: Claim) -> bool:
        # A renewal racing with this release must not report the holding lost: mark it as being released.
        with self._mutex:
            self._releasing.add(claim.token)
        try:
            return await self._release(claim)
        finally:
            with self._mutex:
                self._releasing.discard(claim.token)

    async def aclose(self) -> None:
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
            idle += self._dedicated_idle
            self._dedicated_idle = []
        for conn in idle:
            await self._close_quietly(conn)

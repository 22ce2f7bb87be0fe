"""What the MySQL/MariaDB and PostgreSQL backends share: one implementation, two drivers, two dialects.

Two modes, chosen by the URL option ``mode``:

* ``lease`` (default): rows in lease tables (``_core/sql_lease.py`` has the schema and every statement).
  Each operation is one short transaction on a pooled connection; the acquire locks the name's fence
  row first, so it and the expiry takeover are atomic. Renewal of every held lease of the store is one
  transaction per tick. Waiters are woken by a push (PostgreSQL: LISTEN/NOTIFY; MySQL: a companion
  ``GET_LOCK`` that the holder keeps and the waiters block on), with a re-check at the holder's expiry.
* ``session``: a connection-bound lock (MySQL ``GET_LOCK``, PostgreSQL advisory locks) on a connection
  pinned to the holding (F13 in docs/safety.md). The server's idle timeout of that connection is the lease: the
  renewer's check every ttl/3 keeps it alive, a holder that stops renewing (or dies) loses it, and a
  dropped connection is seen by the next renewal (``lost``). Fences come from the fence counter table.

A subclass gives the driver (``_connect``, ``_run``, error classification) and the connection-bound
statements; everything else is here.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from ... import _rt_async as rt
from ..._core import sql_lease as sq
from ..._core.timing import Backoff, monotonic, wait_slice
from ..._core.types import Capabilities, Claim, Grant, HolderInfo, LockInfo, Mode
from ..._errors import BackendError, ConfigError
from ..._url import StoreConfig, scrub
from ..backend import AsyncAttempt, AsyncBackend

log = logging.getLogger("distlock")

T = TypeVar("T")

#: the longest one wait lasts before a re-check (keeps the waiter's queue entry fresh: WAITER_TTL)
MAX_WAIT_SLICE = 1.0
#: session mode: the longest one server-side blocking wait lasts (bounds a cancelled wait's tail)
SESSION_WAIT_SLICE = 2.0
#: idle pooled connections kept per store
MAX_IDLE = 4
#: connections of a store's pool (lease-mode transactions, inspect, schema)
MAX_POOL = 4

LEASE_CAPS = Capabilities(modes=frozenset(Mode), fair=True, needs_renewal=True)

#: default bound of one call (a transaction, a statement), URL option ``call_timeout``
CALL_TIMEOUT = 5.0
#: the clean-up after a failed or cancelled acquire (``abandon``) gets at most this long, then its
#: connection is closed and the lease bounds what is left on the server
CLEANUP_TIMEOUT = 1.0
#: a renewal round trip gets at most this share of the shortest TTL in its batch, then one more try on a
#: fresh connection (a half-open pooled connection costs one try, not the holdings)
RENEW_SHARE = 0.25
#: renewals also sweep long-expired rows (and 0.1.0's fence rows), at most this often
SWEEP_EVERY = 30.0

#: a deadline (monotonic) that the calls made in this context must meet, tighter than ``call_timeout``
_BUDGET: contextvars.ContextVar[float | None] = contextvars.ContextVar("distlock_sql_budget", default=None)


class Budget:
    """``with Budget(seconds):`` every database call inside (this task or thread) ends by then."""

    def __init__(self, seconds: float) -> None:
        self.deadline = monotonic() + seconds
        self._token: contextvars.Token[float | None] | None = None

    def __enter__(self) -> Budget:
        outer = _BUDGET.get()
        self._token = _BUDGET.set(self.deadline if outer is None else min(outer, self.deadline))
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _BUDGET.reset(self._token)


class RetryableError(Exception):
    """A deadlock or serialization failure: the transaction was rolled back and may simply be re-run."""


class StaleConnection(Exception):
    """The connection failed before anything of the transaction was sent: run it on a fresh one."""


@dataclass
class Pinned:
    """Session mode: the connection that holds one claim's lock, and what is known about it."""

    conn: Any
    claim: Claim
    conn_id: int
    guard: threading.Lock = field(default_factory=threading.Lock)
    ttl: float = 0.0


class LeaseAttempt(AsyncAttempt):
    backend: SqlBackend

    def __init__(self, backend: SqlBackend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self.key = sq.name_key(claim.name)
        self.backoff = Backoff()
        self.waker: rt.Waker | None = None

    async def try_acquire(self) -> Grant:
        b = self.backend
        if self.waker is None:  # watch before looking, so a release right after our look is not missed
            self.waker = rt.Waker()
            b._watch(self.key, self.waker)
        grant: Grant = await b._tx(lambda: b.ops.acquire(self.claim, self.key))
        if grant.acquired:
            self._unwatch()
            await b._granted(self.claim, self.key)
        return grant

    async def wait(self, grant: Grant, timeout: float | None) -> None:
        await self.backend._lease_wait(self, grant, timeout)

    async def abandon(self) -> None:
        self._unwatch()
        b = self.backend
        with Budget(b.cleanup_timeout):  # then the connection is closed: the lease bounds what is left
            done = await b._tx(lambda: b.ops.abandon(self.claim, self.key))
        if done:
            await b._released([self.claim.token], self.key)

    def _unwatch(self) -> None:
        if self.waker is not None:
            self.backend._unwatch(self.key, self.waker)
            self.waker = None


class SessionAttempt(AsyncAttempt):
    backend: SqlBackend

    def __init__(self, backend: SqlBackend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self.conn: Any = None
        self.taken: tuple[int, int] | None = None  # (fence, connection id) once the server granted it

    async def _go(self, wait: float | None) -> None:
        b = self.backend
        for attempt in range(2):
            if self.conn is None:
                self.conn = await b._session_borrow()
            try:
                self.taken = await b._session_acquire(self.conn, self.claim, wait)
                return
            except StaleConnection as exc:  # a pooled connection the server had closed: nothing was held
                conn, self.conn = self.conn, None
                await b._close_quietly(conn)
                if attempt:
                    raise b._error("database error", exc) from exc

    async def try_acquire(self) -> Grant:
        if self.taken is None:
            await self._go(None)
        if self.taken is None:
            return Grant(False)
        fence, conn_id = self.taken
        conn, self.conn = self.conn, None
        self.backend._pin(conn, self.claim, conn_id)
        return Grant(True, fence=fence)

    async def wait(self, grant: Grant, timeout: float | None) -> None:
        slice_ = SESSION_WAIT_SLICE if timeout is None else min(timeout, SESSION_WAIT_SLICE)
        if slice_ > 0:
            await self._go(slice_)

    async def abandon(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:  # closing the connection drops whatever it holds or waits for
            await self.backend._close_quietly(conn)
        pinned = self.backend._unpin(self.claim.token)
        if pinned is not None:
            await self.backend._close_quietly(pinned.conn)


class SqlBackend(AsyncBackend):
    """Shared by ``mysql.Backend`` and ``postgres.Backend``."""

    capabilities = LEASE_CAPS
    #: modes the connection-bound mode can do on this database
    session_modes: frozenset[Mode] = frozenset({Mode.EXCLUSIVE})
    make_dialect: Callable[[str], sq.Dialect]

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        mode = (config.pop("mode", "lease") or "lease").lower()
        if mode not in ("lease", "session"):
            raise ConfigError(f"URL option mode={mode!r} must be 'lease' or 'session'", backend=config.scheme)
        self.session = mode == "session"
        prefix = config.pop("table_prefix", "distlock") or "distlock"
        if not sq.valid_prefix(prefix):
            raise ConfigError(
                f"URL option table_prefix={prefix!r} is not a plain SQL identifier", backend=config.scheme
            )
        self.prefix = prefix
        self.connect_timeout = config.pop_float("connect_timeout", 10.0)
        self.call_timeout = config.pop_float("call_timeout", CALL_TIMEOUT)
        self.cleanup_timeout = min(self.call_timeout, CLEANUP_TIMEOUT)
        self._swept = monotonic()
        self.dialect = type(self).make_dialect(prefix)
        self.ops = sq.Ops(self.dialect, prefix, channel=f"{prefix}_wake")
        self.ops.name_wait = self.call_timeout
        if self.session:
            self.capabilities = Capabilities(modes=self.session_modes, fair=False, needs_renewal=True)
        self._idle: list[Any] = []
        self._open = 0  # pool connections open (idle or borrowed)
        self._pool_waiters: list[rt.Waker] = []
        self._pool_guard = threading.Lock()
        self._wakers: dict[str, set[rt.Waker]] = {}
        self._wake_guard = threading.Lock()
        self._pinned: dict[str, Pinned] = {}
        self._session_idle: list[Any] = []
        self._releasing: set[str] = set()  # tokens whose release is in flight
        self._own_conn_ids: set[int] = set()  # session connections this store has held locks on
        self._closed = False

    # -- driver hooks (subclasses) ---------------------------------------------------------------------
    async def _connect(self, session_ttl: float | None = None) -> Any:
        """A new connection in autocommit mode; with ``session_ttl``, its idle timeout is that TTL."""
        raise NotImplementedError

    async def _run(
        self, conn: Any, script: Generator[sq.Stmt, sq.Result, Any], tx: bool, deadline: float | None = None
    ) -> Any:
        """Drive ``script`` on ``conn`` (inside BEGIN/COMMIT if ``tx``), ended by ``deadline`` (monotonic;
        the connection is then broken). Driver errors propagate."""
        raise NotImplementedError

    def _deadline(self, extra: float = 0.0) -> float:
        """When the call starting now must be over: ``call_timeout`` (+ ``extra``: a server-side wait it
        makes on purpose), or the context's tighter :class:`Budget`."""
        own = monotonic() + self.call_timeout + extra
        budget = _BUDGET.get()
        return own if budget is None else min(own, budget)

    def _connect_timeout(self) -> float:
        budget = _BUDGET.get()
        return self.connect_timeout if budget is None else max(0.1, min(self.connect_timeout, budget - monotonic()))

    async def _close(self, conn: Any) -> None:
        raise NotImplementedError

    def _broken(self, exc: BaseException) -> bool:
        """Is ``exc`` a driver error after which the connection must be thrown away?"""
        raise NotImplementedError

    def _driver_error(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def _db_error(self, exc: BaseException) -> bool:
        return isinstance(exc, (StaleConnection, RetryableError)) or self._driver_error(exc)

    async def _session_call(self, conn: Any, stmt: sq.Stmt, wait: float = 0.0) -> list[list[tuple[Any, ...]]]:
        """Run one (MySQL: multi-) statement in autocommit; every result set. A connection that is gone
        raises StaleConnection; PostgreSQL's lock_timeout ends in an empty answer (not acquired). Bounded
        by ``call_timeout`` plus ``wait`` (a server-side wait the statement makes on purpose)."""
        raise NotImplementedError

    kill_sql: str = ""

    async def _kill(self, conn_ids: Sequence[int]) -> None:
        """Break: end the connections that hold a session-mode lock, from the server side."""
        for cid in conn_ids:
            stmt = sq.Stmt(self.kill_sql, (int(cid),))
            try:
                await self._tx(lambda stmt=stmt: sq.single(stmt), tx=False)  # type: ignore[misc]
            except BackendError as exc:
                log.debug("could not end connection %s: %s", cid, exc)

    async def _lease_wait(self, attempt: LeaseAttempt, grant: Grant, timeout: float | None) -> None:
        raise NotImplementedError

    async def _granted(self, claim: Claim, key: str) -> None:
        """After a lease-mode grant (MySQL takes the companion lock here)."""

    async def _released(self, tokens: Sequence[str], key: str) -> None:
        """After a lease-mode release/abandon/break: wake the local waiters (and ring the bell)."""
        self._wake(key)

    # -- plumbing --------------------------------------------------------------------------------------
    def _error(self, what: str, exc: BaseException) -> BackendError:
        # one line: the driver's first (psycopg adds "LINE 1: <statement>" and a caret, or a hint)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return BackendError(f"{what}: {scrub(first, self.config.password)}", backend=self.scheme)

    async def _borrow(self) -> Any:
        """A connection of the store's pool (at most MAX_POOL open): short transactions share a few
        connections instead of opening one per concurrent caller (each connect costs a TLS/SCRAM handshake,
        and libpq computes SCRAM on the calling thread: the event loop on the async side)."""
        while True:
            with self._pool_guard:
                if self._idle:
                    return self._idle.pop()
                if self._open < MAX_POOL:
                    self._open += 1
                    break
                waker = rt.Waker()
                self._pool_waiters.append(waker)
            await waker.wait(0.05)
            with self._pool_guard:
                if waker in self._pool_waiters:
                    self._pool_waiters.remove(waker)
        try:
            if (budget := _BUDGET.get()) is not None and monotonic() >= budget:
                raise BackendError(f"database call timed out ({self.describe()})", backend=self.scheme)
            return await self._connect()
        except BaseException:
            self._forget_conn()
            raise

    def _forget_conn(self) -> None:
        with self._pool_guard:
            self._open -= 1
            waiters, self._pool_waiters = self._pool_waiters[:1], self._pool_waiters[1:]
        for w in waiters:
            w.notify()

    async def _give_back(self, conn: Any) -> None:
        with self._pool_guard:
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
        with self._pool_guard:
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
            await self._close(conn)
        except Exception as exc:  # noqa: BLE001 - closing a dead connection
            log.debug("closing a connection failed: %s", exc)

    async def _tx(self, make: Callable[[], Generator[sq.Stmt, sq.Result, T]], tx: bool = True) -> T:
        """Run the script ``make()`` in one transaction on a pooled connection, retrying deadlocks. The whole
        of it (connects and retries included) ends within ``call_timeout`` or the context's Budget."""
        with Budget(self.call_timeout) as budget:
            for attempt in range(8):
                if monotonic() >= budget.deadline:
                    raise BackendError(f"database call timed out ({self.describe()})", backend=self.scheme)
                conn = await self._borrow()
                try:
                    result: T = await self._run(conn, make(), tx, self._deadline())
                except (RetryableError, StaleConnection) as exc:
                    await self._discard(conn) if isinstance(exc, StaleConnection) else await self._give_back(conn)
                    if attempt == 7:
                        raise self._error("database busy", exc) from exc
                    await rt.sleep(0.001 * (attempt + 1))
                    continue
                except BaseException as exc:
                    if self._db_error(exc):
                        if self._broken(exc):
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

    #: session mode with the sequence + holder-record layout (see ``sql_lease.session_schema``)
    fast_session = True
    #: MySQL session mode with ``SELECT ... FOR UPDATE`` row locks instead of GET_LOCK (``session_lock=row``)
    row_lock = False

    existing_tables_sql: str | None = None  # lists the tables (and sequences) already there, if needed
    schema_sql = "current_schema()"  # the schema (database) the tables live in, as an SQL expression
    #: taken first, in the same transaction as the DDL, where concurrent ``CREATE ... IF NOT EXISTS`` can
    #: fail (PostgreSQL: two sessions creating one table both pass the check, one then violates the
    #: unique index of ``pg_type``); None where the server serialises them itself (MySQL's metadata locks)
    schema_guard_sql: str | None = None

    @classmethod
    async def open(cls, config: StoreConfig) -> Self:
        backend = cls(config)
        try:
            await backend._prepare()
        except BaseException:
            await backend.aclose()  # the connections the failed preparation opened, not left to the GC
            raise
        return backend

    async def _prepare(self) -> None:
        """What opening a store does before its first lock: create the tables that are missing."""
        await self._ensure_schema()

    async def _ensure_schema(self) -> None:
        """Create what is missing. Where the server has one, the list of existing tables is read first:
        MySQL's ``CREATE TABLE IF NOT EXISTS`` waits for the metadata lock of a table that an open
        transaction (a row-lock holder) has touched, even when there is nothing to create.

        Then the 0.1.0 upgrade: the holders table gets its ``layout`` column (0.1.0 clients can no longer
        acquire), the fence counter is raised above every per-name fence 0.1.0 recorded, and those rows are
        deleted (in batches for up to 2 s; the renewer's sweeps remove the rest)."""
        existing: set[str] = set()
        if self.existing_tables_sql is not None:
            found: sq.Result = await self._tx(lambda: sq.single(sq.Stmt(str(self.existing_tables_sql))), tx=False)
            existing = {str(row[0]).lower() for row in found.rows}
        old_holders = False
        if f"{self.prefix}_holders" in existing:
            col: sq.Result = await self._tx(
                lambda: sq.single(
                    sq.Stmt(
                        "SELECT 1 FROM information_schema.columns WHERE table_schema = "
                        f"{self.schema_sql} AND table_name = %s AND column_name = 'layout'",
                        (f"{self.prefix}_holders",),
                    )
                ),
                tx=False,
            )
            old_holders = not col.rows

        def script() -> Generator[sq.Stmt, sq.Result, None]:
            if self.schema_guard_sql is not None:
                yield sq.Stmt(self.schema_guard_sql, (sq.advisory_key(f"distlock-schema:{self.prefix}"),))
            extra = sq.row_schema(self.prefix) if self.row_lock else ()
            for stmt in (
                *self.dialect.schema,
                *self.ops.extra_schema(),
                *sq.session_schema(self.dialect, self.prefix, self.fast_session),
                *extra,
            ):
                if sq.created_name(stmt).lower() not in existing:
                    yield sq.Stmt(stmt)
            if old_holders:
                yield from self.ops.upgrade()
            yield from self.ops.seed()
            cleanup = sq.session_cleanup(self.dialect, self.prefix, self.fast_session)
            if self.session and cleanup is not None:
                yield cleanup

        await self._tx(script, tx=self.schema_guard_sql is not None)
        deadline = monotonic() + 2.0
        try:
            while monotonic() < deadline:  # the rows 0.1.0 left, one per name it ever locked
                if await self._tx(lambda: self.ops.sweep()) < sq.SWEEP_BATCH:
                    break
        except BackendError as exc:  # a big table: the renewer's sweeps go on with it
            log.debug("sweep at open failed: %s", exc)

    async def _one(self, conn: Any, sql: str, params: tuple[object, ...] = ()) -> Any:
        """One statement in autocommit on ``conn``; the first column of its first row."""
        r: sq.Result = await self._run(conn, sq.single(sq.Stmt(sql, params)), False, self._deadline())
        return r.rows[0][0] if r.rows else None

    # -- local wake-ups --------------------------------------------------------------------------------
    def _watch(self, key: str, waker: rt.Waker) -> None:
        with self._wake_guard:
            self._wakers.setdefault(key, set()).add(waker)

    def _unwatch(self, key: str, waker: rt.Waker) -> None:
        with self._wake_guard:
            group = self._wakers.get(key)
            if group is not None:
                group.discard(waker)
                if not group:
                    del self._wakers[key]

    def _wake(self, key: str) -> None:
        with self._wake_guard:
            group = list(self._wakers.get(key, ()))
        for waker in group:
            waker.notify()

    def _watching(self) -> bool:
        with self._wake_guard:
            return bool(self._wakers)

    # -- session mode ----------------------------------------------------------------------------------
    async def _session_borrow(self) -> Any:
        with self._pool_guard:
            if self._session_idle:
                return self._session_idle.pop()
        return await self._connect()

    async def _session_give_back(self, conn: Any) -> None:
        with self._pool_guard:
            if not self._closed and len(self._session_idle) < MAX_IDLE * 2:
                self._session_idle.append(conn)
                return
        await self._close_quietly(conn)

    async def _session_acquire(self, conn: Any, claim: Claim, wait: float | None) -> tuple[int, int] | None:
        change = self._timeout_change(conn, claim.ttl)
        if self.row_lock:
            stmt = sq.row_acquire(self.prefix, claim, wait, change)
        else:
            stmt = sq.session_acquire(self.dialect, self.prefix, claim, wait, change, self.fast_session)
        try:
            sets = await self._session_call(conn, stmt, wait or 0.0)
            if self.row_lock and len(sets) == 2 and not sets[0]:  # the name has no row yet: create it, retry
                await self._session_call(conn, sq.row_create(self.prefix, claim.name))
                sets = await self._session_call(conn, stmt, wait or 0.0)
        except StaleConnection:
            raise
        except BaseException as exc:
            if self._db_error(exc):
                raise self._error("database error", exc) from exc
            raise
        return sq.session_acquired(self.dialect, sets, self.fast_session)

    def _timeout_change(self, conn: Any, ttl: float) -> float | None:
        """The idle timeout to set with the next statement on ``conn``, or None if it is already ``ttl``."""
        return ttl

    def _pin(self, conn: Any, claim: Claim, conn_id: int) -> None:
        with self._pool_guard:
            self._pinned[claim.token] = Pinned(conn, claim, conn_id, ttl=claim.ttl)
            self._own_conn_ids.add(conn_id)

    def _unpin(self, token: str) -> Pinned | None:
        with self._pool_guard:
            return self._pinned.pop(token, None)

    async def _session_release(self, claim: Claim) -> bool:
        with self._pool_guard:
            pinned = self._pinned.get(claim.token)
        if pinned is None:
            return False
        ok = False
        try:
            unlock = sq.row_unlock(self.prefix) if self.row_lock else sq.session_unlock(self.dialect, claim)
            sets = await self._session_call(pinned.conn, unlock)
            ok = bool(sets and sets[-1] and sets[-1][0][0])
        except Exception as exc:  # a dead connection: the lock went with it
            if not self._db_error(exc):
                raise
        finally:
            self._unpin(claim.token)
        if ok:
            await self._session_give_back(pinned.conn)
        else:
            await self._close_quietly(pinned.conn)
        return ok

    async def _session_check(self, pinned: Pinned, ttl: float) -> bool:
        try:
            change = self._timeout_change(pinned.conn, ttl)
            check = sq.row_check(change) if self.row_lock else sq.session_check(self.dialect, pinned.claim, change)
            sets = await self._session_call(pinned.conn, check)
        except Exception as exc:  # the connection is gone: so is the lock
            if not self._db_error(exc):
                raise
            log.debug("session check of %r failed: %s", pinned.claim.name, scrub(str(exc), self.config.password))
            return False
        pinned.ttl = ttl
        return bool(sets and sets[-1] and sets[-1][0][0])

    async def _session_renew(self, claims: Sequence[Claim]) -> list[bool]:
        out: list[bool] = []
        for claim in claims:
            with self._pool_guard:
                pinned = self._pinned.get(claim.token)
                releasing = claim.token in self._releasing
            if releasing:  # its owner is releasing it right now: release() tells the outcome
                out.append(True)
                continue
            ok = False
            if pinned is not None:
                try:
                    with Budget(RENEW_SHARE * claim.ttl):  # a silent pinned connection: this holding is lost
                        ok = await self._session_check(pinned, claim.ttl)
                except BaseException:  # cancelled mid-check: the connection is closed, and the lock with it
                    self._session_lost(claim, pinned, "its connection's check was cancelled")
                    await self._close_quietly(pinned.conn)
                    raise
            if not ok and pinned is not None and claim.token not in self._releasing:
                self._session_lost(claim, pinned, "its connection failed, timed out or no longer holds the lock")
                await self._close_quietly(pinned.conn)
            out.append(ok or claim.token in self._releasing)
        return out

    def _session_lost(self, claim: Claim, pinned: Pinned, why: str) -> None:
        """Session mode: the lock lives and dies with its connection. Unpin it and tell the store now,
        whether or not it still waits for this renewal's answer (the sync renewer may have stopped waiting)."""
        if self._unpin(claim.token) is pinned and claim.token not in self._releasing:
            self.lost(claim.token, f"connection-bound lock lost: {why}")

    async def _session_rows(self, names: Sequence[str] | None, prefix: str) -> list[tuple[Any, ...]]:
        if self.row_lock:
            stmt = sq.row_holders(self.prefix, names, prefix)
        else:
            stmt = sq.session_holders(self.dialect, self.prefix, names, prefix, self.fast_session)
        r: sq.Result = await self._tx(lambda: sq.single(stmt), tx=False)
        rows = r.rows
        if self.row_lock:  # our own connections: the pinned map is exact (INNODB_TRX lags up to 0.1 s)
            with self._pool_guard:
                pinned_ids = {p.conn_id for p in self._pinned.values()}
                own = set(self._own_conn_ids)

            def live(row: tuple[Any, ...]) -> bool:
                conn_id = int(row[4])
                return conn_id in pinned_ids if conn_id in own else bool(row[7])

            rows = [r[:7] for r in rows if live(r)]
        return rows

    async def _session_inspect(self, names: Sequence[str] | None, prefix: str) -> list[LockInfo]:
        """Live holders: records whose connection still holds the lock; a connection holding it without
        a record of its own (another application's plain lock) shows as ``<db>:connection:<id>``."""
        rows = await self._session_rows(names, prefix)
        ours: dict[str, dict[int, HolderInfo]] = {}
        foreign: dict[str, dict[int, HolderInfo]] = {}
        for name, owner, mode, fence, conn_id, holder, holder_mode in rows:
            n, h = str(name), int(holder)
            if conn_id is not None and int(conn_id) == h:
                ours.setdefault(n, {})[h] = HolderInfo(str(owner), int(fence), str(mode), None)
            else:
                shared = str(holder_mode).lower().startswith("share")
                label = f"{self.dialect.name}:connection:{h}"
                foreign.setdefault(n, {})[h] = HolderInfo(label, None, "read" if shared else "lock", None)
        out = []
        for n in sorted(set(ours) | set(foreign)):
            mine = ours.get(n, {})
            holders = [*mine.values(), *(v for k, v in foreign.get(n, {}).items() if k not in mine)]
            modes = {x.mode for x in holders}
            kind = sq.KIND_OF_MODE[Mode.READ.value] if modes & {"read", "write"} else "lock"
            out.append(LockInfo(n, kind, tuple(holders), None))
        return out

    async def _session_break(self, name: str) -> bool:
        rows = await self._session_rows([name], "")
        if not rows:
            return False
        holders = {int(row[5]) for row in rows if row[5] is not None}
        with self._pool_guard:
            mine = [t for t, p in self._pinned.items() if p.claim.name == name and p.conn_id in holders]
        for token in mine:
            pinned = self._unpin(token)
            if pinned is not None:
                await self._close_quietly(pinned.conn)
                self.lost(token, "broken by an admin (break_lock)")
        await self._kill(sorted(holders))
        for _ in range(100):  # a terminated session lets go of its locks a moment later
            if not await self._session_rows([name], ""):
                break
            await rt.sleep(0.02)
        return True

    # -- the backend interface -------------------------------------------------------------------------
    def attempt(self, claim: Claim) -> AsyncAttempt:
        if self.session:
            return SessionAttempt(self, claim)
        return LeaseAttempt(self, claim)

    async def release(self, claim: Claim) -> bool:
        # A renewal racing with this release must not report the holding lost: mark it as being released.
        with self._pool_guard:
            self._releasing.add(claim.token)
        try:
            if self.session:
                return await self._session_release(claim)
            key = sq.name_key(claim.name)
            ok: bool = await self._tx(lambda: self.ops.release(claim, key), tx=False)
            await self._released([claim.token], key)
            return ok
        finally:
            with self._pool_guard:
                self._releasing.discard(claim.token)

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        if not claims:
            return []
        if self.session:
            return await self._session_renew(claims)
        share = RENEW_SHARE * min(c.ttl for c in claims)
        result: list[bool] = []
        for attempt in range(2):
            try:
                with Budget(share):  # a silent connection costs one try; the second runs on a fresh one
                    result = await self._tx(lambda: self.ops.renew(claims))
                break
            except BackendError:
                if attempt:
                    raise
        await self._maybe_sweep()
        with self._pool_guard:
            result = [ok or c.token in self._releasing for c, ok in zip(claims, result, strict=True)]
        gone = [c.token for c, ok in zip(claims, result, strict=True) if not ok]
        if gone:
            await self._forget_bells(gone)
        return result

    async def _maybe_sweep(self) -> None:
        """Every SWEEP_EVERY seconds, from the renewer: remove expired rows and free names' rows."""
        if monotonic() - self._swept < SWEEP_EVERY:
            return
        self._swept = monotonic()
        try:
            await self._tx(lambda: self.ops.sweep())
        except BackendError as exc:
            log.debug("sweep failed: %s", exc)

    async def _forget_bells(self, tokens: Sequence[str]) -> None:
        """Lease mode: holdings that ran out keep no companion lock (MySQL)."""

    async def holds(self, claim: Claim) -> bool:
        if self.session:
            with self._pool_guard:
                pinned = self._pinned.get(claim.token)
            if pinned is None:
                return False
            try:
                return await self._session_check(pinned, pinned.ttl)
            except Exception as exc:  # a dead connection holds nothing
                if not self._db_error(exc):
                    raise
                return False
        ok: bool = await self._tx(lambda: self.ops.holds(claim), tx=False)
        return ok

    async def inspect(self, name: str) -> LockInfo | None:
        if self.session:
            infos = await self._session_inspect([name], "")
        else:
            infos = await self._tx(lambda: self.ops.inspect([name]), tx=False)
        return infos[0] if infos else None

    async def list(self, prefix: str) -> list[LockInfo]:
        if self.session:
            return await self._session_inspect(None, prefix)
        infos: list[LockInfo] = await self._tx(lambda: self.ops.inspect(None, prefix), tx=False)
        return infos

    async def break_lock(self, name: str) -> bool:
        if self.session:
            return await self._session_break(name)
        tokens: list[str] = await self._tx(lambda: self.ops.break_lock(name))
        await self._released(tokens, sq.name_key(name))
        for token in tokens:
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

    async def aclose(self) -> None:
        with self._pool_guard:
            self._closed = True
            idle, self._idle = self._idle, []
            pinned, self._pinned = list(self._pinned.values()), {}
            idle += self._session_idle
            self._session_idle = []
        for conn in idle:
            await self._close_quietly(conn)
        for p in pinned:
            await self._close_quietly(p.conn)


def session_timeout_seconds(ttl: float) -> int:
    """MySQL's ``wait_timeout`` is whole seconds (at least 1): the TTL rounded up."""
    return max(1, math.ceil(ttl))


def lease_slice(attempt: LeaseAttempt, grant: Grant, timeout: float | None, backoff: bool) -> float:
    return wait_slice(grant.retry_after, attempt.backoff.next_delay() if backoff else None, timeout, MAX_WAIT_SLICE)

# GENERATED from src/distlock/_async/backends/_sql.py by scripts/gen_sync.py: edit that file, not this one.
"""What the MySQL/MariaDB and PostgreSQL backends share: one implementation, two drivers, two dialects.

Two modes, chosen by the URL option ``mode``:

* ``lease`` (default): rows in lease tables (``_core/sql_lease.py`` has the schema and every statement).
  Each operation is one short transaction on a pooled connection; the acquire locks the name's fence
  row first, so it and the expiry takeover are atomic. Renewal of every held lease of the store is one
  transaction per tick. Waiters are woken by a push (PostgreSQL: LISTEN/NOTIFY; MySQL: a companion
  ``GET_LOCK`` that the holder keeps and the waiters block on), with a re-check at the holder's expiry.
* ``session``: a connection-bound lock (MySQL ``GET_LOCK``, PostgreSQL advisory locks) on a connection
  pinned to the holding (SAFETY F13). The server's idle timeout of that connection is the lease: the
  renewer's check every ttl/3 keeps it alive, a holder that stops renewing (or dies) loses it, and a
  dropped connection is seen by the next renewal (``lost``). Fences come from the fence counter table.

A subclass gives the driver (``_connect``, ``_run``, error classification) and the connection-bound
statements; everything else is here.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ... import _rt_sync as rt
from ..._core import sql_lease as sq
from ..._core.timing import Backoff, wait_slice
from ..._core.types import Capabilities, Claim, Grant, HolderInfo, LockInfo, Mode
from ..._errors import BackendError, ConfigError
from ..._url import StoreConfig, scrub
from ..backend import SyncAttempt, SyncBackend

log = logging.getLogger("distlock")

T = TypeVar("T")

#: the longest one wait lasts before a re-check (keeps the waiter's queue entry fresh: WAITER_TTL)
MAX_WAIT_SLICE = 1.0
#: session mode: the longest one server-side blocking wait lasts (bounds a cancelled wait's tail)
SESSION_WAIT_SLICE = 2.0
#: idle pooled connections kept per store
MAX_IDLE = 4

LEASE_CAPS = Capabilities(modes=frozenset(Mode), fair=True, needs_renewal=True)


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


class LeaseAttempt(SyncAttempt):
    backend: SqlBackend

    def __init__(self, backend: SqlBackend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self.key = sq.name_key(claim.name)
        self.backoff = Backoff()
        self.waker: rt.Waker | None = None

    def try_acquire(self) -> Grant:
        b = self.backend
        if self.waker is None:  # watch before looking, so a release right after our look is not missed
            self.waker = rt.Waker()
            b._watch(self.key, self.waker)
        grant: Grant = b._tx(lambda: b.ops.acquire(self.claim, self.key))
        if grant.acquired:
            self._unwatch()
            b._granted(self.claim, self.key)
        return grant

    def wait(self, grant: Grant, timeout: float | None) -> None:
        self.backend._lease_wait(self, grant, timeout)

    def abandon(self) -> None:
        self._unwatch()
        b = self.backend
        if b._tx(lambda: b.ops.abandon(self.claim, self.key)):
            b._released([self.claim.token], self.key)

    def _unwatch(self) -> None:
        if self.waker is not None:
            self.backend._unwatch(self.key, self.waker)
            self.waker = None


class SessionAttempt(SyncAttempt):
    backend: SqlBackend

    def __init__(self, backend: SqlBackend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self.conn: Any = None
        self.got = False
        self.busy = threading.Lock()

    def try_acquire(self) -> Grant:
        b = self.backend
        if self.conn is None:
            self.conn = b._connect(session_ttl=self.claim.ttl)
        if not self.got:
            self.got = b._session_try(self.conn, self.claim)
        if not self.got:
            return Grant(False)
        conn, self.conn = self.conn, None
        try:
            fence = b._pin(conn, self.claim)
        except BaseException:
            b._close_quietly(conn)
            raise
        return Grant(True, fence=fence)

    def wait(self, grant: Grant, timeout: float | None) -> None:
        slice_ = SESSION_WAIT_SLICE if timeout is None else min(timeout, SESSION_WAIT_SLICE)
        if slice_ <= 0 or self.conn is None:
            return
        self.got = self.backend._session_wait(self.conn, self.claim, slice_)

    def abandon(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:  # closing the connection drops whatever it holds or waits for
            self.backend._close_quietly(conn)
        pinned = self.backend._unpin(self.claim.token)
        if pinned is not None:
            self.backend._close_quietly(pinned.conn)


class SqlBackend(SyncBackend):
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
        self.dialect = type(self).make_dialect(prefix)
        self.ops = sq.Ops(self.dialect, prefix, channel=f"{prefix}_wake")
        if self.session:
            self.capabilities = Capabilities(modes=self.session_modes, fair=False, needs_renewal=True)
        self._idle: list[Any] = []
        self._pool_guard = threading.Lock()
        self._wakers: dict[str, set[rt.Waker]] = {}
        self._wake_guard = threading.Lock()
        self._pinned: dict[str, Pinned] = {}
        self._closed = False

    # -- driver hooks (subclasses) ---------------------------------------------------------------------
    def _connect(self, session_ttl: float | None = None) -> Any:
        """A new connection in autocommit mode; with ``session_ttl``, its idle timeout is that TTL."""
        raise NotImplementedError

    def _run(self, conn: Any, script: Generator[sq.Stmt, sq.Result, Any], tx: bool) -> Any:
        """Drive ``script`` on ``conn`` (inside BEGIN/COMMIT if ``tx``). Driver errors propagate."""
        raise NotImplementedError

    def _close(self, conn: Any) -> None:
        raise NotImplementedError

    def _broken(self, exc: BaseException) -> bool:
        """Is ``exc`` a driver error after which the connection must be thrown away?"""
        raise NotImplementedError

    def _driver_error(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def _db_error(self, exc: BaseException) -> bool:
        return isinstance(exc, (StaleConnection, RetryableError)) or self._driver_error(exc)

    def _session_try(self, conn: Any, claim: Claim) -> bool:
        raise NotImplementedError

    def _session_wait(self, conn: Any, claim: Claim, timeout: float) -> bool:
        raise NotImplementedError

    def _session_check(self, pinned: Pinned, ttl: float) -> bool:
        """Is the pinned connection alive and still holding the lock? (Also sets its idle timeout.)"""
        raise NotImplementedError

    def _session_unlock(self, pinned: Pinned) -> bool:
        raise NotImplementedError

    def _session_conn_id(self, conn: Any) -> int:
        raise NotImplementedError

    def _session_alive_sql(self, claim_name: str) -> tuple[str, tuple[object, ...]]:
        """A condition on ``s.conn_id`` true while that connection holds ``claim_name`` (for inspect)."""
        raise NotImplementedError

    kill_sql: str = ""

    def _kill(self, conn_ids: Sequence[int]) -> None:
        """Break: end the connections that hold a session-mode lock, from the server side."""
        for cid in conn_ids:
            stmt = sq.Stmt(self.kill_sql, (int(cid),))
            try:
                self._tx(lambda stmt=stmt: sq.single(stmt), tx=False)  # type: ignore[misc]
            except BackendError as exc:
                log.debug("could not end connection %s: %s", cid, exc)

    def _lease_wait(self, attempt: LeaseAttempt, grant: Grant, timeout: float | None) -> None:
        raise NotImplementedError

    def _granted(self, claim: Claim, key: str) -> None:
        """After a lease-mode grant (MySQL takes the companion lock here)."""

    def _released(self, tokens: Sequence[str], key: str) -> None:
        """After a lease-mode release/abandon/break: wake the local waiters (and ring the bell)."""
        self._wake(key)

    # -- plumbing --------------------------------------------------------------------------------------
    def _error(self, what: str, exc: BaseException) -> BackendError:
        return BackendError(f"{what}: {scrub(str(exc), self.config.password)}", backend=self.scheme)

    def _borrow(self) -> Any:
        with self._pool_guard:
            if self._idle:
                return self._idle.pop()
        return self._connect()

    def _give_back(self, conn: Any) -> None:
        with self._pool_guard:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        self._close_quietly(conn)

    def _close_quietly(self, conn: Any) -> None:
        try:
            self._close(conn)
        except Exception as exc:  # noqa: BLE001 - closing a dead connection
            log.debug("closing a connection failed: %s", exc)

    def _tx(self, make: Callable[[], Generator[sq.Stmt, sq.Result, T]], tx: bool = True) -> T:
        """Run the script ``make()`` in one transaction on a pooled connection, retrying deadlocks."""
        for attempt in range(8):
            conn = self._borrow()
            try:
                result: T = self._run(conn, make(), tx)
            except (RetryableError, StaleConnection) as exc:
                self._close_quietly(conn) if isinstance(exc, StaleConnection) else self._give_back(conn)
                if attempt == 7:
                    raise self._error("database busy", exc) from exc
                rt.sleep(0.001 * (attempt + 1))
                continue
            except BaseException as exc:
                if self._db_error(exc):
                    if self._broken(exc):
                        self._close_quietly(conn)
                    else:
                        self._give_back(conn)
                    raise self._error("database error", exc) from exc
                self._close_quietly(conn)  # cancelled mid-transaction: its state is unknown
                raise
            self._give_back(conn)
            return result
        raise AssertionError("unreachable")

    def _ensure_schema(self) -> None:
        def script() -> Generator[sq.Stmt, sq.Result, None]:
            for stmt in self.dialect.schema:
                yield sq.Stmt(stmt)
            yield sq.Stmt(
                f"CREATE TABLE IF NOT EXISTS {self.prefix}_sessions (token VARCHAR(64) NOT NULL PRIMARY KEY, "
                "name_key CHAR(64) NOT NULL, name TEXT NOT NULL, owner VARCHAR(255) NOT NULL, "
                "mode VARCHAR(16) NOT NULL, fence BIGINT NOT NULL, conn_id BIGINT NOT NULL)"
                + (" ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin" if self.dialect.name == "mysql" else "")
            )

        self._tx(script, tx=False)

    def _one(self, conn: Any, sql: str, params: tuple[object, ...] = ()) -> Any:
        """One statement in autocommit on ``conn``; the first column of its first row."""
        r: sq.Result = self._run(conn, sq.single(sq.Stmt(sql, params)), False)
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
    def _pin(self, conn: Any, claim: Claim) -> int:
        """The lock is held on ``conn``: take a fence, record the holder, keep the connection."""
        conn_id = self._session_conn_id(conn)
        key = sq.name_key(claim.name)
        p = self.prefix

        def script() -> Generator[sq.Stmt, sq.Result, int]:
            fence = yield from self.ops.bump_fence(claim.name)
            if claim.mode is not Mode.READ:  # an exclusive holder: every other row of the name is stale
                yield sq.Stmt(f"DELETE FROM {p}_sessions WHERE name_key = %s", (key,))
            yield sq.Stmt(
                f"INSERT INTO {p}_sessions (token, name_key, name, owner, mode, fence, conn_id) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (claim.token, key, claim.name, claim.owner[:255], claim.mode.value, fence, conn_id),
            )
            return fence

        try:
            fence: int = self._run(conn, script(), False)
        except BaseException as exc:
            if self._db_error(exc):
                raise self._error("database error", exc) from exc
            raise
        with self._pool_guard:
            self._pinned[claim.token] = Pinned(conn, claim, conn_id, ttl=claim.ttl)
        return fence

    def _unpin(self, token: str) -> Pinned | None:
        with self._pool_guard:
            return self._pinned.pop(token, None)

    def _session_release(self, claim: Claim) -> bool:
        pinned = self._unpin(claim.token)
        if pinned is None:
            return False
        try:
            ok = self._session_unlock(pinned)
            if ok:
                self._run(
                    pinned.conn,
                    sq.single(sq.Stmt(f"DELETE FROM {self.prefix}_sessions WHERE token = %s", (claim.token,))),
                    False,
                )
        except Exception as exc:  # a dead connection: the lock went with it
            if not self._db_error(exc):
                raise
            ok = False
        self._close_quietly(pinned.conn) if not ok else self._session_park(pinned.conn)
        return ok

    def _session_park(self, conn: Any) -> None:
        """A connection that held a lock goes away: its idle timeout makes it unfit for the pool."""
        self._close_quietly(conn)

    def _session_renew(self, claims: Sequence[Claim]) -> list[bool]:
        out: list[bool] = []
        for claim in claims:
            with self._pool_guard:
                pinned = self._pinned.get(claim.token)
            ok = False
            if pinned is not None:
                try:
                    ok = self._session_check(pinned, claim.ttl)
                except Exception as exc:  # the connection is gone: so is the lock
                    if not self._db_error(exc):
                        raise
                    log.debug("session check failed for %r: %s", claim.name, scrub(str(exc), self.config.password))
                if not ok:
                    self._unpin(claim.token)
                    self._close_quietly(pinned.conn)
            out.append(ok)
        return out

    def _session_inspect(self, names: Sequence[str] | None, prefix: str) -> list[LockInfo]:
        rows: list[tuple[object, ...]] = []
        p = self.prefix
        if names is not None:
            targets = list(names)
        else:

            def listing() -> Generator[sq.Stmt, sq.Result, list[str]]:
                r = yield sq.Stmt(f"SELECT DISTINCT name FROM {p}_sessions WHERE SUBSTR(name, 1, %s) = %s",
                                  (len(prefix), prefix))  # fmt: skip
                return [str(x[0]) for x in r.rows]

            targets = self._tx(listing, tx=False)
        for name in targets:
            cond, args = self._session_alive_sql(name)

            def one(
                name: str = name, cond: str = cond, args: tuple[object, ...] = args
            ) -> Generator[sq.Stmt, sq.Result, list[tuple[object, ...]]]:
                r = yield sq.Stmt(
                    f"SELECT s.name, s.owner, s.mode, s.fence FROM {p}_sessions s WHERE s.name_key = %s AND {cond} "
                    "ORDER BY s.fence",
                    (sq.name_key(name), *args),
                )
                return r.rows

            rows.extend(self._tx(one, tx=False))
        by_name: dict[str, list[HolderInfo]] = {}
        kinds: dict[str, str] = {}
        for row_name, owner, mode, fence in rows:
            n = str(row_name)
            by_name.setdefault(n, []).append(HolderInfo(str(owner), int(str(fence)), str(mode), None))
            kinds[n] = sq.KIND_OF_MODE[str(mode)]
        return [LockInfo(n, kinds[n], tuple(hs), None) for n, hs in sorted(by_name.items())]

    def _session_break(self, name: str) -> bool:
        infos = self._session_inspect([name], "")
        if not infos:
            return False
        cond, args = self._session_alive_sql(name)

        def ids() -> Generator[sq.Stmt, sq.Result, list[tuple[str, int]]]:
            r = yield sq.Stmt(
                f"SELECT s.token, s.conn_id FROM {self.prefix}_sessions s WHERE s.name_key = %s AND {cond}",
                (sq.name_key(name), *args),
            )
            return [(str(t), int(str(c))) for t, c in r.rows]

        found = self._tx(ids, tx=False)
        for token, _ in found:
            pinned = self._unpin(token)
            if pinned is not None:
                self._close_quietly(pinned.conn)
                self.lost(token, "broken by an admin (break_lock)")
        self._kill([c for _, c in found])
        return bool(found)

    # -- the backend interface -------------------------------------------------------------------------
    def attempt(self, claim: Claim) -> SyncAttempt:
        if self.session:
            return SessionAttempt(self, claim)
        return LeaseAttempt(self, claim)

    def release(self, claim: Claim) -> bool:
        if self.session:
            return self._session_release(claim)
        key = sq.name_key(claim.name)
        ok: bool = self._tx(lambda: self.ops.release(claim, key))
        self._released([claim.token], key)
        return ok

    def renew(self, claims: Sequence[Claim]) -> list[bool]:
        if not claims:
            return []
        if self.session:
            return self._session_renew(claims)
        result: list[bool] = self._tx(lambda: self.ops.renew(claims))
        gone = [c.token for c, ok in zip(claims, result, strict=True) if not ok]
        if gone:
            self._forget_bells(gone)
        return result

    def _forget_bells(self, tokens: Sequence[str]) -> None:
        """Lease mode: holdings that ran out keep no companion lock (MySQL)."""

    def holds(self, claim: Claim) -> bool:
        if self.session:
            with self._pool_guard:
                pinned = self._pinned.get(claim.token)
            if pinned is None:
                return False
            try:
                return self._session_check(pinned, pinned.ttl)
            except Exception as exc:  # a dead connection holds nothing
                if not self._db_error(exc):
                    raise
                return False
        ok: bool = self._tx(lambda: self.ops.holds(claim), tx=False)
        return ok

    def inspect(self, name: str) -> LockInfo | None:
        if self.session:
            infos = self._session_inspect([name], "")
        else:
            infos = self._tx(lambda: self.ops.inspect([name]), tx=False)
        return infos[0] if infos else None

    def list(self, prefix: str) -> list[LockInfo]:
        if self.session:
            return self._session_inspect(None, prefix)
        infos: list[LockInfo] = self._tx(lambda: self.ops.inspect(None, prefix), tx=False)
        return infos

    def break_lock(self, name: str) -> bool:
        if self.session:
            return self._session_break(name)
        tokens: list[str] = self._tx(lambda: self.ops.break_lock(name))
        self._released(tokens, sq.name_key(name))
        for token in tokens:
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

    def close(self) -> None:
        with self._pool_guard:
            self._closed = True
            idle, self._idle = self._idle, []
            pinned, self._pinned = list(self._pinned.values()), {}
        for conn in idle:
            self._close_quietly(conn)
        for p in pinned:
            self._close_quietly(p.conn)


def session_timeout_seconds(ttl: float) -> int:
    """MySQL's ``wait_timeout`` is whole seconds (at least 1): the TTL rounded up."""
    return max(1, math.ceil(ttl))


def lease_slice(attempt: LeaseAttempt, grant: Grant, timeout: float | None, backoff: bool) -> float:
    return wait_slice(grant.retry_after, attempt.backoff.next_delay() if backoff else None, timeout, MAX_WAIT_SLICE)

# GENERATED from src/distlock/_async/backends/postgres.py by scripts/gen_sync.py: edit that file, not this one.
"""PostgreSQL: ``postgresql://user:password@host:5432/db`` (alias ``postgres://``), with psycopg 3.

Lease mode (default): the lease tables of ``_core/sql_lease.py``; a release, abandon or break sends
``NOTIFY <prefix>_wake, '<name key>'`` in its transaction, and each store keeps one ``LISTEN`` connection
that wakes its waiters of that name at once (delivered at commit). A waiter still re-checks at the
holder's lease end and at least every second, so a lost notification costs latency, never the lock.

Session mode (``?mode=session``): advisory locks, ``pg_advisory_lock(key)`` with key = the first 8 bytes of
SHA-256(name) as a signed bigint (``pg_advisory_lock_shared`` for rwlock readers), on a connection
pinned to the holding. ``idle_session_timeout`` of that connection is the TTL: the renewer's check keeps
it alive; a holder that stops renewing, dies or loses its connection loses the lock.

URL options: ``mode=lease|session``, ``table_prefix=distlock``, ``connect_timeout=10`` (seconds),
``call_timeout=5`` (seconds: the bound of every call, see below), and libpq's ``sslmode``,
``sslrootcert``, ``sslcert``, ``sslkey``. The database is the URL path.

Bounded calls: psycopg has no client-side read timeout, and TCP keepalives / ``tcp_user_timeout`` (both set)
only notice a peer that stops acknowledging, not one that acknowledges and never answers. Every call
therefore runs under a watchdog (``_sqlwatch``) that shuts the socket down at the call's deadline; the
connection is then closed, never reused. The server side bounds its own part: ``statement_timeout``,
``lock_timeout`` and ``idle_in_transaction_session_timeout`` are set on every connection.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import psycopg
import psycopg.errors

from ... import _pg_sync as pg
from ... import _rt_sync as rt
from ..._core import sql_lease as sq
from ..._core.types import Grant, Mode
from ..._errors import BackendError
from ..._given import given, pool_params
from ..._url import StoreConfig
from ._sql import SESSION_WAIT_SLICE, LeaseAttempt, RetryableError, SqlBackend, StaleConnection, lease_slice

_SSL_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey")


class Backend(SqlBackend):
    session_modes = frozenset({Mode.EXCLUSIVE, Mode.READ, Mode.WRITE})
    make_dialect = staticmethod(sq.postgres)
    # tables, indexes and sequences of the current schema: once they exist, opening a store runs no DDL
    existing_tables_sql = (
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema()"
    )
    schema_guard_sql = "SELECT pg_advisory_xact_lock(%s)"
    kill_sql = "SELECT pg_terminate_backend(%s)"

    def __init__(self, config: StoreConfig) -> None:
        pool = given(config)
        # A caller's pool lends its connection parameters only: distlock shuts down and discards a connection
        # whose call timed out, pins one per holding in session mode and sets server-side timeouts on its
        # connections, none of which may happen to the pool's. So it opens its own, and never closes the pool.
        from_pool = pool_params(pool) if pool is not None else {}
        super().__init__(config)
        self._ssl = {k: v for k in _SSL_OPTIONS if (v := config.pop(k)) is not None}
        config.reject_unknown()
        host, port = config.hosts[0]
        self._kwargs: dict[str, Any] = {
            "host": host,
            "port": port,
            "dbname": config.path.lstrip("/") or None,
            "user": config.username,
            "password": config.password,
            "connect_timeout": max(2, math.ceil(self.connect_timeout)),
            "application_name": "distlock",
            "autocommit": True,
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 3,
            "tcp_user_timeout": max(1000, math.ceil(self.call_timeout * 1000)),
            "options": f"-c statement_timeout={math.ceil((self.call_timeout + SESSION_WAIT_SLICE) * 1000)} "
            f"-c lock_timeout={math.ceil(self.call_timeout * 1000)} "
            f"-c idle_in_transaction_session_timeout={math.ceil(self.call_timeout * 2000)}",
            **self._ssl,
        }
        if from_pool:
            if config.password is None:
                self._kwargs["password"] = from_pool.get("password")
            for key in _SSL_OPTIONS:
                if key not in self._ssl and from_pool.get(key) is not None:
                    self._kwargs[key] = from_pool[key]
        self._listener: rt.Background | None = None
        self._listening = False

    # -- driver ------------------------------------------------------------------------------------------
    def _connect(self, session_ttl: float | None = None) -> Any:
        kwargs = dict(self._kwargs)
        kwargs["connect_timeout"] = max(2, math.ceil(self._connect_timeout()))  # libpq's minimum is 2 s
        try:
            return pg.connect(**{k: v for k, v in kwargs.items() if v is not None})
        except psycopg.Error as exc:
            raise self._error(f"cannot connect to {self.describe()}", exc) from exc

    def _close(self, conn: Any) -> None:
        conn.close()

    def _driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.Error)

    def _broken(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.LockNotAvailable)

    def _run(
        self, conn: Any, script: Generator[sq.Stmt, sq.Result, Any], tx: bool, deadline: float | None = None
    ) -> Any:
        try:
            return pg.guarded(conn, deadline, self._drive, conn, script, tx)
        finally:
            script.close()

    def _drive(self, conn: Any, script: Generator[sq.Stmt, sq.Result, Any], tx: bool) -> Any:
        cur: pg.Cursor = conn.cursor()
        started = False
        try:
            if tx:
                try:
                    cur.execute("BEGIN")
                except psycopg.OperationalError as exc:
                    raise StaleConnection(str(exc)) from exc
                started = True
            try:
                stmt = next(script)
                while True:
                    try:
                        cur.execute(stmt.sql, stmt.params)
                    except psycopg.OperationalError as exc:
                        if not tx and not started and conn.broken:
                            raise StaleConnection(str(exc)) from exc
                        raise
                    started = True
                    rows = cur.fetchall() if cur.description is not None else []
                    stmt = script.send(sq.Result(rows, cur.rowcount))
            except StopIteration as stop:
                result = stop.value
            if tx:
                cur.execute("COMMIT")
            return result
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
            self._rollback(conn, cur, tx)
            raise RetryableError(str(exc)) from exc
        except BaseException:
            self._rollback(conn, cur, tx)
            raise
        finally:
            script.close()
            if not conn.closed:
                cur.close()

    def _rollback(self, conn: Any, cur: pg.Cursor, tx: bool) -> None:
        if tx and not conn.closed and not conn.broken:
            try:
                cur.execute("ROLLBACK")
            except psycopg.Error:
                pass

    # -- lease-mode wake-ups: LISTEN/NOTIFY ----------------------------------------------------------------
    def _lease_wait(self, attempt: LeaseAttempt, grant: Grant, timeout: float | None) -> None:
        if self._listener is None or not self._listener.alive():
            self._listener = rt.Background(self._listen, name="distlock-postgres-listen")
        delay = lease_slice(attempt, grant, timeout, backoff=not self._listening)
        assert attempt.waker is not None
        if attempt.waker.wait(delay):
            attempt.backoff.reset()

    def _listen(self) -> None:
        failures = 0
        while not self._closed:
            conn: Any = None
            try:
                conn = pg.connect(**{k: v for k, v in self._kwargs.items() if v is not None})
                pg.guarded(conn, self._deadline(), conn.execute, f"LISTEN {self.ops.channel}")
                self._listening = True
                failures = 0
                idle = 0
                while not self._closed:
                    got = False
                    for note in conn.notifies(timeout=0.5):
                        got = True
                        self._wake(note.payload)
                    idle = 0 if got or self._watching() else idle + 1
                    if idle > 20:  # nobody has waited for ~10 s: stop listening, restart on demand
                        return
            except (psycopg.Error, OSError, BackendError):
                failures += 1
                self._listening = False
                rt.sleep(min(2.0, 0.05 * 2**failures))
                if failures > 3 and not self._watching():
                    return

            finally:
                self._listening = False
                if conn is not None:
                    try:
                        conn.close()
                    except psycopg.Error:
                        pass

    # -- session mode: advisory locks ----------------------------------------------------------------------
    def _session_call(self, conn: Any, stmt: sq.Stmt, wait: float = 0.0) -> list[list[tuple[Any, ...]]]:
        return pg.guarded(conn, self._deadline(wait), self._session_drive, conn, stmt)

    def _session_drive(self, conn: Any, stmt: sq.Stmt) -> list[list[tuple[Any, ...]]]:
        cur: pg.Cursor = conn.cursor()
        try:
            cur.execute(stmt.sql, stmt.params)
            return [cur.fetchall()] if cur.description is not None else []
        except psycopg.errors.LockNotAvailable:
            return []  # lock_timeout: not acquired this time
        except psycopg.OperationalError as exc:
            if conn.broken or conn.closed:
                raise StaleConnection(str(exc)) from exc
            raise
        finally:
            if not conn.closed:
                cur.close()

    def close(self) -> None:
        super().close()
        if self._listener is not None:
            self._listener.join(0.0)

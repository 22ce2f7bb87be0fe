# GENERATED from src/distlock/_async/backends/postgres/driver.py by scripts/gen_sync.py: edit that file, not this one.
"""psycopg 3 under every mode: connections, transactions, single statements, their bounds and errors.

Bounded calls: psycopg has no client-side read timeout, and TCP keepalives / ``tcp_user_timeout`` (both set)
only notice a peer that stops acknowledging, not one that acknowledges and never answers. Every call
therefore runs under a watchdog (``_sqlwatch``, through ``_pg_async.guarded``) that shuts the socket down at
the call's deadline; the connection is then closed, never reused. The server side bounds its own part:
``statement_timeout``, ``lock_timeout`` and ``idle_in_transaction_session_timeout`` are set on every
connection.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import psycopg
import psycopg.errors

from .... import _pg_sync as pg
from ...._core import sql_dialects as sd
from ...._core import sql_lease as sq
from ...._core.types import Mode
from ...._given import given, pool_params
from ...._url import StoreConfig
from ..sql.base import SESSION_WAIT_SLICE, RetryableError, SqlBase, StaleConnection

_SSL_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey")


class PgDriver(SqlBase):
    """The PostgreSQL dialect and the psycopg driver, for every mode (first base of each mode's class)."""

    #: advisory locks have a shared mode: rwlocks in session mode
    session_modes = frozenset({Mode.EXCLUSIVE, Mode.READ, Mode.WRITE})
    make_dialect = staticmethod(sd.postgres)
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

    # -- driver ------------------------------------------------------------------------------------------
    def _connect(self) -> Any:
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

    # -- single statements on a dedicated connection (session mode) -------------------------------------------------------------------
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

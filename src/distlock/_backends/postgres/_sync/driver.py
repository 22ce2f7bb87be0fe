# GENERATED from src/distlock/_backends/postgres/_async/driver.py by scripts/gen_sync.py: edit that file, not this one.
"""psycopg 3 under every mode: connections, transactions, single statements, their bounds and errors.

Bounded calls: psycopg has no client-side read timeout, and TCP keepalives / ``tcp_user_timeout`` (both set)
only notice a peer that stops acknowledging, not one that acknowledges and never answers. Every call
therefore runs under a watchdog (``pg.guarded``: a thread of ``sql/watchdog.py`` for the threaded API, a timer of
the connection on the event loop for asyncio) that shuts the socket down at the call's deadline; the
connection is then closed, never reused. The server side bounds its own part:
``statement_timeout``, ``lock_timeout``, ``idle_in_transaction_session_timeout`` and the server's TCP
keepalives are set on every connection, and a statement that takes a name's lock goes as one simple-protocol
Query (``query.py``), which the server reads whole before it runs any of it.

Connection poolers (PgBouncer): opening a store looks for one (``_detect_pooler``). A pooler answers the
startup message with its own cancel key, so the backend PID libpq was given differs from what
``pg_backend_pid()`` says; on a plain PostgreSQL the two are the same server process by construction, so
the check cannot misfire there. PgBouncer also refuses the ``options`` startup parameter that carries the
server-side timeouts: without it they are set with ``SET LOCAL`` in each transaction's first round trip
(no session state survives a pooler's transaction), and psycopg never prepares statements server-side
(``prepare_threshold=None``: a prepared statement lives on one server connection only). The pooling mode
is then found by behaviour (``_pooling_mode``), and ``_pooling_refusal`` says what the store's mode cannot
work through. Statement pooling refuses ``BEGIN``: there no transaction is ever opened
(``_drive_statements``); every statement is one simple-protocol Query through a client-side bound cursor
(``query.py``), its first statement the server-side timeouts (``set_config(..., true)``), and a ``batch``
statement several statements in that Query.
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg.errors

from ...._core.timing import monotonic
from ...._core.types import Mode
from ...._errors import ConfigError
from ...._given import given, pool_params
from ...._tls import one_line, pop_tls
from ...._url import StoreConfig
from ...sql import dialects as sd
from ...sql import stmt as st
from ...sql._sync.driver import SESSION_WAIT_SLICE, RetryableError, SqlDriver, StaleConnection
from .. import _driver_sync as pg
from .query import run_batch, run_prepared

if TYPE_CHECKING:
    from ...sql._sync.base import SqlBase

log = logging.getLogger("distlock")

_SSL_OPTIONS = ("sslmode", "sslrootcert", "sslcert", "sslkey")
#: distlock's common TLS option names (``_tls.py``) -> libpq's, accepted as well
_TLS_ALIASES = {"cafile": "sslrootcert", "certfile": "sslcert", "keyfile": "sslkey"}
#: the sslmodes that insist on TLS (prefer and allow fall back to plain text)
_SSLMODES_ON = ("require", "verify-ca", "verify-full")
#: a statement's result with rows
_TUPLES_OK = psycopg.pq.ExecStatus.TUPLES_OK
#: the pooling probe: which of two connections runs each ``pg_backend_pid()`` (see ``_pooling_mode``)
_PROBE_ORDER = (0, 1, 0, 0, 1, 1, 0, 1)


def ssl_options(config: StoreConfig) -> dict[str, str]:
    """libpq's TLS options from the URL: its own (``sslmode``, ``sslrootcert``, ``sslcert``, ``sslkey``) or the
    common ones (``_tls.py``; ``cafile`` is ``sslrootcert``...). ``tls=true`` means ``sslmode=verify-full``
    (``require`` with ``verify=false``) against ``cafile``, else the system's CAs, as every other backend
    verifies; a file option needs TLS on (``tls=true`` or an ``sslmode`` of require and above)."""
    sslmode = config.pop("sslmode")
    if sslmode is not None and "verify" in config.params:
        raise ConfigError("URL options sslmode and verify: give one (sslmode=require does not verify)",
                          backend=config.scheme)  # fmt: skip
    tls = pop_tls(config, on=sslmode in _SSLMODES_ON, aliases=_TLS_ALIASES)
    if tls is None:
        return {"sslmode": sslmode} if sslmode is not None else {}
    out = {"sslmode": sslmode or ("verify-full" if tls.verify else "require")}
    if tls.cafile:
        out["sslrootcert"] = tls.cafile
    elif out["sslmode"].startswith("verify") and psycopg.pq.version() >= 160000:
        out["sslrootcert"] = "system"  # libpq 16+: the system's CAs (its default is ~/.postgresql/root.crt)
    if tls.certfile:
        out["sslcert"] = tls.certfile
        out["sslkey"] = tls.keyfile or tls.certfile
    return out


#: the server's own TCP keepalives on our connections (startup ``options``; through a pooler they would set the
#: pooler's link, so they are not sent there): a client host that vanished ends its session after about 11 s
#: of silence (5 s idle, then 3 probes 2 s apart) instead of the server's default of about two hours. Its
#: session-mode locks go then; a lease-mode transaction never waits on the client while it holds a name's
#: lock (``query.run_batch``)
SERVER_KEEPALIVES = "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3"

#: how long a store sends no NOTIFY after the server refused one (its notification queue was full), before
#: it tries again (``LeaseOps.mute``)
NOTIFY_PAUSE = 5.0
#: a store says so in the log at most this often (seconds)
NOTIFY_WARN_EVERY = 60.0


def notify_queue_full(exc: BaseException) -> bool:
    """PostgreSQL refused a NOTIFY at COMMIT: "too many notifications in the NOTIFY queue" (SQLSTATE 54000,
    which other limits share: the message says which, and names NOTIFY in every translation)."""
    return isinstance(exc, psycopg.errors.ProgramLimitExceeded) and "notify" in str(exc).lower()


def refused_options(exc: BaseException) -> bool:
    """A pooler (PgBouncer) refusing the ``options`` startup parameter. PostgreSQL itself takes any startup
    parameter as a setting and never answers with this phrase."""
    return "startup parameter" in str(exc)


class PgDriver(SqlDriver):
    """The PostgreSQL dialect and the psycopg driver, for every mode (the mode object holds one)."""

    #: advisory locks have a shared mode: rwlocks in session mode
    session_modes = frozenset({Mode.EXCLUSIVE, Mode.READ, Mode.WRITE})
    #: the exclusive advisory lock's session may take the shared one at once, then let go of the exclusive one
    session_downgrade = True
    make_dialect = staticmethod(sd.postgres)
    # tables, indexes and sequences of the current schema: once they exist, opening a store runs no DDL
    existing_tables_sql = (
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema()"
    )
    schema_guard_sql = "SELECT pg_advisory_xact_lock(%s)"
    kill_sql = "SELECT pg_terminate_backend(%s)"
    gone_sql = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"

    def __init__(self, store: SqlBase, config: StoreConfig) -> None:
        pool = given(config)
        # A caller's pool lends its connection parameters only: distlock shuts down and discards a connection
        # whose call timed out, pins one per holding in session mode and sets server-side timeouts on its
        # connections, none of which may happen to the pool's. So it opens its own, and never closes the pool.
        from_pool = pool_params(pool) if pool is not None else {}
        super().__init__(store, config)
        self._ssl = ssl_options(config)
        config.reject_unknown()
        host, port = config.hosts[0]
        self._kwargs: dict[str, Any] = {
            "host": host,
            "port": port,
            "dbname": config.path.lstrip("/") or None,
            "user": config.username,
            "password": config.password,
            "connect_timeout": max(2, math.ceil(self.store.connect_timeout)),
            "application_name": "distlock",
            "autocommit": True,
            "keepalives": 1,
            "keepalives_idle": 5,
            "keepalives_interval": 2,
            "keepalives_count": 3,
            "tcp_user_timeout": max(1000, math.ceil(self.store.call_timeout * 1000)),
            "options": f"{self._timeouts()} {SERVER_KEEPALIVES}",
            **self._ssl,
        }
        #: what sits between this store and PostgreSQL, found at open (``SqlDriver.pooler``)
        self.pooler: str | None = None
        self._notify_warned = float("-inf")  # when this store last logged a refused NOTIFY
        #: the server takes our ``options`` startup parameter (a pooler may refuse it)
        self._options_ok = True
        self._begin = "BEGIN"
        #: the statements each direct connection keeps prepared for its tries (``query.run_prepared``): SQL -> name
        self._prepared: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
        #: each connection's server process, as it greeted us (kept: a closed connection no longer says)
        self._pids: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        if from_pool:
            if config.password is None:
                self._kwargs["password"] = from_pool.get("password")
            for key in _SSL_OPTIONS:
                if key not in self._ssl and from_pool.get(key) is not None:
                    self._kwargs[key] = from_pool[key]

    def _timeouts(self) -> str:
        """The server-side bounds of every call, as ``options`` (a pooler's transaction gets them with ``SET
        LOCAL``, or ``set_config`` in statement pooling)."""
        return (
            f"-c statement_timeout={math.ceil((self.store.call_timeout + SESSION_WAIT_SLICE) * 1000)} "
            f"-c lock_timeout={math.ceil(self.store.call_timeout * 1000)} "
            f"-c idle_in_transaction_session_timeout={math.ceil(self.store.call_timeout * 2000)}"
        )

    # -- driver ------------------------------------------------------------------------------------------
    def connect(self) -> Any:
        for _ in range(2):
            kwargs = dict(self._kwargs)
            limit = self.store._connect_timeout()
            kwargs["connect_timeout"] = max(2, math.ceil(limit))  # libpq's minimum is 2 s (pg.connect: the rest)
            if not self._options_ok:
                kwargs.pop("options")
            try:
                conn = pg.connect(limit, **{k: v for k, v in kwargs.items() if v is not None})
            except psycopg.Error as exc:
                if self._options_ok and refused_options(exc):
                    self._no_options()  # a pooler: connect without them, and bound each transaction instead
                    continue
                raise self.store._error(f"cannot connect to {self.store.describe()}", exc) from exc
            if not self._options_ok or self.pooler is not None:
                conn.prepare_threshold = None
            self._pids[conn] = conn.info.backend_pid  # from the greeting: no round trip
            return conn
        raise AssertionError("unreachable")

    def _no_options(self) -> None:
        self._options_ok = False
        self._begin = "BEGIN; " + "; ".join(
            f"SET LOCAL {part.removeprefix('-c ').strip()}" for part in self._timeouts().split(" -c ")
        )

    # -- connection poolers ------------------------------------------------------------------------------------
    def prepare(self) -> None:
        self._detect_pooler()
        if self.pooler is not None and (why := self._pooling_refusal(self.pooler)):
            raise ConfigError(
                f"{self.store.describe()} is a connection pooler (PgBouncer or alike) in {self.pooler} pooling: {why}",
                backend=self.store.scheme,
            )

    def _pooling_refusal(self, mode: str) -> str | None:
        """Why the store's mode cannot work through a pooler in ``mode`` pooling, or None if it can. The lease
        mode works through every pooling; the session mode (``SqlBase.pins_connections``) only through a
        pooler that keeps each client connection's server connection."""
        if not self.store.pins_connections or mode == "session":
            return None
        return (
            "session mode's advisory lock belongs to the server connection, which this pooling hands to other "
            "clients after each transaction (the lock would be stranded or shared); use mode=lease, which works "
            "through it, or connect to PostgreSQL directly"
        )

    def connection_id(self, conn: Any) -> int | None:
        # through a pooler, the greeting's process id is the pooler's cancel key, no server process
        return None if self.pooler is not None or not self._options_ok else self._pids.get(conn)

    def _pid(self, conn: Any) -> int:
        cur = pg.guarded(conn, self.store._deadline(), conn.execute, "SELECT pg_backend_pid()")
        row = cur.fetchone()
        return int(row[0])

    def _detect_pooler(self) -> None:
        conns = [self.connect()]
        try:
            try:
                if self._pid(conns[0]) == conns[0].info.backend_pid and self._options_ok:
                    # PostgreSQL itself: the process that answers is the one that greeted us. The connection
                    # joins the pool (the schema check that follows uses it: opening costs no extra connect)
                    self.store._adopt(conns.pop())
                    return
                if self._options_ok:  # a pooler that ignores ``options`` (ignore_startup_parameters)
                    self._no_options()
                conns[0].prepare_threshold = None
                conns.append(self.connect())
                self.pooler = self._pooling_mode(conns[0], conns[1])
            except psycopg.Error as exc:
                raise self.store._error(f"cannot probe {self.store.describe()}", exc) from exc
        finally:
            for conn in conns:
                self.store._close_quietly(conn)

    def _pooling_mode(self, a: Any, b: Any) -> str:
        """Session pooling gives each client connection one server connection for its life: two open client
        connections each always see their own PID, and never each other's. Transaction and statement pooling
        hand a server connection back after each transaction: the next statement of either client takes an
        idle one, by default the one just released (LIFO; or the next in turn with server_round_robin), so
        the PIDs mix. The order below catches both reuse orders; seeing session pooling where there is none
        would take another client taking each released server connection in step with the probe."""
        seen: tuple[set[int], set[int]] = (set(), set())
        for i in _PROBE_ORDER:
            seen[i].add(self._pid((a, b)[i]))
        try:  # statement pooling ends the client connection at a transaction left open
            pg.guarded(b, self.store._deadline(), b.execute, "BEGIN")
            pg.guarded(b, self.store._deadline(), b.execute, "ROLLBACK")
        except psycopg.OperationalError as exc:
            if "statement pooling" in str(exc):
                return "statement"
            raise
        if len(seen[0]) == 1 and len(seen[1]) == 1 and seen[0] != seen[1]:
            return "session"
        return "transaction"

    def close(self, conn: Any) -> None:
        conn.close()

    def driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.Error)

    def broken(self, exc: BaseException) -> bool:
        return isinstance(exc, psycopg.OperationalError) and not isinstance(exc, psycopg.errors.LockNotAvailable)

    def run(
        self, conn: Any, script: Generator[st.Stmt, st.Result, Any], tx: bool, deadline: float | None = None
    ) -> Any:
        try:
            return pg.guarded(conn, deadline, self._drive, conn, script, tx)
        finally:
            script.close()

    def _drive(self, conn: Any, script: Generator[st.Stmt, st.Result, Any], tx: bool) -> Any:
        if self.pooler == "statement":
            return self._drive_statements(conn, script)
        cur: pg.Cursor = conn.cursor()
        started = False
        try:
            if tx:
                try:
                    cur.execute(self._begin)
                except psycopg.OperationalError as exc:
                    raise StaleConnection(str(exc)) from exc
                started = True
            try:
                stmt = next(script)
                while True:
                    try:
                        if stmt.batch is not None and stmt.parts and self.pooler is None:
                            answer = run_prepared(conn, stmt, self._prepared.setdefault(conn, {}))
                        elif stmt.batch is not None:  # several statements: one Query, client-side binding
                            answer = run_batch(conn, stmt)
                        else:
                            cur.execute(stmt.sql, stmt.params)
                    except psycopg.OperationalError as exc:
                        if not tx and not started and conn.broken:
                            raise StaleConnection(str(exc)) from exc
                        raise
                    started = True
                    if stmt.batch is None:
                        answer = st.Result(cur.fetchall() if cur.description is not None else [], cur.rowcount)
                    stmt = script.send(answer)
            except StopIteration as stop:
                result = stop.value
            if tx:
                cur.execute("COMMIT")
            return result
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
            self._rollback(conn, cur, tx)
            raise RetryableError(str(exc)) from exc
        except psycopg.errors.ProgramLimitExceeded as exc:
            self._rollback(conn, cur, tx)
            raise self._refused_notify(exc) from exc
        except BaseException:
            self._rollback(conn, cur, tx)
            raise
        finally:
            script.close()
            if not conn.closed:
                cur.close()

    def _statement_bounds(self) -> str:
        """Statement pooling: the server-side timeouts as the first statement of every Query (``SET LOCAL``
        needs a transaction block; ``set_config(..., true)`` lasts the implicit transaction)."""
        parts = [part.removeprefix("-c ").strip().split("=") for part in self._timeouts().split(" -c ")]
        calls = ", ".join(
            f"set_config('{k}', '{v}', true)" for k, v in parts if k != "idle_in_transaction_session_timeout"
        )
        return f"SELECT {calls}; "

    def _drive_statements(self, conn: Any, script: Generator[st.Stmt, st.Result, Any]) -> Any:
        """Statement pooling (lease mode, ``AutocommitOps``): no BEGIN; each statement runs on its own, in
        autocommit, and a ``batch`` one as one simple-protocol Query of several statements (a client-side
        bound cursor), one implicit transaction. Every Query starts with the server-side timeouts."""
        bounds = self._statement_bounds()
        sent = False
        try:
            stmt = next(script)
            while True:
                try:
                    answer = run_batch(conn, stmt, bounds)
                except psycopg.OperationalError as exc:
                    if not sent and conn.broken:
                        raise StaleConnection(str(exc)) from exc
                    raise
                sent = True
                stmt = script.send(answer)
        except StopIteration as stop:
            return stop.value
        except (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure) as exc:
            raise RetryableError(str(exc)) from exc
        except psycopg.errors.ProgramLimitExceeded as exc:
            raise self._refused_notify(exc) from exc
        finally:
            script.close()

    def _refused_notify(self, exc: psycopg.errors.ProgramLimitExceeded) -> Exception:
        """What a statement refused with SQLSTATE 54000 becomes. A full NOTIFY queue: the store stops
        notifying for ``NOTIFY_PAUSE`` seconds, and the operation runs again without (a RetryableError: its
        transaction was rolled back, and each script is safe to run again from its start). Anything else
        stays the error it is."""
        if not notify_queue_full(exc):
            return exc
        now = monotonic()
        if now - self._notify_warned >= NOTIFY_WARN_EVERY:  # a queue stays full for as long as nobody acts
            self._notify_warned = now
            log.warning(
                "PostgreSQL refused a NOTIFY (%s): for %.0f s this store releases without waking waiters elsewhere "
                "(they look again at least every second). A LISTEN session that stopped reading holds the queue: "
                "see pg_notification_queue_usage() and the server log, which names its process",
                one_line(exc.diag.message_primary or str(exc)), NOTIFY_PAUSE,
            )  # fmt: skip
        self.store.ops.mute(NOTIFY_PAUSE)
        return RetryableError(str(exc))

    def _rollback(self, conn: Any, cur: pg.Cursor, tx: bool) -> None:
        if tx and not conn.closed and not conn.broken:
            try:
                cur.execute("ROLLBACK")
            except psycopg.Error:
                pass

    # -- single statements on a dedicated connection (session mode) -------------------------------------------------------------------
    def session_call(
        self, conn: Any, stmt: st.Stmt, wait: float = 0.0, ok: bool = False
    ) -> list[list[tuple[Any, ...]]]:
        return pg.guarded(conn, self.store._deadline(wait), self._session_drive, conn, stmt)

    def _session_drive(self, conn: Any, stmt: st.Stmt) -> list[list[tuple[Any, ...]]]:
        cur: pg.Cursor = conn.cursor()
        try:
            cur.execute(stmt.sql, stmt.params)
            # the result's status, not ``cur.description``, which builds a Column object per column at each
            # read: a tenth of the client's time per call here
            res = cur.pgresult
            return [cur.fetchall()] if res is not None and res.status == _TUPLES_OK else []
        except psycopg.errors.LockNotAvailable:
            return []  # lock_timeout: not acquired this time
        except psycopg.OperationalError as exc:
            if conn.broken or conn.closed:
                raise StaleConnection(str(exc)) from exc
            raise
        finally:
            if not conn.closed:
                cur.close()

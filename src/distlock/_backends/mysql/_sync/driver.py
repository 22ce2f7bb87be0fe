# GENERATED from src/distlock/_backends/mysql/_async/driver.py by scripts/gen_sync.py: edit that file, not this one.
"""PyMySQL (sync) and aiomysql (asyncio) under every mode: connections, transactions, single statements,
their bounds and errors.

The two drivers speak the same protocol code (aiomysql is PyMySQL's on asyncio streams) and raise the same
exception classes; ``../_driver_async.py`` / ``_driver_sync.py`` hold the little that differs, so this file is the one
source of both sides.

Bounded calls: every call ends at its deadline (``call_timeout=5`` seconds, plus the server-side wait a
blocking statement makes on purpose, or the context's tighter budget): ``my.call``. ``innodb_lock_wait_timeout``
and ``lock_wait_timeout`` bound row-lock and metadata-lock waits on the server. A connection whose call
timed out or was cancelled is closed, never reused.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pymysql.constants.CLIENT
import pymysql.err

from .... import _rt_sync as rt
from ...._tls import pop_tls
from ...._url import StoreConfig
from ...sql import dialects as sd
from ...sql import names as sn
from ...sql import stmt as st
from ...sql._sync.driver import IDLE_IN_TX_SLACK, SESSION_WAIT_SLICE, RetryableError, SqlDriver, StaleConnection
from .. import _driver_sync as my

if TYPE_CHECKING:
    from ...sql._sync.base import SqlBase

#: server error codes: deadlock, lock wait timeout (re-run the transaction)
_RETRY_CODES = {1213, 1205}
#: a row lock that was not granted in time (lock wait timeout; MySQL 8's NOWAIT)
_LOCK_TIMEOUT_CODES = {1205, 3572}
#: distlock's common TLS option names (``_tls.py``) -> PyMySQL's, accepted as well
_TLS_ALIASES = {"tls": "ssl", "cafile": "ssl_ca", "certfile": "ssl_cert", "keyfile": "ssl_key", "verify": "ssl_verify"}
#: the end of every transaction, which also lets go of the name's GET_LOCK (pool connections hold no other
#: named lock)
_COMMIT = "COMMIT; DO RELEASE_ALL_LOCKS()"
#: sent after a transaction's end, in its round trip: the session's idle timeout as it was before BEGIN
#: (``MyDriver._begin``)
_IDLE_BACK = f"SET SESSION wait_timeout = {sd.MYSQL_IDLE_BEFORE}"
#: client error codes of a connection that is gone
_GONE_CODES = {2003, 2006, 2013, 2055, 1927, 4031}


@dataclass
class Lead:
    """Statements sent in front of a script's first statement, in its round trip (a waiter's bell wait in
    front of its try, ``mysql/lease_mode.py``): ``count`` statements, the rows of the last one that has rows
    kept in ``rows``."""

    sql: str
    params: tuple[object, ...]
    count: int
    rows: list[tuple[Any, ...]] = field(default_factory=list)


@dataclass(eq=False)  # compared and hashed by identity: the session mode keys what it knows of each by it
class MyConn:
    """A driver connection and the mutex that keeps two callers from using it at once (a session-mode
    holding's renewal and its release; a close while a call runs)."""

    conn: my.Connection
    mutex: rt.Mutex = field(default_factory=rt.Mutex)
    wait_timeout: int | None = None  # session mode: the idle timeout last set on this connection
    conn_id: int | None = None  # the server's CONNECTION_ID() of it


class MyDriver(SqlDriver):
    """The MySQL/MariaDB dialect and the driver, for every mode (the mode object holds one)."""

    make_dialect = staticmethod(sd.mysql)
    schema_sql = "DATABASE()"
    existing_tables_sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
    kill_sql = "KILL CONNECTION %s"
    gone_sql = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s"

    def __init__(self, store: SqlBase, config: StoreConfig) -> None:
        super().__init__(store, config)
        # PyMySQL's own names are aliases of the common ones, and keep its meaning: ssl_ca/ssl_cert turn TLS on
        tls = pop_tls(
            config, on=bool(config.params.get("ssl_ca") or config.params.get("ssl_cert")), aliases=_TLS_ALIASES
        )
        ssl_ctx = tls.context() if tls is not None else None
        unix_socket = config.pop("unix_socket")
        config.reject_unknown()
        host, port = config.hosts[0]
        self._kwargs: dict[str, Any] = {
            "host": host,
            "port": port,
            "user": config.username or "",
            "password": config.password or "",
            "database": config.path.lstrip("/") or None,
            "read_timeout": self.store.call_timeout + SESSION_WAIT_SLICE,
            "autocommit": True,
            "charset": "utf8mb4",
            "ssl": ssl_ctx,
            "unix_socket": unix_socket,
            "client_flag": pymysql.constants.CLIENT.MULTI_STATEMENTS,
        }
        #: seconds the server waits for this client inside a transaction (whole seconds, at least 1): see
        #: ``_begin``
        self.idle_in_tx = max(1, math.ceil(self.store.call_timeout + IDLE_IN_TX_SLACK))
        #: what a transaction starts with, in its first round trip: BEGIN, and the session's idle timeout
        #: (``wait_timeout``, kept in ``@distlock_idle`` and put back in the round trip that ends it) cut to
        #: ``idle_in_tx`` while it lasts. A lease-mode acquire holds the name's GET_LOCK between its two round
        #: trips: a client whose link went silent there kept it, and every other client was refused the name,
        #: until the server's wait_timeout (8 hours by default) or TCP gave up. MariaDB's
        #: ``idle_transaction_timeout``, where a DBA set one, takes precedence over it inside a transaction
        self._begin = (
            # saved once per session: a transaction that failed before its end put back cannot leave the
            # cut value to be saved as the session's own
            "BEGIN; SET @distlock_idle = CAST(COALESCE(@distlock_idle, @@session.wait_timeout) AS UNSIGNED), "
            "SESSION wait_timeout = "
            f"{self.idle_in_tx}; "
        )

    def prepare(self) -> None:
        r: st.Result = self.store._tx(lambda: st.single(st.Stmt("SELECT VERSION()")), tx=False)
        self.store.fast_session = has_sequences(str(r.rows[0][0]))
        self.store.ops.sequences = self.store.fast_session

    def timeout_change(self, conn: Any, ttl: float) -> float | None:
        """Session mode: ``wait_timeout`` is set with the next statement only when it changes."""
        seconds = session_timeout_seconds(ttl)
        if conn.wait_timeout == seconds:
            return None
        conn.wait_timeout = seconds
        return ttl

    # -- driver ------------------------------------------------------------------------------------------
    def connect(self) -> MyConn:
        limit = self.store._connect_timeout()
        conn: my.Connection | None = None
        try:
            conn = my.connect(limit, **{k: v for k, v in self._kwargs.items() if v is not None})
            # row-lock and metadata-lock waits end on the server when the call does (the default metadata
            # wait is a day: a schema change left waiting would queue every later statement on its table)
            # and a packet the server reads or writes mid-statement gets as long as a transaction's idle
            # time (the defaults, 30 s and 60 s, would let a silent link hold what the statement locked)
            wait = max(1, math.ceil(self.store.call_timeout))
            idle = self.idle_in_tx
            conn_id = my.call(
                conn,
                self.store._deadline(),
                first_value,
                conn,
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; "
                f"SET time_zone = '+00:00', innodb_lock_wait_timeout = {wait}, lock_wait_timeout = {wait}, "
                f"net_read_timeout = {idle}, net_write_timeout = {idle}; SELECT CONNECTION_ID()",
            )
        except pymysql.err.MySQLError as exc:
            if conn is not None:
                my.cut(conn)  # a half-set-up connection is not kept (nor left to the garbage collector)
                my.close(conn)
            raise self.store._error(f"cannot connect to {self.store.describe()}", exc) from exc
        return MyConn(conn, conn_id=None if conn_id is None else int(conn_id))

    def connection_id(self, conn: Any) -> int | None:
        c: MyConn = conn
        return c.conn_id

    def close(self, conn: Any) -> None:
        c: MyConn = conn
        if not rt.acquire_within(c.mutex, 0):  # a call is still running on it: end that call
            my.cut(c.conn)
            return  # that call fails now; the connection is dropped with it
        try:
            my.close(c.conn)
        finally:
            c.mutex.release()

    def driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, pymysql.err.MySQLError)

    def broken(self, exc: BaseException) -> bool:
        if isinstance(exc, pymysql.err.InterfaceError):
            return True
        return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in _GONE_CODES

    def run(
        self,
        conn: Any,
        script: Generator[st.Stmt, st.Result, Any],
        tx: bool,
        deadline: float | None = None,
        lead: Lead | None = None,
    ) -> Any:
        c: MyConn = conn
        try:
            with c.mutex:
                return my.call(c.conn, deadline, self._drive, c, script, tx, lead)
        finally:
            script.close()

    def _drive(
        self, c: MyConn, script: Generator[st.Stmt, st.Result, Any], tx: bool, lead: Lead | None = None
    ) -> Any:
        cur = my.cursor(c.conn)
        started = False
        own = False  # a batch that opened its own transaction (and may hold the name's GET_LOCK)
        # BEGIN goes in one round trip with the script's first statement (a multi-statement): every
        # transaction here is short, and its first round trip was BEGIN's alone (a tenth of a try)
        begin = self._begin if tx else ""
        ended = False  # the COMMIT went with the script's last statement (``Stmt.last``)
        committed = False  # no transaction is open: ``ended``, or a statement that commits itself (``Stmt.commits``)
        try:
            try:
                stmt = next(script)
                while True:
                    if ended:
                        raise RuntimeError("a script went on after its last statement")
                    own = own or stmt.batch is not None
                    # and the COMMIT with the last one, in the same round trip
                    end = f"; {stmt.commit or _COMMIT}; {_IDLE_BACK}" if tx and stmt.last else ""
                    sql, params = begin + stmt.sql + end, stmt.params
                    if lead is not None and not started:
                        sql, params = f"{lead.sql}; {sql}", (*lead.params, *params)
                    try:
                        cur.execute(sql, params or None)
                        ended = bool(end)
                        committed = ended or stmt.commits
                        if lead is not None and not started:  # past the lead's answers, keeping its rows
                            for _ in range(lead.count):
                                if cur.description is not None:
                                    lead.rows = list(cur.fetchall())
                                cur.nextset()
                        for _ in range(begin.count(";")):  # past BEGIN's answers, to the statement's own
                            cur.nextset()
                        # after a statement that committed itself, a script that goes on opens another
                        begin = self._begin if tx and stmt.commits and not ended else ""
                    except pymysql.err.MySQLError as exc:
                        if not started and self.broken(exc):
                            raise StaleConnection(str(exc)) from exc
                        raise
                    started = True
                    rows = list(cur.fetchall()) if cur.description is not None else []
                    count = cur.rowcount
                    while cur.nextset():  # a batch: the answer is its last result set
                        if cur.description is not None:
                            rows, count = list(cur.fetchall()), cur.rowcount
                    stmt = script.send(st.Result(rows, count))
            except StopIteration as stop:
                result = stop.value
            if tx and not committed:
                execute(c.conn, f"{_COMMIT}; {_IDLE_BACK}")
            return result
        except pymysql.err.OperationalError as exc:
            self._rollback(c, tx or own, exc)
            if exc.args and exc.args[0] in _RETRY_CODES:
                raise RetryableError(str(exc)) from exc
            raise
        except BaseException as exc:
            self._rollback(c, tx or own, exc)
            raise
        finally:
            if my.is_open(c.conn):
                cur.close()

    def _rollback(self, c: MyConn, tx: bool, exc: BaseException) -> None:
        if not tx or not my.is_open(c.conn):
            return
        if not isinstance(exc, Exception):  # cancelled or interrupted mid-call: where the protocol is, unknown
            my.cut(c.conn)
            return
        try:
            execute(c.conn, f"ROLLBACK; DO RELEASE_ALL_LOCKS(); {_IDLE_BACK}")
        except (pymysql.err.Error, OSError):
            # the name's GET_LOCK may still be held: end the connection (the server releases it), so it
            # is never given back to the pool holding it
            my.cut(c.conn)

    def lock_name_refused(self, name: str) -> str | None:
        return sn.get_lock_refused(name)

    # -- single statements on a dedicated connection (session mode) -----------------------------------------
    def session_call(
        self, conn: Any, stmt: st.Stmt, wait: float = 0.0, ok: bool = False
    ) -> list[list[tuple[Any, ...]]]:
        c: MyConn = conn
        with c.mutex:
            try:
                return my.call(
                    c.conn, self.store._deadline(wait), result_sets, c.conn, stmt.sql, stmt.params, ok
                )
            except pymysql.err.OperationalError as exc:
                if self.broken(exc):
                    raise StaleConnection(str(exc)) from exc
                if exc.args and exc.args[0] in _LOCK_TIMEOUT_CODES:  # row lock not granted (NOWAIT / WAIT n)
                    my.call(c.conn, self.store._deadline(), execute, c.conn, "ROLLBACK")
                    return []
                raise
            except pymysql.err.InterfaceError as exc:
                raise StaleConnection(str(exc)) from exc


def execute(conn: my.Connection, sql: str, params: Any = None) -> None:
    """Run ``sql`` (one or more statements) and read every answer."""
    result_sets(conn, sql, params)


def result_sets(
    conn: my.Connection, sql: str, params: Any = None, ok: bool = False
) -> list[list[tuple[Any, ...]]]:
    """Run ``sql`` (one or more statements): the rows of each answer that has rows; with ``ok``, a last
    statement without rows answers (rows changed, ``LAST_INSERT_ID``) as one more set."""
    sets: list[list[tuple[Any, ...]]] = []
    cur = my.cursor(conn)
    cur.execute(sql, params or None)
    while True:
        rows = cur.description is not None
        if rows:
            sets.append(list(cur.fetchall()))
        if not cur.nextset():
            break
    if ok and not rows:
        sets.append([(cur.rowcount, cur.lastrowid)])
    return sets


def first_value(conn: my.Connection, sql: str, params: Any = None) -> Any:
    """Run ``sql``: the first column of the first row of its first answer with rows (None if it has none)."""
    sets = result_sets(conn, sql, params)
    return sets[0][0][0] if sets and sets[0] else None


def has_sequences(version: str) -> bool:
    """MariaDB >= 10.5 has SEQUENCE, Aria and INSERT/REPLACE ... RETURNING (the one-statement session acquire).
    Public so that a test can play a server without them (MySQL 8, older MariaDB) on a MariaDB it runs."""
    if "mariadb" not in version.lower():
        return False
    try:
        major, minor = (int(x) for x in version.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (10, 5)


def session_timeout_seconds(ttl: float) -> int:
    """MySQL's ``wait_timeout`` is whole seconds (at least 1): the TTL rounded up."""
    return max(1, math.ceil(ttl))

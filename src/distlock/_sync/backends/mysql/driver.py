# GENERATED from src/distlock/_async/backends/mysql/driver.py by scripts/gen_sync.py: edit that file, not this one.
"""PyMySQL under every mode: connections, transactions, single statements, their bounds and errors.

PyMySQL blocks: on the async side every call runs in a worker thread of the backend's own pool
(``rt.offload(pool=POOL)``): waiters block in server-side waits (``GET_LOCK`` with a timeout) and must not
starve the short calls (a release) of threads. A cancelled call on a connection shuts its socket down (the
call fails at once; the connection is then discarded).

Bounded calls: PyMySQL's socket timeouts are set per call to what is left of the call's deadline
(``call_timeout=5`` seconds, plus the server-side wait a blocking statement makes on purpose), and
``innodb_lock_wait_timeout`` and ``lock_wait_timeout`` bound row-lock and metadata-lock waits on the
server. A connection whose call timed out or was cancelled is closed, never reused (on the async side its
worker thread ends at the socket timeout).
"""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import pymysql
import pymysql.constants.CLIENT
import pymysql.err

from .... import _rt_sync as rt
from ...._core import sql_dialects as sd
from ...._core import sql_lease as sq
from ...._core.timing import monotonic
from ...._tls import pop_tls
from ...._url import StoreConfig
from ..sql.base import SESSION_WAIT_SLICE, RetryableError, SqlBase, StaleConnection

#: server error codes: deadlock, lock wait timeout (re-run the transaction)
_RETRY_CODES = {1213, 1205}
#: a row lock that was not granted in time (lock wait timeout; MySQL 8's NOWAIT)
_LOCK_TIMEOUT_CODES = {1205, 3572}
#: distlock's common TLS option names (``_tls.py``) -> PyMySQL's, accepted as well
_TLS_ALIASES = {"tls": "ssl", "cafile": "ssl_ca", "certfile": "ssl_cert", "keyfile": "ssl_key", "verify": "ssl_verify"}
#: the worker pool of every PyMySQL call (see the module docstring)
POOL = "mysql"
#: the end of every transaction, which also lets go of the name's GET_LOCK (pool connections hold no other
#: named lock)
_COMMIT = "COMMIT; DO RELEASE_ALL_LOCKS()"
#: client error codes of a connection that is gone
_GONE_CODES = {2003, 2006, 2013, 2055, 1927, 4031}


@dataclass
class MyConn:
    """A PyMySQL connection and the lock that keeps two threads from using it at once."""

    conn: pymysql.connections.Connection[Any]
    guard: threading.Lock = field(default_factory=threading.Lock)
    wait_timeout: int | None = None  # session mode: the idle timeout last set on this connection


class MyDriver(SqlBase):
    """The MySQL/MariaDB dialect and the PyMySQL driver, for every mode (first base of each mode's class)."""

    make_dialect = staticmethod(sd.mysql)
    schema_sql = "DATABASE()"
    existing_tables_sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
    kill_sql = "KILL CONNECTION %s"

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
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
            "connect_timeout": self.connect_timeout,
            "read_timeout": self.call_timeout + SESSION_WAIT_SLICE,
            "write_timeout": self.call_timeout + SESSION_WAIT_SLICE,
            "autocommit": True,
            "charset": "utf8mb4",
            "ssl": ssl_ctx,
            "unix_socket": unix_socket,
            "client_flag": pymysql.constants.CLIENT.MULTI_STATEMENTS,
        }

    def _prepare(self) -> None:
        r: sq.Result = self._tx(lambda: sq.single(sq.Stmt("SELECT VERSION()")), tx=False)
        self.fast_session = has_sequences(str(r.rows[0][0]))
        self.ops.sequences = self.fast_session
        super()._prepare()

    def _timeout_change(self, conn: Any, ttl: float) -> float | None:
        """Session mode: ``wait_timeout`` is set with the next statement only when it changes."""
        seconds = session_timeout_seconds(ttl)
        if conn.wait_timeout == seconds:
            return None
        conn.wait_timeout = seconds
        return ttl

    # -- driver ------------------------------------------------------------------------------------------
    def _connect_blocking(self) -> MyConn:
        kwargs = {k: v for k, v in self._kwargs.items() if v is not None}
        limit = self._connect_timeout()
        kwargs["connect_timeout"] = limit
        kwargs["read_timeout"] = kwargs["write_timeout"] = min(limit, self.call_timeout + SESSION_WAIT_SLICE)
        conn: pymysql.connections.Connection[Any] | None = None
        try:
            if "unix_socket" in kwargs:
                conn = pymysql.connect(**kwargs, defer_connect=True)
                _connect_unix(conn, kwargs["unix_socket"], limit)
            else:
                conn = pymysql.connect(**kwargs)  # the handshake is read with read_timeout: bounded by the limit
            conn._read_timeout = conn._write_timeout = self.call_timeout + SESSION_WAIT_SLICE
            with conn.cursor() as cur:
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                # row-lock and metadata-lock waits end on the server when the call does (the default metadata
                # wait is a day: a schema change left waiting would queue every later statement on its table)
                wait = max(1, math.ceil(self.call_timeout))
                cur.execute(f"SET time_zone = '+00:00', innodb_lock_wait_timeout = {wait}, lock_wait_timeout = {wait}")
        except pymysql.err.MySQLError as exc:
            if conn is not None and conn.open:
                conn._force_close()  # a half-set-up connection is not kept (nor left to the garbage collector)
            raise self._error(f"cannot connect to {self.describe()}", exc) from exc
        return MyConn(conn)

    def _connect(self) -> Any:
        return rt.offload(self._connect_blocking, pool=POOL)

    def _close(self, conn: Any) -> None:
        rt.offload(self._close_blocking, conn, pool=POOL)

    @staticmethod
    def _close_blocking(c: MyConn) -> None:
        if not c.guard.acquire(blocking=False):  # a worker thread is still in a call on it: end that call
            shut_down(c)
            return  # that thread's call fails now; the connection is dropped with it
        try:
            c.conn.close()
        except pymysql.err.Error:
            pass
        except OSError:
            pass
        finally:
            c.guard.release()

    @staticmethod
    def _bound(c: MyConn, deadline: float | None) -> None:
        """Socket timeouts of the next reads and writes: what is left until ``deadline``."""
        if deadline is None:
            return
        left = max(0.05, deadline - monotonic())
        c.conn._read_timeout = left  # PyMySQL applies it to the socket before each read / write
        c.conn._write_timeout = left

    def _driver_error(self, exc: BaseException) -> bool:
        return isinstance(exc, pymysql.err.MySQLError)

    def _broken(self, exc: BaseException) -> bool:
        if isinstance(exc, pymysql.err.InterfaceError):
            return True
        return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in _GONE_CODES

    def _run(
        self, conn: Any, script: Generator[sq.Stmt, sq.Result, Any], tx: bool, deadline: float | None = None
    ) -> Any:
        return rt.offload(self._drive, conn, script, tx, deadline, interrupt=lambda: shut_down(conn), pool=POOL)

    def _drive(self, c: MyConn, script: Generator[sq.Stmt, sq.Result, Any], tx: bool, deadline: float | None) -> Any:
        with c.guard:
            self._bound(c, deadline)
            cur = c.conn.cursor()
            started = False
            own = False  # a batch that opened its own transaction (and may hold the name's GET_LOCK)
            # BEGIN goes in one round trip with the script's first statement (a multi-statement): every
            # transaction here is short, and its first round trip was BEGIN's alone (a tenth of a try)
            begin = "BEGIN; " if tx else ""
            committed = False  # the COMMIT went with the script's last statement (``Stmt.last``)
            try:
                try:
                    stmt = next(script)
                    while True:
                        if committed:
                            raise RuntimeError("a script went on after its last statement")
                        own = own or stmt.batch is not None
                        # and the COMMIT with the last one, in the same round trip
                        end = "; " + _COMMIT if tx and stmt.last else ""
                        try:
                            cur.execute(begin + stmt.sql + end, stmt.params or None)
                            committed = bool(end)
                            if begin:  # past BEGIN's answer, to the statement's own
                                cur.nextset()
                                begin = ""
                        except pymysql.err.MySQLError as exc:
                            if not started and self._broken(exc):
                                raise StaleConnection(str(exc)) from exc
                            raise
                        started = True
                        rows = list(cur.fetchall()) if cur.description is not None else []
                        count = cur.rowcount
                        while cur.nextset():  # a batch: the answer is its last result set
                            if cur.description is not None:
                                rows, count = list(cur.fetchall()), cur.rowcount
                        stmt = script.send(sq.Result(rows, count))
                except StopIteration as stop:
                    result = stop.value
                if tx and not committed:
                    cur.execute(_COMMIT)
                    while cur.nextset():
                        pass
                return result
            except pymysql.err.OperationalError as exc:
                self._rollback(c, tx or own)
                if exc.args and exc.args[0] in _RETRY_CODES:
                    raise RetryableError(str(exc)) from exc
                raise
            except BaseException:
                self._rollback(c, tx or own)
                raise
            finally:
                script.close()
                cur.close()

    def _rollback(self, c: MyConn, tx: bool) -> None:
        if tx and c.conn.open:
            try:
                c.conn.rollback()
                with c.conn.cursor() as cur:
                    cur.execute("DO RELEASE_ALL_LOCKS()")
            except (pymysql.err.Error, OSError):
                # the name's GET_LOCK may still be held: end the connection (the server releases it), so it
                # is never given back to the pool holding it
                shut_down(c)

    # -- single statements on a dedicated connection (session mode) -----------------------------------------
    def _session_call_blocking(self, c: MyConn, stmt: sq.Stmt, deadline: float) -> list[list[tuple[Any, ...]]]:
        sets: list[list[tuple[Any, ...]]] = []
        with c.guard:
            self._bound(c, deadline)
            try:
                with c.conn.cursor() as cur:
                    cur.execute(stmt.sql, stmt.params or None)
                    while True:
                        if cur.description is not None:
                            sets.append(list(cur.fetchall()))
                        if not cur.nextset():
                            break
            except pymysql.err.OperationalError as exc:
                if self._broken(exc):
                    raise StaleConnection(str(exc)) from exc
                if exc.args and exc.args[0] in _LOCK_TIMEOUT_CODES:  # row lock not granted (NOWAIT / WAIT n)
                    with c.conn.cursor() as cur:
                        cur.execute("ROLLBACK")
                    return []
                raise
            except pymysql.err.InterfaceError as exc:
                raise StaleConnection(str(exc)) from exc
        return sets

    def _session_call(self, conn: Any, stmt: sq.Stmt, wait: float = 0.0) -> list[list[tuple[Any, ...]]]:
        return rt.offload(
            self._session_call_blocking, conn, stmt, self._deadline(wait), interrupt=lambda: shut_down(conn), pool=POOL
        )


def _connect_unix(conn: pymysql.connections.Connection[Any], path: str, timeout: float) -> None:
    """PyMySQL's unix-socket connect, with the socket closed when the connect fails (PyMySQL's own leaves it
    to the garbage collector)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(path)
    except OSError as exc:
        sock.close()
        raise pymysql.err.OperationalError(
            2002, f"Can't connect to local server through socket {path!r} ({exc})"
        ) from None
    conn.host_info = "Localhost via UNIX socket"
    conn._secure = True  # as PyMySQL marks its own unix-socket connections: no RSA exchange for the password
    conn.connect(sock)  # the handshake; on failure PyMySQL closes the socket it was given


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


def shut_down(c: MyConn) -> None:
    """End a connection's socket now (a call blocked on it fails at once); the server then drops its session."""
    sock = getattr(c.conn, "_sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def session_timeout_seconds(ttl: float) -> int:
    """MySQL's ``wait_timeout`` is whole seconds (at least 1): the TTL rounded up."""
    return max(1, math.ceil(ttl))

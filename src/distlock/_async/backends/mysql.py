"""MySQL / MariaDB: ``mysql://user:password@host:3306/db`` (alias ``mariadb://``), with PyMySQL.

Lease mode (default): the lease tables of ``_core/sql_lease.py`` (InnoDB, READ COMMITTED, the database's
clock in UTC). Wake-ups are a server-side wait: while a store holds a name it keeps ``GET_LOCK`` on the
name's companion (``distlock-bell:<key>``) on one "bell" connection, and releases it right after the
holding's row is deleted; a waiter blocks in ``GET_LOCK(companion, t)`` and re-tries as soon as that
returns. When no companion is held (the holder crashed, or its store could not take it) the waiter
falls back to a short capped backoff and re-checks at the holder's lease end at the latest.

Session mode (``?mode=session``): ``GET_LOCK(name)`` on a connection pinned to the holding; names longer
than 64 characters map to ``~`` + base64url(SHA-256(name)) (see ``sql_lease.get_lock_name``). The
connection's ``wait_timeout`` (whole seconds, the TTL rounded up) is the lease. Only exclusive kinds
(lock, rlock, multilock): ``GET_LOCK`` has no shared mode.

PyMySQL blocks: on the async side every call runs in the backend's worker threads (``_my_async.call``).

Bounded calls: PyMySQL's socket timeouts are set per call to what is left of the call's deadline
(``call_timeout=5`` seconds, plus the server-side wait a blocking statement makes on purpose), and
``innodb_lock_wait_timeout`` and ``lock_wait_timeout`` bound row-lock and metadata-lock waits on the server. A connection whose call timed out or was
cancelled is closed, never reused (on the async side its worker thread ends at the socket timeout).

URL options: ``mode=lease|session``, ``table_prefix=distlock``, ``connect_timeout=10``, ``call_timeout=5``,
``unix_socket=``,
``ssl=true`` (verify against the system CAs), ``ssl_ca=``, ``ssl_cert=``, ``ssl_key=``,
``ssl_verify=true``. The database is the URL path.
"""

from __future__ import annotations

import logging
import math
import socket
import ssl as _ssl
import threading
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymysql
import pymysql.constants.CLIENT
import pymysql.err

from ... import _my_async as my
from ..._core import sql_lease as sq
from ..._core.timing import monotonic
from ..._core.types import Capabilities, Claim, Grant, Mode
from ..._errors import BackendError, ConfigError, UnsupportedFeature
from ..._url import StoreConfig
from ._sql import (
    SESSION_WAIT_SLICE,
    LeaseAttempt,
    RetryableError,
    SqlBackend,
    StaleConnection,
    lease_slice,
    session_timeout_seconds,
)

log = logging.getLogger("distlock")

#: a call on the bell connection (a wake-up hint) gets at most this long
BELL_TIMEOUT = 1.0
#: server error codes: deadlock, lock wait timeout (re-run the transaction)
_RETRY_CODES = {1213, 1205}
#: a row lock that was not granted in time (lock wait timeout; MySQL 8's NOWAIT)
_LOCK_TIMEOUT_CODES = {1205, 3572}
#: client error codes of a connection that is gone
_GONE_CODES = {2003, 2006, 2013, 2055, 1927, 4031}


@dataclass
class MyConn:
    """A PyMySQL connection and the lock that keeps two threads from using it at once."""

    conn: pymysql.connections.Connection[Any]
    guard: threading.Lock = field(default_factory=threading.Lock)
    wait_timeout: int | None = None  # session mode: the idle timeout last set on this connection


class Backend(SqlBackend):
    make_dialect = staticmethod(sq.mysql)
    schema_sql = "DATABASE()"
    existing_tables_sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()"
    kill_sql = "KILL CONNECTION %s"

    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        ssl_ctx: _ssl.SSLContext | None = None
        want_ssl = config.pop_bool("ssl", False)
        ca, cert, key = config.pop("ssl_ca"), config.pop("ssl_cert"), config.pop("ssl_key")
        verify = config.pop_bool("ssl_verify", True)
        if want_ssl or ca or cert:
            ssl_ctx = _ssl.create_default_context(cafile=ca)
            if cert:
                ssl_ctx.load_cert_chain(cert, key)
            if not verify:
                ssl_ctx.check_hostname = False
                ssl_ctx.verify_mode = _ssl.CERT_NONE
        unix_socket = config.pop("unix_socket")
        how = (config.pop("session_lock", "get_lock") or "get_lock").lower()
        if how not in ("get_lock", "row"):
            raise ConfigError(f"URL option session_lock={how!r} must be 'get_lock' or 'row'", backend=config.scheme)
        self.row_lock = self.session and how == "row"
        if self.row_lock:
            self.capabilities = Capabilities(modes=frozenset({Mode.EXCLUSIVE, Mode.READ, Mode.WRITE}), fair=False)
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
        self._bell: MyConn | None = None
        self._bell_guard = threading.Lock()
        self._bells: dict[str, str] = {}  # token -> companion lock the bell connection holds for it

    async def _prepare(self) -> None:
        r: sq.Result = await self._tx(lambda: sq.single(sq.Stmt("SELECT VERSION()")), tx=False)
        version = str(r.rows[0][0])
        self.fast_session = _has_sequences(version)
        self.ops.sequences = self.fast_session
        if self.row_lock and not self.fast_session:
            raise UnsupportedFeature("session_lock=row needs MariaDB >= 10.5", backend=self.scheme)
        await self._ensure_schema()

    def _timeout_change(self, conn: Any, ttl: float) -> float | None:
        seconds = session_timeout_seconds(ttl)
        if conn.wait_timeout == seconds:
            return None
        conn.wait_timeout = seconds
        return ttl

    # -- driver ------------------------------------------------------------------------------------------
    def _connect_blocking(self, session_ttl: float | None) -> MyConn:
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

    async def _connect(self, session_ttl: float | None = None) -> Any:
        return await my.call(self._connect_blocking, session_ttl)

    async def _close(self, conn: Any) -> None:
        await my.call(self._close_blocking, conn)

    @staticmethod
    def _close_blocking(c: MyConn) -> None:
        if not c.guard.acquire(blocking=False):  # a worker thread is still in a call on it: end that call
            _shut_down(c)
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

    async def _run(
        self, conn: Any, script: Generator[sq.Stmt, sq.Result, Any], tx: bool, deadline: float | None = None
    ) -> Any:
        return await my.call(self._drive, conn, script, tx, deadline)

    def _drive(self, c: MyConn, script: Generator[sq.Stmt, sq.Result, Any], tx: bool, deadline: float | None) -> Any:
        with c.guard:
            self._bound(c, deadline)
            cur = c.conn.cursor()
            started = False
            try:
                if tx:
                    try:
                        cur.execute("BEGIN")
                    except pymysql.err.MySQLError as exc:
                        if self._broken(exc):
                            raise StaleConnection(str(exc)) from exc
                        raise
                    started = True
                try:
                    stmt = next(script)
                    while True:
                        try:
                            cur.execute(stmt.sql, stmt.params or None)
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
                if tx:  # and let go of the name's GET_LOCK (pool connections hold no other named lock)
                    cur.execute("COMMIT; DO RELEASE_ALL_LOCKS()")
                    while cur.nextset():
                        pass
                return result
            except pymysql.err.OperationalError as exc:
                self._rollback(c, tx)
                if exc.args and exc.args[0] in _RETRY_CODES:
                    raise RetryableError(str(exc)) from exc
                raise
            except BaseException:
                self._rollback(c, tx)
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
                _shut_down(c)

    # -- lease-mode wake-ups: the companion GET_LOCK ("bell") ------------------------------------------------
    def _bell_call(self, sql: str, params: tuple[object, ...]) -> Any:
        """One statement on the bell connection (caller holds ``_bell_guard``); reconnects once."""
        for attempt in range(2):
            if self._bell is None or not self._bell.conn.open:
                self._bell = self._connect_blocking(None)
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
        with self._bell_guard:
            try:
                if self._bell_call("SELECT GET_LOCK(%s, 0.02)", (sq.bell_name(key),)) == 1:
                    self._bells[token] = sq.bell_name(key)
            except (pymysql.err.MySQLError, BackendError):
                pass  # waiters fall back to re-checking

    def _bell_drop(self, tokens: Sequence[str]) -> None:
        with self._bell_guard:
            for token in tokens:
                companion = self._bells.pop(token, None)
                if companion is None:
                    continue
                try:
                    self._bell_call("SELECT RELEASE_LOCK(%s)", (companion,))
                except (pymysql.err.MySQLError, BackendError):
                    pass

    async def _granted(self, claim: Claim, key: str) -> None:
        if not self._closed:
            await my.call(self._bell_hold, claim.token, key)

    async def _released(self, tokens: Sequence[str], key: str) -> None:
        self._wake(key)
        with self._bell_guard:
            ours = any(t in self._bells for t in tokens)
        if ours:
            await my.call(self._bell_drop, tokens)

    async def _forget_bells(self, tokens: Sequence[str]) -> None:
        await my.call(self._bell_drop, tokens)

    def _bell_wait_blocking(self, c: MyConn, companion: str, timeout: float) -> int:
        """-1: nobody rings this name; 1: it rang (the holder let go); 0: timed out."""
        with c.guard, c.conn.cursor() as cur:
            self._bound(c, self._deadline(timeout))
            cur.execute("SELECT IF(IS_USED_LOCK(%s) IS NULL, -1, GET_LOCK(%s, %s))", (companion, companion, timeout))
            row = cur.fetchone()
            got = -1 if row is None or row[0] is None else int(row[0])
            if got == 1:
                cur.execute("SELECT RELEASE_LOCK(%s)", (companion,))
            return got

    async def _lease_wait(self, attempt: LeaseAttempt, grant: Grant, timeout: float | None) -> None:
        assert attempt.waker is not None
        if await attempt.waker.wait(0):  # a local release since our try
            attempt.backoff.reset()
            return
        delay = lease_slice(attempt, grant, timeout, backoff=False)
        if delay <= 0:
            return
        conn = await self._session_borrow()  # outside the bounded pool: it blocks for up to `delay`
        try:
            rang = await my.call(self._bell_wait_blocking, conn, sq.bell_name(attempt.key), delay)
        except pymysql.err.MySQLError as exc:  # only a hint: fall back to re-checking
            log.debug("bell wait failed: %s", exc)
            await self._close_quietly(conn)
            rang = -1
        except BaseException:
            await self._close_quietly(conn)  # cancelled: the thread may still be waiting on it
            raise
        else:
            await self._session_give_back(conn)
        if rang == -1:
            if await attempt.waker.wait(lease_slice(attempt, grant, timeout, backoff=True)):
                attempt.backoff.reset()
        else:
            attempt.backoff.reset()

    # -- session mode: GET_LOCK ----------------------------------------------------------------------------
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

    async def _session_call(self, conn: Any, stmt: sq.Stmt, wait: float = 0.0) -> list[list[tuple[Any, ...]]]:
        return await my.call(self._session_call_blocking, conn, stmt, self._deadline(wait))

    async def aclose(self) -> None:
        await super().aclose()
        with self._bell_guard:
            bell, self._bell = self._bell, None
            self._bells.clear()
        if bell is not None:
            await my.call(self._close_blocking, bell)


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


def _has_sequences(version: str) -> bool:
    """MariaDB >= 10.5 has SEQUENCE, Aria and INSERT/REPLACE ... RETURNING (the one-statement session acquire)."""
    if "mariadb" not in version.lower():
        return False
    try:
        major, minor = (int(x) for x in version.split("-")[0].split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (10, 5)


def _shut_down(c: MyConn) -> None:
    """End a connection's socket now (a call blocked on it fails at once); the server then drops its session."""
    sock = getattr(c.conn, "_sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

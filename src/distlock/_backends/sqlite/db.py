"""One store's connection to its database and its transactions: opening a file (WAL, busy timeout, the
host-wide store's link check) or joining the side's in-memory database, the mutex that lets one thread at a
time use the connection, one ``BEGIN IMMEDIATE`` transaction per operation, SQLite errors as
``BackendError``, and a forked child's own connection.

No async code: both sides import it (the async side runs ``locked`` in a worker thread, ``_async/calls.py``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..._core import forks
from ..._errors import BackendError
from . import hostdir
from . import queries as sql
from .process import Process

T = TypeVar("T")


def connect_file(path: Path, busy: float, shared: bool) -> sqlite3.Connection:
    """``shared``: a database every user writes (the host's default store), used only if its name is no
    symbolic link (another user may have put one in its place, see ``hostdir``). SQLite resolves the links of
    a name before it opens the file, and opens the result without following a link: so if the name it opened
    is the one given, no link led anywhere, and none can any more."""
    conn = sqlite3.connect(str(path), timeout=busy, check_same_thread=False, isolation_level=None)
    if shared:
        opened = conn.execute("PRAGMA database_list").fetchone()[2]
        if opened != os.path.join(os.path.realpath(path.parent), path.name):
            conn.close()
            raise sqlite3.OperationalError(f"{str(path)!r} is a symbolic link (to {opened!r}): not followed")
    return conn


class Db:
    """A store's connection (``None`` in a forked child until first use), its mutex, and its database's key
    (the file's resolved path, or ``memory:PID``)."""

    def __init__(
        self,
        process: Process[Any],
        scheme: str,
        conn: sqlite3.Connection,
        guard: threading.Lock,
        key: str,
        busy: float = 10.0,
        shared: bool = False,
    ) -> None:
        self.process = process
        self.scheme = scheme
        self.busy = busy
        self._busy_ms = int(busy * 1000)
        self.conn: sqlite3.Connection | None = conn
        self.guard = guard
        self.key = key
        #: a file's connection, the store's own (memory://: the side's one database, shared by its stores)
        self.owns = not key.startswith("memory:")
        #: a file every user may write (the host-wide default store): its wake-up sockets are every user's too
        self.shared = shared
        self.clock: Callable[[], float] = time.time
        self.durable = False  # the transaction running now commits with synchronous=FULL
        self._sync_level = "NORMAL" if self.owns else "OFF"
        process.stores.add(self)

    @classmethod
    def memory(cls, process: Process[Any], scheme: str) -> Db:
        conn, guard = process.memory_db()
        return cls(process, scheme, conn, guard, key=f"memory:{os.getpid()}")

    @classmethod
    def open_file(cls, process: Process[Any], scheme: str, path: Path, busy: float) -> Db:
        shared = hostdir.world_writable(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = connect_file(path, busy, shared)
            sql.use_wal(conn, busy)
            conn.execute("PRAGMA synchronous=NORMAL")
            sql.create_schema(conn)
        except (OSError, sqlite3.Error) as exc:
            raise BackendError(f"cannot open SQLite store {str(path)!r}: {exc}", backend=scheme) from exc
        return cls(process, scheme, conn, threading.Lock(), key=str(path.resolve()), busy=busy, shared=shared)

    def after_fork(self) -> None:
        """SQLite's rule for a forked child: never use a connection opened before the fork (its file locks and
        their bookkeeping are the parent's), open its own. The inherited one is closed if no transaction was
        open at the fork (the mutex was free): POSIX file locks belong to a process, so closing it releases
        none of the parent's, and the parent's shared lock refuses the exclusive one a checkpoint on close
        would need; closing it also clears SQLite's per-file bookkeeping, which a connection of the child's
        would otherwise share. One a thread of the parent was using at the fork is left as it is
        (``forks.abandon``). memory://: the child's database is a new, empty one (``Process.own``)."""
        self.process.own()
        if not self.owns:
            forks.abandon(self.conn)
            self.conn = None  # the child's in-memory database, on first use (_ready)
            self.guard = threading.Lock()
            self.key = f"memory:{os.getpid()}"
            return
        conn, self.conn = self.conn, None  # the child's own connection, on first use (_db)
        if self.guard.locked() and all(g is not self.guard for g in self.process.held):  # in use at the fork
            forks.abandon(conn)
        elif conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                forks.abandon(conn)
        self.guard = threading.Lock()

    def _ready(self) -> None:
        """Before the mutex is taken: a forked child's copy of a memory:// store joins the child's in-memory
        database and its mutex (shared by every memory:// store of the side)."""
        if self.conn is None and not self.owns:
            self.conn, self.guard = self.process.memory_db()

    def _db(self) -> sqlite3.Connection:
        """The connection (under the mutex): a forked child opens its own file connection here, on first use."""
        conn = self.conn
        if conn is None:
            conn = self.conn = connect_file(Path(self.key), self.busy, self.shared)
            conn.execute(f"PRAGMA synchronous={self._sync_level}")
        return conn

    def read(self) -> tuple[sqlite3.Connection, float]:
        """The connection and the time, for a read outside a transaction (under the mutex)."""
        return self._db(), self.clock()

    def inline(self, fn: Callable[..., T], *args: Any) -> list[T]:
        """Run ``fn`` now if that cannot block: ``[result]``, or ``[]`` if it would have to wait."""
        self._ready()
        if not self.guard.acquire(blocking=False):
            return []
        try:
            conn = self._db()
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                return [fn(*args)]
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    return []  # another process holds the write lock: wait for it in a thread
                raise BackendError(f"SQLite: {exc}", backend=self.scheme) from exc
            except sqlite3.Error as exc:
                raise BackendError(f"SQLite: {exc}", backend=self.scheme) from exc
            finally:
                conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        finally:
            self.guard.release()

    def locked(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` under the mutex, waiting for it (and, inside ``fn``, for the write lock)."""
        self._ready()
        with self.guard:
            try:
                return fn(*args)
            except sqlite3.Error as exc:
                raise BackendError(f"SQLite: {exc}", backend=self.scheme) from exc

    def tx(self, body: Callable[[sqlite3.Connection, float], T]) -> T:
        """Run ``body(conn, now)`` in one BEGIN IMMEDIATE transaction (caller holds the mutex). A body that
        hands out the first fence of a new block (``NeedsSync``) runs again with ``synchronous=FULL``: the
        level cannot change inside a transaction."""
        try:
            return self._tx_once(body)
        except sql.NeedsSync:
            pass
        self._db().execute("PRAGMA synchronous=FULL")
        self.durable = True
        try:
            return self._tx_once(body)
        finally:
            self.durable = False
            self._db().execute(f"PRAGMA synchronous={self._sync_level}")

    def _tx_once(self, body: Callable[[sqlite3.Connection, float], T]) -> T:
        conn = self._db()
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body(conn, self.clock())
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    def close(self) -> None:
        """Under the mutex (``locked``): a file store's connection."""
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

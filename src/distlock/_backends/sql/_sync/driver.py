# GENERATED from src/distlock/_backends/sql/_async/driver.py by scripts/gen_sync.py: edit that file, not this one.
"""What a SQL mode asks of its database's driver (``SqlDriver``), and the errors a driver raises to it.

A mode object (``LeaseMode``, ``SessionMode``, ``RowLockMode``, the dialects' lease modes) holds ONE driver
object (``postgres/driver.py``'s ``PgDriver``, ``mysql/driver.py``'s ``MyDriver``) and calls it for every
connection, script and statement: which ``run`` drives a transaction is the driver's, which ``_tx`` borrows
the connection is the store's (``base.py``), and nothing is decided by the order of base classes. The
driver reads the store's bounds (``call_timeout``, ``_deadline``) and error wording through ``store``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from ...._core.types import Mode
from ...._url import StoreConfig
from .. import dialects as sd
from .. import stmt as st

if TYPE_CHECKING:
    from .base import SqlBase

#: session mode: the longest one server-side blocking wait lasts (bounds a cancelled wait's tail); the
#: drivers' socket and statement timeouts leave room for it
SESSION_WAIT_SLICE = 2.0
#: MySQL/MariaDB: a session idle this many seconds more than ``call_timeout`` inside a transaction (a lease-mode
#: acquire between its two round trips, holding the name's GET_LOCK) is ended by the server. A live client is
#: never idle there past its call's deadline, after which it closes the connection itself
IDLE_IN_TX_SLACK = 1.0

Sets = list[list[tuple[Any, ...]]]


class RetryableError(Exception):
    """A deadlock or serialization failure: the transaction was rolled back and may simply be re-run."""


class StaleConnection(Exception):
    """The connection failed before anything of the transaction was sent: run it on a fresh one."""


class SqlDriver:
    """One database's driver under every mode: connections, scripts, single statements, their bounds and
    the classification of its errors. Subclassed once per database."""

    make_dialect: Callable[[str], sd.Dialect]
    existing_tables_sql: str | None = None  # lists the tables (and sequences) already there, if needed
    schema_sql = "current_schema()"  # the schema (database) the tables live in, as an SQL expression
    #: taken first, in the same transaction as the DDL, where concurrent ``CREATE ... IF NOT EXISTS`` can
    #: fail (PostgreSQL: two sessions creating one table both pass the check, one then violates the
    #: unique index of ``pg_type``); None where the server serialises them itself (MySQL's metadata locks)
    schema_guard_sql: str | None = None
    #: session mode: ends a connection from the server side (``break_lock``), its id as the one parameter
    kill_sql = ""
    #: how many server connections have the id given (``connection_id``) as the one parameter: 0 once a
    #: connection the client let go of mid-call has ended there (``SqlBase.until_gone``)
    gone_sql = ""
    #: modes the connection-bound lock can do on this database
    session_modes: frozenset[Mode] = frozenset({Mode.EXCLUSIVE})
    #: session mode: a write holder's connection can take the read lock of its name too (a downgrade)
    session_downgrade = False
    #: what sits between the store and the database, found at open: None (nothing), or a pooler's mode
    #: "session", "transaction" or "statement" (PostgreSQL's ``PgDriver`` looks)
    pooler: str | None = None

    def __init__(self, store: SqlBase, config: StoreConfig) -> None:
        """Reads the driver's own URL options from ``config`` (after the store's) and rejects the rest."""
        self.store = store

    def prepare(self) -> None:
        """What opening a store needs of the driver before the schema check (probing the server)."""

    def connect(self) -> Any:
        """A new connection in autocommit mode."""
        raise NotImplementedError

    def run(
        self, conn: Any, script: Generator[st.Stmt, st.Result, Any], tx: bool, deadline: float | None = None
    ) -> Any:
        """Drive ``script`` on ``conn`` (inside BEGIN/COMMIT if ``tx``), ended by ``deadline`` (monotonic;
        the connection is then broken). Driver errors propagate."""
        raise NotImplementedError

    def close(self, conn: Any) -> None:
        raise NotImplementedError

    def broken(self, exc: BaseException) -> bool:
        """Is ``exc`` a driver error after which the connection must be thrown away?"""
        raise NotImplementedError

    def driver_error(self, exc: BaseException) -> bool:
        raise NotImplementedError

    # -- the session modes' calls on a pinned connection ----------------------------------------------------
    def session_call(self, conn: Any, stmt: st.Stmt, wait: float = 0.0, ok: bool = False) -> Sets:
        """Run one (MySQL: multi-) statement in autocommit; every result set. A connection that is gone
        raises StaleConnection; a lock wait that timed out on the server ends in an empty answer (not
        acquired). Bounded by ``call_timeout`` plus ``wait`` (a server-side wait it makes on purpose).
        ``ok`` (MySQL): a last statement without rows answers (rows changed, ``LAST_INSERT_ID``) as its set."""
        raise NotImplementedError

    def connection_id(self, conn: Any) -> int | None:
        """The server's id of ``conn``'s session where the driver knows it, else None (through a pooler the
        client's connection names no server session)."""
        return None

    def timeout_change(self, conn: Any, ttl: float) -> float | None:
        """The idle timeout to set with the next statement on ``conn``, or None if it is already ``ttl``."""
        return ttl

    def lock_name_refused(self, name: str) -> str | None:
        """Why the database's own named lock (session mode) cannot keep ``name`` apart from the others."""
        return None

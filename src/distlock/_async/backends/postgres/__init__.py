"""PostgreSQL: ``postgresql://user:password@host:5432/db`` (alias ``postgres://``), with psycopg 3.

Lease mode (default): the lease tables of ``_core/sql_lease.py``; waiters are woken by LISTEN/NOTIFY
(``lease.py``).

Session mode (``?mode=session``): advisory locks, ``pg_advisory_lock(key)`` with key = the first 8 bytes of
SHA-256(name) as a signed bigint (``pg_advisory_lock_shared`` for rwlock readers), on a connection
pinned to the holding. ``idle_session_timeout`` of that connection is the TTL: the renewer's check keeps
it alive; a holder that stops renewing, dies or loses its connection loses the lock.

``driver.py`` is psycopg under every mode (bounded calls, error classification); the algorithm of each
mode is in ``backends/sql/``.

URL options: ``mode=lease|session``, ``table_prefix=distlock``, ``connect_timeout=10`` (seconds),
``call_timeout=5`` (seconds: the bound of every call, see ``driver.py``), and libpq's ``sslmode``,
``sslrootcert``, ``sslcert``, ``sslkey``. The database is the URL path.

Through a connection pooler (PgBouncer, found when the store opens, see ``driver.py``): lease mode works in
session, transaction and statement pooling (waiters poll in transaction and statement pooling, see
``lease.py``; statement pooling runs ``StatementOps``); session mode only in session pooling. Other
combinations are a ``ConfigError`` at open.
"""

from __future__ import annotations

from ...._url import StoreConfig
from ...backend import AsyncBackend
from ..sql.base import pop_mode
from ..sql.session import SessionBackend
from .driver import PgDriver
from .lease import Lease


class Session(PgDriver, SessionBackend):
    """``mode=session``: advisory locks on a pinned connection."""

    def _pooling_refusal(self, mode: str) -> str | None:
        if mode == "session":
            return None  # each client connection keeps its server connection: the lock stays with ours
        return (
            "session mode's advisory lock belongs to the server connection, which this pooling hands to other "
            "clients after each transaction (the lock would be stranded or shared); use mode=lease, which works "
            "through it, or connect to PostgreSQL directly"
        )


class Backend(AsyncBackend):
    """What the store opens (``store.py`` loads ``Backend`` by module name): ``open`` reads the URL's mode
    once and opens that mode's class. Never instantiated itself."""

    @classmethod
    async def open(cls, config: StoreConfig) -> AsyncBackend:
        kind: type[PgDriver] = Lease if pop_mode(config) == "lease" else Session
        return await kind.open(config)

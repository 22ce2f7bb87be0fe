"""PostgreSQL: ``postgresql://user:password@host:5432/db`` (alias ``postgres://``), with psycopg 3.

Lease mode (default): the lease tables of ``sql/lease.py``, the autocommit protocol of
``sql/lease_autocommit.py``; waiters are woken by LISTEN/NOTIFY (``lease_mode.py``, ``PgLeaseMode``).

Session mode (``?mode=session``): advisory locks, ``pg_advisory_lock(key)`` with key = the first 8 bytes of
SHA-256(name) as a signed bigint (``pg_advisory_lock_shared`` for rwlock readers), on a connection
pinned to the holding. ``idle_session_timeout`` of that connection is the TTL: the renewer's check keeps
it alive; a holder that stops renewing, dies or loses its connection loses the lock.

``driver.py`` is psycopg under every mode (bounded calls, error classification; ``query.py`` the
multi-statement Query): the mode object, whose algorithm is in ``_backends/sql/``, holds a ``PgDriver``.

URL options: ``mode=lease|session``, ``table_prefix=distlock``, ``connect_timeout=10`` (seconds),
``call_timeout=5`` (seconds: the bound of every call, see ``driver.py``), and libpq's ``sslmode``,
``sslrootcert``, ``sslcert``, ``sslkey``. The database is the URL path.

Through a connection pooler (PgBouncer, found when the store opens, see ``driver.py``): lease mode works in
session, transaction and statement pooling (waiters poll in transaction and statement pooling, see
``lease_mode.py``; statement pooling runs the same ``AutocommitOps``); session mode only in session pooling. Other
combinations are a ``ConfigError`` at open.
"""

from __future__ import annotations

from ...._async.backend import AsyncBackend
from ...._url import StoreConfig
from ...sql._async.base import SqlBase, pop_mode
from ...sql._async.session import SessionMode
from .driver import PgDriver
from .lease_mode import PgLeaseMode


class Backend(AsyncBackend):
    """What the store opens (``store.py`` loads ``Backend`` by module name): ``open`` reads the URL's mode
    once and opens that mode's class with the psycopg driver. Never instantiated itself."""

    @classmethod
    async def open(cls, config: StoreConfig) -> AsyncBackend:
        mode: type[SqlBase] = PgLeaseMode if pop_mode(config) == "lease" else SessionMode
        return await mode.open(config, PgDriver)

"""MySQL / MariaDB: ``mysql://user:password@host:3306/db`` (alias ``mariadb://``), with PyMySQL
(sync) and aiomysql (asyncio).

Lease mode (default): the lease tables of ``sql/lease.py``, the transactional protocol of
``sql/lease_tx.py`` (InnoDB, READ COMMITTED, the database's clock in UTC); waiters are woken by a
companion ``GET_LOCK`` the holder keeps (``lease_mode.py``, ``MyLeaseMode``).

Session mode (``?mode=session``): ``GET_LOCK(name)`` on a connection pinned to the holding; names longer
than 64 characters map to ``~`` + base64url(SHA-256(name)) (see ``sql/names.py``'s ``get_lock_name``). The
connection's ``wait_timeout`` (whole seconds, the TTL rounded up) is the lease. Only exclusive kinds
(lock, rlock, multilock): ``GET_LOCK`` has no shared mode. With ``session_lock=row``, a row lock held in
an open transaction instead (``sql/_async/rowlock.py``; MariaDB >= 10.5), which also gives rwlocks.

``driver.py`` is the driver under every mode (bounded calls, error classification): the mode object, whose
algorithm is in ``_backends/sql/``, holds a ``MyDriver``.

URL options: ``mode=lease|session``, ``session_lock=get_lock|row``, ``table_prefix=distlock``,
``connect_timeout=10``, ``call_timeout=5``, ``unix_socket=``, ``ssl=true`` (verify against the system
CAs), ``ssl_ca=``, ``ssl_cert=``, ``ssl_key=``, ``ssl_verify=true``. The database is the URL path.
"""

from __future__ import annotations

from ...._async.backend import AsyncBackend
from ...._errors import ConfigError
from ...._url import StoreConfig
from ...sql._async.base import SqlBase, pop_mode
from ...sql._async.rowlock import RowLockMode
from ...sql._async.session import SessionMode
from .driver import MyDriver
from .lease_mode import MyLeaseMode


class Backend(AsyncBackend):
    """What the store opens (``store.py`` loads ``Backend`` by module name): ``open`` reads the URL's mode
    once and opens that mode's class with the PyMySQL/aiomysql driver. Never instantiated itself."""

    @classmethod
    async def open(cls, config: StoreConfig) -> AsyncBackend:
        mode = pop_mode(config)
        how = (config.pop("session_lock", "get_lock") or "get_lock").lower()
        if how not in ("get_lock", "row"):
            raise ConfigError(f"URL option session_lock={how!r} must be 'get_lock' or 'row'", backend=config.scheme)
        kind: type[SqlBase] = MyLeaseMode if mode == "lease" else RowLockMode if how == "row" else SessionMode
        return await kind.open(config, MyDriver)

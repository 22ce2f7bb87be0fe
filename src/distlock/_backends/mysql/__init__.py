"""MySQL / MariaDB (``mysql://user:password@host:3306/db``, alias ``mariadb://``), with PyMySQL (sync) and
aiomysql (asyncio). The modes and the statements are the shared SQL layer's (``_backends/sql/``); this folder
is what is MySQL's own:

* ``_async/``: written once (``_sync/`` is generated from it by ``scripts/gen_sync.py``):

  * ``__init__.py``: ``Backend``, the registry's entry: picks the URL's mode and opens it with ``MyDriver``;
  * ``lease_mode.py``: ``MyLeaseMode``, the lease mode's transactional protocol and its bell (a companion
    ``GET_LOCK``) that wakes the waiters;
  * ``driver.py``: ``MyDriver``, the driver under every mode: connections, bounded calls, errors;

* ``_driver_async.py`` / ``_driver_sync.py``: the hand-kept driver seam pair (aiomysql, PyMySQL): what
  differs in opening a connection and bounding a call.
"""

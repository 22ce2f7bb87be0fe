"""PostgreSQL (``postgresql://user:password@host:5432/db``, alias ``postgres://``), with psycopg 3. The modes
and the statements are the shared SQL layer's (``_backends/sql/``); this folder is what is PostgreSQL's own:

* ``_async/``: written once (``_sync/`` is generated from it by ``scripts/gen_sync.py``):

  * ``__init__.py``: ``Backend``, the registry's entry: picks the URL's mode and opens it with ``PgDriver``;
  * ``lease_mode.py``: ``PgLeaseMode``, the lease mode's autocommit protocol and its LISTEN/NOTIFY wake-ups;
  * ``driver.py``: ``PgDriver``, psycopg under every mode: connections, bounded calls, errors, poolers;
  * ``query.py``: the multi-statement Query a lease try goes as;

* ``_driver_async.py`` / ``_driver_sync.py``: the hand-kept driver seam pair: a connection opened within a
  limit, and a call ended at its deadline (a timer of the connection on asyncio, the watchdog thread of
  ``sql/watchdog.py`` on the threaded side);
* ``errors.py``: the driver error of a call ended at its deadline, for both seams.
"""

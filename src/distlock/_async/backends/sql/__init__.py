"""The SQL lock algorithm shared by MySQL/MariaDB (``backends/mysql/``) and PostgreSQL (``backends/postgres/``).

One class per mode, picked once from the URL when the store opens (each dialect package's ``Backend``):

* ``base.py``     what every mode shares: URL options, the connection pool and its bounded transactions,
                  connections outside the pool for server-side waits, the call budget, the schema, errors.
* ``schema.py``   creating the tables at open (and the upgrade from 0.1.0's layout).
* ``lease.py``    ``mode=lease`` (default): holdings are rows of lease tables with an expiry.
* ``session.py``  ``mode=session``: the database's own lock on a connection pinned to the holding.
* ``rowlock.py``  ``mode=session&session_lock=row`` (MySQL): the same, with a row lock held in an open
                  transaction.

The statements are in ``_core/sql_lease.py`` (pure); the drivers and each dialect's wake-up push are in
the dialect packages, whose concrete classes put the driver first: ``class Session(MyDriver,
SessionBackend)``, so the driver's hooks (``_connect``, ``_run``, ``_session_call``, ...) implement the ones
the mode declares.
"""

"""The SQL lock algorithm shared by MySQL/MariaDB (``backends/mysql/``) and PostgreSQL (``backends/postgres/``).

One mode class per mode, picked once from the URL when the store opens (each dialect package's ``Backend``),
and opened with that dialect's driver object, which the mode holds (``self.driver``):

* ``driver.py``   ``SqlDriver``: what a mode asks of a driver (connections, ``run`` of a script, session
                  calls, error classification); ``PgDriver`` and ``MyDriver`` implement it.
* ``base.py``     ``SqlBase``, what every mode shares: URL options, the connection pool and its bounded
                  transactions (``_tx``), connections outside the pool for server-side waits, the call
                  budget, opening, errors.
* ``schema.py``   creating the tables at open (and the upgrade from 0.1.0's layout).
* ``lease.py``    ``LeaseMode``, ``mode=lease`` (default): holdings are rows of lease tables with an expiry;
                  the dialects add their protocol and push (``PgLeaseMode``, ``MyLeaseMode``).
* ``lease_attempt.py``  ``LeaseAttempt``: one lease-mode waiter's tries, waits and clean-up.
* ``session.py``  ``SessionMode``, ``mode=session``: the database's own lock on a connection pinned to the
                  holding.
* ``rowlock.py``  ``RowLockMode``, ``mode=session&session_lock=row`` (MySQL): the same, with a row lock held
                  in an open transaction.

The statements are in ``_core/sql_*.py`` (pure): the statement machinery (``sql_stmt``), names
(``sql_names``), dialects, the lease tables (``sql_lease``) and their two protocols (``sql_lease_tx``,
``sql_lease_autocommit``), the session mode (``sql_session``).
"""

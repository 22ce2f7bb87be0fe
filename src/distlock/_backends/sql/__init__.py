"""The SQL layer shared by MySQL/MariaDB (``_backends/mysql/``) and PostgreSQL (``_backends/postgres/``): the
statements and the lock algorithm, over a driver object each dialect's folder supplies.

One mode class per mode, picked once from the URL when the store opens (each dialect's ``Backend``), and
opened with that dialect's driver object, which the mode holds (``self.driver``). The folder, from the modes
down to the statements:

* ``_async/``: the modes, written once (``_sync/`` is generated from it by ``scripts/gen_sync.py``):

  * ``rowlock.py``: ``RowLockMode``, ``mode=session&session_lock=row`` (MySQL): the session mode with a row
    lock held in an open transaction;
  * ``session.py``: ``SessionMode``, ``mode=session``: the database's own lock on a connection pinned to the
    holding;
  * ``session_admin.py``: ``SessionAdmin``, the session modes' ``inspect``, ``list``, ``break_lock`` and
    ``request_release`` (every connection's holdings, not only the store's);
  * ``lease_mode.py``: ``LeaseMode``, ``mode=lease`` (default): holdings are rows of lease tables with an expiry;
    the dialects add their protocol and push (``PgLeaseMode``, ``MyLeaseMode``);
  * ``lease_attempt.py``: ``LeaseAttempt``, one lease-mode waiter's tries, waits and clean-up;
  * ``base.py``: ``SqlBase``, what every mode shares: URL options, the connection pool and its bounded
    transactions (``_tx``), connections outside the pool for server-side waits, the call budget, opening,
    errors;
  * ``schema.py``: creating the tables at open (and the upgrade from 0.1.0's layout);
  * ``driver.py``: ``SqlDriver``, what a mode asks of a driver (connections, ``run`` of a script, session
    calls, error classification); ``PgDriver`` and ``MyDriver`` implement it;
  * ``latch.py`` / ``barrier.py``: the latches and barriers of every mode: their table made at a store's
    first call, one transaction per step;

* ``watchdog.py``: the thread that ends a threaded PostgreSQL call at its deadline (no async code: one
  module for both sides);
* the statements (pure: no I/O, as in ``_core/``): the lease tables (``lease.py``) and their two protocols
  (``lease_tx.py``: MySQL/MariaDB, with MariaDB's grant behind the bell in ``lease_bell.py``; ``lease_autocommit.py``: PostgreSQL, whose hand-over release is
  ``lease_handover.py``), the session mode (``session.py``) and MySQL's row-lock variant of it
  (``rowlock.py``), the latches' and barriers' tables (``latch.py``, ``barrier.py``), the dialects
  (``dialects.py``), names and their keys (``names.py``), and the statement machinery (``stmt.py``: ``Stmt``,
  ``Result``, scripts).

Shared with SQLite, outside the folder: the grant rule (``_core/arbiter.py``) and the wake-up registry
(``_wakeup.py``).
"""

"""SQLite (``sqlite:///path``: a file, correct across processes on one host) and ``memory://`` (the same code on
one in-memory database per process and side). Driver: Python's ``sqlite3``, which blocks: the async side runs
a transaction that would wait in a worker thread.

The folder, from the lock down to the file (each module calls only those below it):

* ``_async/``: what differs between the sides, written once (``_sync/`` is generated from it by
  ``scripts/gen_sync.py``):

  * ``__init__.py``: ``Backend``, the registry's entry: opens a store and answers the backend contract;
  * ``attempt.py``: ``Attempt``, one try and the wait for a wake-up; ``Watch``, an election observer's;
  * ``ears.py``: ``Ear``, where a waiter or an observer hears its wake-ups; the side's ``PROCESS``;
  * ``calls.py``: an operation run right away when it cannot wait, else in a worker thread;

* ``ops.py``: the operations, one short ``BEGIN IMMEDIATE`` transaction each (acquire, keep a waiter's
  place, release, renew, shorten, proclaim, abandon, inspect / list, break);
* ``reclaim.py``: freeing, inside an acquire, the holdings of a local process that provably ended;
* ``procs.py``: which local process holds, and whether it is provably gone (pure, ``/proc`` injected);
* ``db.py``: a store's connection, its mutex, its transactions and errors, a forked child's own connection;
* ``process.py``: one side's process-wide state: the waiters and wake sockets per name, the in-memory
  database, the fork hooks;
* ``queries.py``: the schema and one function per statement (the store-wide fence counter);
* ``latch.py`` / ``barrier.py``: latches and barriers, each in a table of its own that no lock query reads.

Shared with the SQL backends, outside the folder: the grant rule (``_core/arbiter.py``) and the wake-up
registry (``_wakeup.py``). Here too: ``wake.py`` the wake-up sockets across processes, ``hostdir.py`` the
host-wide default store's directory (every user writes it: created and checked with care).
"""

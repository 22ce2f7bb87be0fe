"""SQLite (``sqlite:///path``: a file, correct across processes on one host) and ``memory://`` (the same code on
one in-memory database per process). Driver: Python's ``sqlite3``.

The folder:

* ``queries.py``: the schema and one function per statement (no async code: both sides import it);
* ``procs.py``: which local process holds a lock, and whether it is provably gone (pure, ``/proc`` injected);
* ``_async/``: the backend, written once (``_sync/`` is generated from it by ``scripts/gen_sync.py``).

Shared with the SQL backends, outside the folder: the grant rule (``_core/arbiter.py``) and the wake-ups
(``_wakeup.py``).
"""

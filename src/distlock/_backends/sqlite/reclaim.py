"""The dead-holder reclaim: a holding of a file records the process that took it (``procs``), and an acquire
that finds the name taken frees, inside its own transaction, the holdings whose process has provably ended on
this host (a ``kill -9``, a crash) instead of waiting for their leases to run out.

Kept apart from the statements (``queries.py``, which only read and write rows) and from the judgement
(``procs.py``, pure, unit-tested on an injected ``/proc``). No async code: both sides import it.
"""

from __future__ import annotations

import sqlite3

from . import procs
from . import queries as sql

#: this process and the judge of other processes on the host
LOCAL = procs.Local()


def reclaim(conn: sqlite3.Connection, name: str, local: procs.Local) -> bool:
    """Inside the acquire's transaction: delete the holdings of ``name`` whose process is gone (``local``'s
    judgement). The write lock is held, so of two acquirers that both find the same dead holder, the second
    finds its rows gone. True if any went."""
    freed = 0
    for proc in sql.holder_procs(conn, name):
        if local.gone(proc):
            freed += sql.delete_of_proc(conn, name, proc)
    return freed > 0

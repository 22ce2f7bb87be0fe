"""The statement machinery of the SQL wing (MySQL/MariaDB and PostgreSQL): ``Stmt``, ``Result`` and scripts.

No I/O. Every operation is a generator (sans-I/O): it yields ``Stmt`` objects and is sent back a ``Result``
for each; its return value is the operation's answer. A driver (``_backends/{postgres,mysql}/_async/driver.py``)
runs the script on one connection, so the same logic serves both databases and both I/O flavours (psycopg on
an event loop or not, PyMySQL in a worker thread); only the SQL text differs (``dialects.py``).
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Stmt:
    sql: str
    params: tuple[object, ...] = ()
    #: set by ``AutocommitOps`` only: ``sql`` is several statements sent as ONE simple-protocol Query
    #: (one implicit transaction); the result is that of its statement at this index (0 = the first). The
    #: server reads a Query whole before it runs any of it, so a link that goes silent mid-send never leaves
    #: it holding the name's lock while it waits for the rest (a pipeline of extended-protocol statements
    #: runs each as it arrives: the lock was held for as long as the link stayed silent)
    batch: int | None = None
    #: a ``batch`` statement's statements one by one, each with its own parameters (``sql``/``params`` are
    #: them joined): a driver that keeps them prepared on the server runs these (still in ONE Query)
    parts: tuple[tuple[str, tuple[object, ...]], ...] = ()
    #: PostgreSQL: the statement takes the name's lock, and the server waits for it (and for any row lock
    #: after it) at most this many seconds, well inside the call's own bound: a wait that ends there is
    #: "busy", answered with no rows, never the call's timeout (``lock_timeout`` for this Query only)
    name_wait: float | None = None
    #: the script's final statement: it returns as soon as this one is answered. A driver that can send
    #: several statements in one round trip (MySQL) sends the transaction's COMMIT with it
    last: bool = False
    #: MySQL: with ``last``, the end to send instead of the driver's own (its COMMIT lets go of every named
    #: lock of the session; a grant behind a bell wait lets go of the name's only: the new holder keeps the
    #: bell, ``TxOps.acquire_after_bell``)
    commit: str | None = None
    #: MySQL: the statement ends the transaction itself, with a COMMIT of its own inside ``sql`` (and puts
    #: back what the driver's end would, as far as it lets go); a script that goes on after it has its next
    #: statement open another transaction, ended as usual (``TxOps.acquire_after_bell``'s conditional grant)
    commits: bool = False


def chain(*stmts: Stmt, last: bool = False) -> Stmt:
    """Statements sent one after another in ONE round trip (a MySQL multi-statement): the answer is the last
    result set that has rows (a SELECT or a RETURNING), so only one of them may be read. For a statement
    whose answer does not decide what comes next in the transaction."""
    return Stmt("; ".join(s.sql for s in stmts), tuple(v for s in stmts for v in s.params), last=last)


def batch(parts: Sequence[tuple[str, Sequence[object]]], answer: int, name_wait: float | None = None) -> Stmt:
    """One ``Stmt`` of several statements, answered by the result of ``parts[answer]``."""
    return Stmt(
        "; ".join(sql for sql, _ in parts),
        tuple(v for _, params in parts for v in params),
        batch=answer,
        parts=tuple((sql, tuple(params)) for sql, params in parts),
        name_wait=name_wait,
    )


@dataclass(frozen=True)
class Result:
    rows: list[tuple[object, ...]]
    rowcount: int


Script = Generator[Stmt, Result, object]


def single(stmt: Stmt) -> Generator[Stmt, Result, Result]:
    """A script of one statement, returning its result."""
    r = yield stmt
    return r


def to_float(value: object) -> float:
    """A number the driver returned (Decimal, int, float or str) as a float."""
    return float(value)  # type: ignore[arg-type]


def to_int(value: object) -> int:
    """A number the driver returned as an int."""
    return int(value)  # type: ignore[call-overload,no-any-return]

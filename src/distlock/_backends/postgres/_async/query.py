"""The Query a ``batch`` statement goes as on PostgreSQL: several statements read whole before any runs.

Used by ``driver.py`` for every try of the lease mode's acquire (``AutocommitOps``) and every statement in
statement pooling; on a direct connection a try's statements stay prepared on the server.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from typing import Any

import psycopg
import psycopg.errors

from ...sql import stmt as st
from .. import _driver_async as pg

#: a direct connection keeps at most this many statements prepared for its tries (a try's text depends on how
#: many holders and waiters ahead it expects, its kind and whether it queues: a few dozen shapes in practice)
MAX_PREPARED = 64


def numbered(sql: str) -> str:
    """``sql`` with its ``%s`` placeholders as PostgreSQL's ``$1``, ``$2``... (for ``PREPARE``)."""
    parts = sql.split("%s")
    assert "%" not in "".join(parts), "only %s placeholders"
    return "".join(f"{part}${i}" for i, part in enumerate(parts[:-1], 1)) + parts[-1]


async def run_batch(conn: Any, stmt: st.Stmt, prefix: str = "") -> st.Result:
    """A ``batch`` statement: its statements as ONE simple-protocol Query (one implicit transaction outside
    BEGIN); the answer is the result of its statement at index ``stmt.batch`` (``prefix``: statements sent
    before it in the same Query, which are not counted).

    Never a pipeline of extended-protocol statements: the server runs each of those as it arrives, so a
    link that went silent after the first (the name's lock) left the lock held, the session "active" in
    ClientRead where no server timeout applies, until the link came back or TCP gave up on it (hours).
    A Query is read whole before any of it runs. A statement with ``name_wait`` waits that long for
    the name's lock (``lock_timeout`` for this Query only); not granted, its answer has no rows."""
    if stmt.name_wait is not None:
        prefix += f"SELECT set_config('lock_timeout', '{max(1, math.ceil(stmt.name_wait * 1000))}', true); "
    cur: pg.ClientCursor = pg.client_cursor(conn)
    try:
        try:
            await cur.execute(prefix + stmt.sql, stmt.params)
        except psycopg.errors.LockNotAvailable:
            if stmt.name_wait is None:
                raise
            return st.Result([], 0)  # busy: the Query's transaction was rolled back, the connection serves on
        sets: list[st.Result] = []
        while True:
            sets.append(st.Result(await cur.fetchall() if cur.description is not None else [], cur.rowcount))
            if not cur.nextset():
                break
        return sets[prefix.count(";") + (stmt.batch or 0)]
    finally:
        if not conn.closed:
            await cur.close()


async def run_prepared(conn: Any, stmt: st.Stmt, names: dict[str, str]) -> st.Result:
    """A ``batch`` statement on a direct connection: its statements kept prepared on the server (``PREPARE``,
    the first time this connection sends each, in Queries of their own: they run nothing and lock nothing),
    and run as ONE Query of ``EXECUTE`` statements (``run_batch``), so the server neither parses nor plans
    them again at every try. A pooler hands each transaction any server connection, where they would not
    be: there the statements go as they are. ``names``: the connection's prepared statements, SQL -> name."""
    missing: list[tuple[str, str]] = []
    calls: list[tuple[str, tuple[object, ...]]] = []
    for sql, params in stmt.parts:
        name = names.get(sql)
        if name is None:
            if len(names) + len(missing) >= MAX_PREPARED:  # an unusual mix of shapes: no more kept
                return await run_batch(conn, stmt)
            name = f"distlock_{hashlib.sha256(sql.encode()).hexdigest()[:24]}"
            missing.append((name, sql))
        calls.append((name, params))
    if missing:
        cur: pg.ClientCursor = pg.client_cursor(conn)
        try:
            for name, sql in missing:  # one by one: each is known to exist once its Query succeeded
                await cur.execute(f"PREPARE {name} AS {numbered(sql)}")
                names[sql] = name
        finally:
            if not conn.closed:
                await cur.close()
    sql = "; ".join(f"EXECUTE {name}({', '.join(['%s'] * len(params))})" for name, params in calls)
    return await run_batch(conn, replace(stmt, sql=sql, params=tuple(v for _, p in calls for v in p)))

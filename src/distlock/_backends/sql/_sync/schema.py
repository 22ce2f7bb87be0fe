# GENERATED from src/distlock/_backends/sql/_async/schema.py by scripts/gen_sync.py: edit that file, not this one.
"""Creating the tables when a store opens, and the upgrade from 0.1.0's layout.

Every statement comes from ``sql/lease.py`` (the shared tables), ``sql/session.py`` (the session mode's
records) or from the mode (``SqlBase._mode_schema``); the driver says how to list what exists
(``existing_tables_sql``) and whether the DDL needs a guard (``schema_guard_sql``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING

from ...._core.timing import monotonic
from ...._errors import BackendError
from .. import dialects as sd
from .. import lease as sq
from .. import names as sn
from .. import session as ss
from .. import stmt as st

if TYPE_CHECKING:
    from .base import SqlBase

log = logging.getLogger("distlock")


def ensure_schema(b: SqlBase) -> None:
    """Create what is missing. Where the server has one, the list of existing tables is read first:
    MySQL's ``CREATE TABLE IF NOT EXISTS`` waits for the metadata lock of a table that an open
    transaction (a row-lock holder) has touched, even when there is nothing to create.

    Then the 0.1.0 upgrade: the holders table gets its ``layout`` column (0.1.0 clients can no longer
    acquire), the fence counter is raised above every per-name fence 0.1.0 recorded, and those rows are
    deleted (in batches for up to 2 s; the renewer's sweeps remove the rest)."""
    existing: set[str] = set()
    if b.driver.existing_tables_sql is not None:
        found: st.Result = b._tx(lambda: st.single(st.Stmt(str(b.driver.existing_tables_sql))), tx=False)
        existing = {str(row[0]).lower() for row in found.rows}
    old_holders = old_queue = no_reply = no_asked = no_session_asked = False
    unweighed: list[tuple[str, str]] = []  # (table, column) of the semaphore columns a table made before them lacks
    holders, queue, records = f"{b.prefix}_holders", f"{b.prefix}_queue", f"{b.prefix}_session_holders"
    # compared in lower case: PostgreSQL folds the unquoted names of a prefix with capitals to it
    held, queued, recorded = holders.lower(), queue.lower(), records.lower()
    if held in existing:
        col: st.Result = b._tx(
            lambda: st.single(
                st.Stmt(
                    "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = "
                    f"{b.driver.schema_sql} AND lower(table_name) IN (%s, %s, %s) "
                    "AND column_name IN ('layout', 'owner', 'reply', 'asked', 'permits', 'want', 'declared', 'capacity')",
                    (held, queued, recorded),
                )
            ),
            tx=False,
        )
        found_cols = {(str(t).lower(), str(c).lower()) for t, c in col.rows}
        old_holders = (held, "layout") not in found_cols
        old_queue = b.ops.handover and queued in existing and (queued, "owner") not in found_cols
        no_reply = b.ops.replies and queued in existing and (queued, "reply") not in found_cols
        no_asked = (held, "asked") not in found_cols
        no_session_asked = b.fast_session and recorded in existing and (recorded, "asked") not in found_cols
        for table, there_ in ((holders, held), (queue, queued)):
            if there_ in existing:
                kind = "holders" if there_ == held else "queue"
                unweighed += [(table, c) for c in sd.WEIGHT_COLUMNS[kind] if (there_, c) not in found_cols]

    def script() -> Generator[st.Stmt, st.Result, None]:
        there = existing
        if b.driver.schema_guard_sql is not None:
            yield st.Stmt(b.driver.schema_guard_sql, (sn.advisory_key(f"distlock-schema:{b.prefix}"),))
            if b.driver.existing_tables_sql is not None:
                # Read again under the guard: a store that waited for another's creation creates nothing. A
                # "CREATE INDEX IF NOT EXISTS" of an index that exists still takes its table's SHARE lock first
                # (PostgreSQL), held to the end of this transaction, and stores already locking on the new tables
                # queued behind it (and it behind them): 8 stores opening at once on a fresh prefix timed out.
                now = yield st.Stmt(str(b.driver.existing_tables_sql))
                there = existing | {str(row[0]).lower() for row in now.rows}
        for stmt in (
            *b.dialect.schema,
            *b.ops.extra_schema(),
            *ss.session_schema(b.dialect, b.prefix, b.fast_session),
            *b._mode_schema(),
        ):
            if sd.created_name(stmt).lower() not in there:
                yield st.Stmt(stmt)
        if old_holders:
            yield from b.ops.upgrade()
        yield from b.ops.seed()
        cleanup = b._open_cleanup()
        if cleanup is not None:
            yield cleanup

    b._tx(script, tx=b.driver.schema_guard_sql is not None)
    if old_queue and not _add_queue_column(
        b, queue, "owner", "releases will not hand the name over directly (they wake the next waiter)"
    ):
        b.ops.handover = False
    if no_reply and not _add_queue_column(
        b, queue, "reply", "hand-overs are told to every listening store, not to the waiter's alone"
    ):
        b.ops.replies = False
    if no_asked and not _add_queue_column(
        b, holders, "asked", "request_release() is refused here, and holders hear of no release request"
    ):
        b.ops.asks = False
    if no_session_asked and not _add_queue_column(
        b, records, "asked", "request_release() is refused in session mode, and its holders hear of none"
    ):
        b.session_asks = False
    for table, column in unweighed:
        if not _add_queue_column(
            b, table, column, "semaphores are refused in lease mode here", kind="INTEGER"
        ):
            b.ops.weights = False
            break
    deadline = monotonic() + 2.0
    try:
        while monotonic() < deadline:  # the rows 0.1.0 left, one per name it ever locked
            if b._tx(lambda: b.ops.sweep()) < sq.SWEEP_BATCH:
                break
    except BackendError as exc:  # a big table: the renewer's sweeps go on with it
        log.debug("sweep at open failed: %s", exc)


def _add_queue_column(b: SqlBase, queue: str, column: str, without: str, kind: str = "TEXT") -> bool:
    """Give a table of an earlier version a column this one writes: the queue's ``owner`` (PostgreSQL; made
    before the direct hand-over: the owner record a promoted holder row needs) or ``reply`` (made before the
    stores' own NOTIFY channels), the holders' ``asked`` (made before release requests; nullable, so an older
    client's rows and INSERTs read no request), the semaphores' numbers of both (``dialects.WEIGHT_COLUMNS``,
    made before weighted semaphores; nullable: an older client's row takes one permit and carries no numbers).
    False where the store's role may not alter the table: the store then goes on ``without`` what the column
    is for and says so once; an admin's ``distlock init`` adds it."""
    try:
        b._tx(
            lambda: st.single(st.Stmt(f"ALTER TABLE {queue} ADD COLUMN IF NOT EXISTS {column} {kind} NULL")),
            tx=False,
        )
    except BackendError as exc:
        log.warning(
            "%s has no %s column and this role cannot add it (%s): %s; run `distlock init` as the tables' "
            "owner to add it",
            queue,
            column,
            type(exc.__cause__).__name__ if exc.__cause__ is not None else "error",
            without,
        )
        return False
    return True


class LazyTable:
    """A table made at its first use rather than at open (the latches', the barriers'), under the schema guard
    (PostgreSQL: concurrent CREATEs of one table collide), once per store."""

    def __init__(self, ddl: Callable[[sd.Dialect, str], str]) -> None:
        self._ddl = ddl
        self._ready: weakref.WeakSet[SqlBase] = weakref.WeakSet()

    def ensure(self, b: SqlBase) -> None:
        if b in self._ready:
            return

        def script() -> Generator[st.Stmt, st.Result, None]:
            if b.driver.schema_guard_sql is not None:
                yield st.Stmt(b.driver.schema_guard_sql, (sn.advisory_key(f"distlock-schema:{b.prefix}"),))
            yield st.Stmt(self._ddl(b.dialect, b.prefix))

        b._tx(script, tx=b.driver.schema_guard_sql is not None)
        self._ready.add(b)

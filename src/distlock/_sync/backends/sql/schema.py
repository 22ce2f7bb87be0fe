# GENERATED from src/distlock/_async/backends/sql/schema.py by scripts/gen_sync.py: edit that file, not this one.
"""Creating the tables when a store opens, and the upgrade from 0.1.0's layout.

Every statement comes from ``_core/sql_lease.py`` (the shared tables, the session mode's records) or from
the mode (``SqlBase._mode_schema``); the dialect says how to list what exists (``existing_tables_sql``)
and whether the DDL needs a guard (``schema_guard_sql``).
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import TYPE_CHECKING

from ...._core import sql_dialects as sd
from ...._core import sql_lease as sq
from ...._core import sql_session as ss
from ...._core.timing import monotonic
from ...._errors import BackendError

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
    if b.existing_tables_sql is not None:
        found: sq.Result = b._tx(lambda: sq.single(sq.Stmt(str(b.existing_tables_sql))), tx=False)
        existing = {str(row[0]).lower() for row in found.rows}
    old_holders = False
    if f"{b.prefix}_holders" in existing:
        col: sq.Result = b._tx(
            lambda: sq.single(
                sq.Stmt(
                    "SELECT 1 FROM information_schema.columns WHERE table_schema = "
                    f"{b.schema_sql} AND table_name = %s AND column_name = 'layout'",
                    (f"{b.prefix}_holders",),
                )
            ),
            tx=False,
        )
        old_holders = not col.rows

    def script() -> Generator[sq.Stmt, sq.Result, None]:
        if b.schema_guard_sql is not None:
            yield sq.Stmt(b.schema_guard_sql, (sq.advisory_key(f"distlock-schema:{b.prefix}"),))
        for stmt in (
            *b.dialect.schema,
            *b.ops.extra_schema(),
            *ss.session_schema(b.dialect, b.prefix, b.fast_session),
            *b._mode_schema(),
        ):
            if sd.created_name(stmt).lower() not in existing:
                yield sq.Stmt(stmt)
        if old_holders:
            yield from b.ops.upgrade()
        yield from b.ops.seed()
        cleanup = b._open_cleanup()
        if cleanup is not None:
            yield cleanup

    b._tx(script, tx=b.schema_guard_sql is not None)
    deadline = monotonic() + 2.0
    try:
        while monotonic() < deadline:  # the rows 0.1.0 left, one per name it ever locked
            if b._tx(lambda: b.ops.sweep()) < sq.SWEEP_BATCH:
                break
    except BackendError as exc:  # a big table: the renewer's sweeps go on with it
        log.debug("sweep at open failed: %s", exc)

# GENERATED from src/distlock/_backends/sql/_async/barrier.py by scripts/gen_sync.py: edit that file, not this one.
"""The SQL stores' barriers (``sql/barrier.py`` has the table and the statements): the table made at a store's
first barrier call, one transaction per step."""

from __future__ import annotations

import weakref
from collections.abc import Generator
from typing import TYPE_CHECKING

from ...._core import barrier as rules
from ...._core.timing import wall_ms
from .. import barrier as sb
from .. import names as sn
from .. import stmt as st

if TYPE_CHECKING:
    from .base import SqlBase

#: the stores whose barriers' table is known to exist
_READY: weakref.WeakSet[SqlBase] = weakref.WeakSet()


def _ensure(b: SqlBase) -> None:
    if b in _READY:
        return

    def script() -> Generator[st.Stmt, st.Result, None]:
        if b.driver.schema_guard_sql is not None:  # PostgreSQL: concurrent CREATEs of one table collide
            yield st.Stmt(b.driver.schema_guard_sql, (sn.advisory_key(f"distlock-schema:{b.prefix}"),))
        yield st.Stmt(sb.table(b.dialect, b.prefix))

    b._tx(script, tx=b.driver.schema_guard_sql is not None)
    _READY.add(b)


def step(b: SqlBase, kind: str, name: str, op: rules.Op) -> rules.Reply:
    _ensure(b)
    key = sn.name_key(name)
    return b._tx(lambda: sb.step(b.dialect, b.prefix, kind, key, name, op, wall_ms()))

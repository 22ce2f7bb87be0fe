"""The SQL stores' count-down latches (``sql/latch.py`` has the table and the statements): the table made at a
store's first latch call, one transaction per step, and the waiters' wake-up (``LeaseMode``'s, where its
dialect pushes: PostgreSQL's LISTEN; else a poll every ``AsyncWatch.POLL`` seconds).
"""

from __future__ import annotations

import weakref
from collections.abc import Generator
from typing import TYPE_CHECKING

from ...._core.latch import LatchState
from .. import latch as sl
from .. import names as sn
from .. import stmt as st

if TYPE_CHECKING:
    from .base import SqlBase

#: the stores whose latches' table is known to exist
_READY: weakref.WeakSet[SqlBase] = weakref.WeakSet()


async def _ensure(b: SqlBase) -> None:
    if b in _READY:
        return

    def script() -> Generator[st.Stmt, st.Result, None]:
        if b.driver.schema_guard_sql is not None:  # PostgreSQL: concurrent CREATEs of one table collide
            yield st.Stmt(b.driver.schema_guard_sql, (sn.advisory_key(f"distlock-schema:{b.prefix}"),))
        yield st.Stmt(sl.table(b.dialect, b.prefix))

    await b._tx(script, tx=b.driver.schema_guard_sql is not None)
    _READY.add(b)


async def open_latch(b: SqlBase, name: str, count: int | None, round_id: str) -> LatchState | None:
    await _ensure(b)
    key = sn.name_key(name)
    return await b._tx(lambda: sl.open_latch(b.dialect, b.prefix, key, name, count, round_id))


async def count_down(b: SqlBase, name: str, round_id: str, step: str, linger: float) -> tuple[int, str | None]:
    """The count after, and the wake-up key to wake this store's own waiters with (None: not at zero now)."""
    await _ensure(b)
    key = sn.name_key(name)
    channel = b.ops.channel
    left, reached = await b._tx(lambda: sl.count_down(b.dialect, b.prefix, channel, key, round_id, step, linger))
    return left, sl.wake_key(key) if reached else None

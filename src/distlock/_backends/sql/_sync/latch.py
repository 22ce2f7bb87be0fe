# GENERATED from src/distlock/_backends/sql/_async/latch.py by scripts/gen_sync.py: edit that file, not this one.
"""The SQL stores' count-down latches (``sql/latch.py`` has the table and the statements): the table made at a
store's first latch call, one transaction per step, and the waiters' wake-up (``LeaseMode``'s, where its
dialect pushes: PostgreSQL's LISTEN; else a poll every ``AsyncWatch.POLL`` seconds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...._core.latch import LatchState
from .. import latch as sl
from .. import names as sn
from .. import stmt as st
from .schema import LazyTable

if TYPE_CHECKING:
    from .base import SqlBase

_TABLE = LazyTable(sl.table)


def listing(b: SqlBase, existing: set[str]) -> list[tuple[str, int, int]]:
    """Every latch (name, initial, count); none when the table was never made (``existing``: the tables, lower
    case): a listing creates nothing."""
    if f"{b.prefix}_latches".lower() not in existing:
        return []
    found = b._tx(lambda: st.single(sl.listing(b.dialect, b.prefix)), tx=False)
    return [(str(n), st.to_int(i), max(0, st.to_int(c))) for n, i, c in found.rows]


def open_latch(b: SqlBase, name: str, count: int | None, round_id: str) -> LatchState | None:
    _TABLE.ensure(b)
    key = sn.name_key(name)
    return b._tx(lambda: sl.open_latch(b.dialect, b.prefix, key, name, count, round_id))


def count_down(b: SqlBase, name: str, round_id: str, step: str, linger: float) -> tuple[int, str | None]:
    """The count after, and the wake-up key to wake this store's own waiters with (None: not at zero now)."""
    _TABLE.ensure(b)
    key = sn.name_key(name)
    channel = b.ops.channel
    left, reached = b._tx(lambda: sl.count_down(b.dialect, b.prefix, channel, key, round_id, step, linger))
    return left, sl.wake_key(key) if reached else None

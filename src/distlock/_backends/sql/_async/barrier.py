"""The SQL stores' barriers (``sql/barrier.py`` has the table and the statements): the table made at a store's
first barrier call, one transaction per step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...._core import barrier as rules
from ...._core.timing import wall_ms
from ...._core.types import PrimitiveInfo
from .. import barrier as sb
from .. import names as sn
from .. import stmt as st
from .schema import LazyTable

if TYPE_CHECKING:
    from .base import SqlBase

_TABLE = LazyTable(sb.table)


async def listing(b: SqlBase, existing: set[str]) -> list[tuple[str, str, PrimitiveInfo | None]]:
    """Every barrier row (kind, name, what ``list`` shows of it); none when the table was never made."""
    if f"{b.prefix}_barriers".lower() not in existing:
        return []
    select = st.Stmt(f"SELECT kind, name, record FROM {b.prefix}_barriers")
    found = await b._tx(lambda: st.single(select), tx=False)
    now = wall_ms()
    return [(str(k), str(n), rules.summary(str(k), str(n), str(r) or None, now)) for k, n, r in found.rows]


async def step(b: SqlBase, kind: str, name: str, op: rules.Op) -> rules.Reply:
    await _TABLE.ensure(b)
    key = sn.name_key(name)
    return await b._tx(lambda: sb.step(b.dialect, b.prefix, kind, key, name, op, wall_ms()))

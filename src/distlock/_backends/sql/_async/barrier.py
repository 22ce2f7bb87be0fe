"""The SQL stores' barriers (``sql/barrier.py`` has the table and the statements): the table made at a store's
first barrier call, one transaction per step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...._core import barrier as rules
from ...._core.timing import wall_ms
from .. import barrier as sb
from .. import names as sn
from .schema import LazyTable

if TYPE_CHECKING:
    from .base import SqlBase

_TABLE = LazyTable(sb.table)


async def step(b: SqlBase, kind: str, name: str, op: rules.Op) -> rules.Reply:
    await _TABLE.ensure(b)
    key = sn.name_key(name)
    return await b._tx(lambda: sb.step(b.dialect, b.prefix, kind, key, name, op, wall_ms()))

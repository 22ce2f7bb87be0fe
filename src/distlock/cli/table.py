"""The one table of held locks that ``status``, ``list`` and ``list --watch`` print (and ``_json``, their JSON).

Columns: NAME KIND OWNER FENCE MODE LEFT WAITERS CLIENT, one row per holder (CLIENT: the holder's client name,
``-`` if it has none; last, so that the columns before it keep their places for scripts that cut them). Kept
apart from ``watch`` so that the one-shot commands print the same table without importing rich and the terminal handling.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .._core.types import LockInfo

COLUMNS = ("NAME", "KIND", "OWNER", "FENCE", "MODE", "LEFT", "WAITERS", "CLIENT")
#: the columns rich aligns to the right (numbers)
RIGHT = frozenset({"FENCE", "LEFT", "WAITERS"})


def to_json(info: LockInfo) -> dict[str, Any]:
    return {"held": bool(info.holders), **info.to_json()}


def rows(locks: Iterable[LockInfo], elapsed: float = 0.0) -> Iterator[tuple[str, ...]]:
    """The table's rows; ``elapsed``: seconds since the read, taken off each holder's seconds left."""
    for info in locks:
        waiters = "?" if info.waiters is None else str(info.waiters)
        for h in info.holders:
            left = "session" if h.ttl_left is None else f"{max(0.0, h.ttl_left - elapsed):.1f}"
            owner = h.owner if h.value is None else f"{h.owner} ({h.value})"
            yield (info.name, info.kind, owner, str(h.fence), h.mode, left, waiters, h.client_name or "-")


def plain(locks: Iterable[LockInfo]) -> str:
    """The table as aligned text, header first, ending with a newline."""
    table = [COLUMNS, *rows(locks)]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines) + "\n"

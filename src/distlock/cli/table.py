"""The one table of held locks that ``status``, ``list`` and ``list --watch`` print (and ``_json``, their JSON).

Columns: NAME KIND OWNER FENCE MODE LEFT WAITERS CLIENT, one row per holder (MODE: a semaphore holding's
permits, ``2 of 5 permits``; CLIENT: the holder's client name,
``-`` if it has none; last, so that the columns before it keep their places for scripts that cut them). Kept
apart from ``watch`` so that the one-shot commands print the same table without importing rich and the terminal handling.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .._core.types import HolderInfo, LockInfo, PrimitiveInfo

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
            yield (info.name, info.kind, owner, str(h.fence), _mode(info, h), left, waiters, h.client_name or "-")


def _mode(info: LockInfo, holder: HolderInfo) -> str:
    """A semaphore holding's MODE is what it takes: ``2 of 5 permits`` (its permits of the capacity in force;
    ``2 permits`` where the backend does not say the capacity); any other holding's, its mode."""
    if holder.permits is None:
        return holder.mode
    if info.permits is not None:
        return f"{holder.permits} of {info.permits} permits"
    return f"{holder.permits} permit" + ("" if holder.permits == 1 else "s")


def plain(locks: Iterable[LockInfo]) -> str:
    """The table as aligned text, header first, ending with a newline."""
    return _aligned(COLUMNS, list(rows(locks)))


#: the second table of ``list``: the latches and barriers (where the backend can list them)
PRIMITIVE_COLUMNS = ("NAME", "KIND", "STATE")


def primitive_rows(prims: Iterable[PrimitiveInfo]) -> Iterator[tuple[str, ...]]:
    for p in prims:
        if p.kind == "latch":
            state = "at zero" if p.count == 0 else f"{p.count} of {p.initial} left"
        else:
            state = f"{p.arrived} arrived" + (f", {p.tripped} released not yet seen" if p.tripped else "")
        yield (p.name, p.kind, state)


def plain_primitives(prims: Iterable[PrimitiveInfo]) -> str:
    """The latches and barriers as aligned text, a blank line first; empty when there are none."""
    found = list(primitive_rows(prims))
    return "" if not found else "\n" + _aligned(PRIMITIVE_COLUMNS, found)


def _aligned(columns: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    table = [columns, *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines) + "\n"

# GENERATED from src/distlock/_backends/redis/_async/barrier.py by scripts/gen_sync.py: edit that file, not this one.
"""Barriers on one Redis server, a Sentinel's master or a cluster: a read and a compare-and-set of the barrier's
own key (``keys.barrier_key``, in the slot of the name's keys), each one ``EVAL`` of ``lua/barrier.py``."""

from __future__ import annotations

from typing import Any

from ...._core import barrier
from ...._core.timing import wall_ms
from ...._core.types import PrimitiveInfo
from .. import keys as rk
from ..lua import barrier as lua
from .node import Node


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def read(node: Node, kind: str, name: str) -> tuple[str | None, object]:
    node.check_slot(name)
    (reply,) = node.run([("EVAL", lua.READ, 1, rk.barrier_key(kind, name))], "barrier")
    data = _text(reply)
    return (data or None), data


def listing(node: Node, prefix: str) -> list[tuple[str, str, PrimitiveInfo | None]]:
    """Every barrier and double barrier whose name starts with ``prefix``: (kind, name, what ``list`` shows)."""
    out = []
    for kind, suffix in rk.BARRIER_SUFFIXES.items():
        for name in node.names(prefix, suffix):
            data, _version = read(node, kind, name)
            out.append((kind, name, barrier.summary(kind, name, data, wall_ms())))
    return out


def cas(node: Node, kind: str, name: str, version: object, data: str | None, keep_ms: int) -> bool:
    node.check_slot(name)
    key = rk.barrier_key(kind, name)
    (reply,) = node.run([("EVAL", lua.CAS, 1, key, str(version), data or "", keep_ms)], "barrier")
    return int(reply) == 1

"""Barriers on one Redis server, a Sentinel's master or a cluster: a read and a compare-and-set of the barrier's
own key (``keys.barrier_key``, in the slot of the name's keys), each one ``EVAL`` of ``lua/barrier.py``."""

from __future__ import annotations

from typing import Any

from .. import keys as rk
from ..lua import barrier as lua
from .node import Node


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def read(node: Node, kind: str, name: str) -> tuple[str | None, object]:
    node.check_slot(name)
    (reply,) = await node.run([("EVAL", lua.READ, 1, rk.barrier_key(kind, name))], "barrier")
    data = _text(reply)
    return (data or None), data


async def cas(node: Node, kind: str, name: str, version: object, data: str | None, keep_ms: int) -> bool:
    node.check_slot(name)
    key = rk.barrier_key(kind, name)
    (reply,) = await node.run([("EVAL", lua.CAS, 1, key, str(version), data or "", keep_ms)], "barrier")
    return int(reply) == 1

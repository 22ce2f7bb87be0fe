"""Count-down latches on one Redis server, a Sentinel's master or a cluster: each step is one ``EVAL`` of a
script of ``lua/latch.py`` on the latch's own key (``keys.latch_key``, in the slot of the name's keys), and
waiters are woken through the store's pub/sub ``Listener`` on the latch's channel (a ``RedisWatch``).
"""

from __future__ import annotations

from typing import Any

from ...._async.backend import AsyncWatch
from ...._core.latch import LatchState
from .. import keys as rk
from ..calls import ms
from ..lua import latch as lua
from .node import Node
from .watch import RedisWatch


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


async def open_latch(node: Node, name: str, count: int | None, round_id: str) -> LatchState | None:
    node.check_slot(name)
    key = rk.latch_key(name)
    (reply,) = await node.run([("EVAL", lua.OPEN, 1, key, "" if count is None else count, round_id)], "latch")
    if not reply or reply[0] is None:
        return None
    round_of, initial, left = (_text(v) for v in reply)
    return LatchState(round_of, int(initial), int(left))


async def listing(node: Node, prefix: str) -> list[tuple[str, int, int]]:
    """Every latch whose name starts with ``prefix`` (name, initial, count): a SCAN, then a read of each."""
    out = []
    for name in await node.names(prefix, rk.LATCH_SUFFIX):
        state = await open_latch(node, name, None, "")
        if state is not None:
            out.append((name, state.initial, state.count))
    return out


async def count_down(node: Node, name: str, round_id: str, step: str, linger: float) -> int:
    node.check_slot(name)
    key = rk.latch_key(name)
    (reply,) = await node.run([("EVAL", lua.COUNT_DOWN, 1, key, key, round_id, step, ms(linger))], "latch")
    return int(reply)


async def watch(node: Node, name: str) -> AsyncWatch:
    node.check_slot(name)
    waiter = RedisWatch([node.listener], 1, name, channel=rk.latch_key(name))
    await waiter.arm()
    return waiter

"""Redlock's fan-out on the asyncio side: one request to several servers, concurrently, with one deadline (a
task per server); ``_fanout_sync.py`` is its twin.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ..._core.text import seconds
from ._driver_async import recheck_cancel


async def scatter(requests: Sequence[tuple[Any, bytes, str | None]], timeout: float, fanout: Fanout) -> list[Any]:
    """Pre-encoded requests, each ``(wire, packed, expect)``, one per server, concurrently with one deadline.
    Each result is the reply, or the exception (``TimeoutError`` if none came in time); a wire whose reply is
    still due when the deadline passes is cancelled, and closes that connection."""
    calls = [functools.partial(w.call, p, None, None, e) for w, p, e in requests]
    out = await fanout.gather(calls, timeout)
    recheck_cancel()
    return out


class Fanout:
    """Run one call per server concurrently with a common deadline (Redlock's parallel requests)."""

    def __init__(self, width: int) -> None:
        self.width = width

    async def gather(self, calls: Sequence[Callable[[], Awaitable[Any]]], timeout: float) -> list[Any]:
        """Each call's result, or the exception it raised, or ``TimeoutError`` if it did not finish in time."""
        tasks = [asyncio.ensure_future(c()) for c in calls]
        try:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
        except BaseException:
            for t in tasks:
                t.cancel()
            raise
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)
        out: list[Any] = []
        for t in tasks:
            if t in done and not t.cancelled():
                exc = t.exception()
                out.append(exc if exc is not None else t.result())
            else:
                out.append(TimeoutError(f"no reply within {seconds(timeout)}"))
        return out

    def close(self) -> None:
        pass

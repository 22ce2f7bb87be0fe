"""How the MySQL backend runs PyMySQL's blocking calls on the async side; ``_my_sync.py`` is its twin.

PyMySQL blocks, so on an event loop every call runs in a worker thread. The backend's own pool of
threads is used, not asyncio's default executor: waiters block in server-side waits (``GET_LOCK`` with a
timeout) and must not starve the short calls (a release) of threads.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_POOL = ThreadPoolExecutor(max_workers=256, thread_name_prefix="distlock-mysql")


async def call(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a worker thread, in a copy of the caller's context (its call budget goes along)."""
    ctx = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_POOL, functools.partial(ctx.run, fn, *args))

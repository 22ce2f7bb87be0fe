"""Concurrency helpers for async tests; ``concurrency_sync.py`` is the threaded twin (same names).

Generated sync tests import that one instead (scripts/gen_sync.py swaps the module name).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def other_owner(fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` as a different owner (another task) and return its result."""
    return await asyncio.create_task(fn())  # type: ignore[arg-type]


async def run_all(*fns: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run every ``fn`` concurrently, each as its own owner; re-raise the first error."""
    return list(await asyncio.gather(*(asyncio.create_task(f()) for f in fns)))  # type: ignore[arg-type]


async def sleep(seconds: float) -> None:
    await asyncio.sleep(seconds)

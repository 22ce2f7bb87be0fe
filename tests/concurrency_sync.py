"""Concurrency helpers for sync tests: threads (see ``concurrency_async.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def other_owner(fn: Callable[[], T]) -> T:
    """Run ``fn`` as a different owner (another thread) and return its result."""
    with ThreadPoolExecutor(1) as ex:
        return ex.submit(fn).result()


def run_all(*fns: Callable[[], Any]) -> list[Any]:
    """Run every ``fn`` concurrently, each in its own thread; re-raise the first error."""
    with ThreadPoolExecutor(len(fns)) as ex:
        futures = [ex.submit(f) for f in fns]
        return [f.result() for f in futures]


def sleep(seconds: float) -> None:
    time.sleep(seconds)

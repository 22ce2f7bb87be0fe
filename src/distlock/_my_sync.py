"""Sync twin of ``_my_async.py``: PyMySQL's blocking calls run inline in the calling thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def call(fn: Callable[..., T], *args: Any) -> T:
    return fn(*args)

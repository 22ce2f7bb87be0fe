# GENERATED from src/distlock/_backends/sqlite/_async/calls.py by scripts/gen_sync.py: edit that file, not this one.
"""How the async side runs an operation (``ops.Ops``) on SQLite's blocking driver: right here when it cannot
wait, else in a worker thread (on the sync side, both are a plain call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .... import _rt_sync as rt
from ..db import Db

T = TypeVar("T")


def call(db: Db, fn: Callable[..., T], *args: Any) -> T:
    # Fast path: when neither our guard nor the database's write lock is taken, the whole transaction is a
    # few tens of microseconds of CPU, cheaper to run right here than to hand to a worker thread (that
    # hop made the async side 2-4x slower than the sync side). Anything that would wait goes to a thread.
    now = db.inline(fn, *args)
    if now:
        return now[0]
    # A cancelled transaction still ends (within the busy timeout) before the cancellation is raised, so
    # the clean-up that follows (abandon) runs after it, never before a grant it would then miss.
    result: T = rt.offload(db.locked, fn, *args)
    return result

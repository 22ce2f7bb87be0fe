"""What ``distlock list --watch`` reads: the held locks under a prefix, then again whenever they may have changed.

The backend's ``AsyncPrefixWatch`` is armed before the first read, so a change
after a read makes the watch say so and the next read shows it (etcd pushes; the others are polled every
``AsyncPrefixWatch.POLL`` seconds). Two things change without an event, so they bound the wait too: a lease
that runs out (a crashed holder's lock frees itself, no write on Redis or SQL) is read again just after its
seconds left are up, and every ``RECHECK`` seconds the locks are read whatever the watch said (a push
stream on a member cut off from its cluster goes quiet rather than failing).

A snapshot counts as changed when a lock, a holder (owner, fence, mode, value) or a waiter count differs;
seconds left alone do not count (each renewal changes them), the caller counts them down from ``read_at``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from .. import _rt_async as rt
from .._core.timing import monotonic
from .._core.types import LockInfo
from .backend import AsyncBackend

#: the longest the watcher trusts a snapshot without reading again, push or not
RECHECK = 2.0
#: read a lease's lock again this long after its seconds left are up (the server frees it at that moment)
EXPIRY_SLACK = 0.05


@dataclass(frozen=True)
class Snapshot:
    """The held locks under the prefix as one read saw them. ``read_at`` is the monotonic moment the read
    started: a holder's seconds left now are at most ``ttl_left - (now - read_at)``."""

    locks: tuple[LockInfo, ...]
    read_at: float
    changed: bool


def _key(locks: tuple[LockInfo, ...]) -> tuple[Any, ...]:
    return tuple(
        (i.name, i.kind, i.waiters, tuple((h.owner, h.client_name, h.fence, h.mode, h.value) for h in i.holders))
        for i in locks
    )


def _next_read(locks: tuple[LockInfo, ...], read_at: float) -> float:
    """When to read again without a wake-up: at the first lease end, at the latest after RECHECK."""
    lefts = [h.ttl_left for i in locks for h in i.holders if h.ttl_left is not None]
    return read_at + min([RECHECK, *(left + EXPIRY_SLACK for left in lefts)])


async def snapshots(backend: AsyncBackend, prefix: str, tick: float | None = None) -> AsyncIterator[Snapshot]:
    """The held locks under ``prefix`` now, then each time they change (forever). With ``tick``, also the
    last snapshot again (``changed=False``) every ``tick`` seconds, for a live countdown; it is read again
    only when the watch or a lease end says so."""
    watch = await backend.watch_prefix(prefix)
    try:
        last: tuple[Any, ...] | None = None
        locks: tuple[LockInfo, ...] = ()
        read, changed, read_at, due = True, False, 0.0, 0.0
        while True:
            if read:
                read_at = monotonic()
                locks = tuple(await backend.list(prefix))
                key = _key(locks)
                changed, last = key != last, key
                due = _next_read(locks, read_at)
            if changed or tick is not None:
                yield Snapshot(locks, read_at, changed)
                changed = False
            left = max(0.0, due - monotonic())
            read = await watch.wait(left if tick is None else min(tick, left)) or monotonic() >= due
    finally:
        await rt.shielded(watch.aclose())

# GENERATED from src/distlock/_async/leading.py by scripts/gen_sync.py: edit that file, not this one.
"""``election.lead(fn)``: the leader loop a service runs (Curator's ``LeaderSelector`` with ``autoRequeue``,
client-go's ``RunOrDie``), written once for both sides.

Campaign; once leading, call ``on_started``, run ``fn(election)``, then give the leadership back (resign, or
nothing to give when it was lost) and call ``on_stopped``; with ``requeue`` campaign again. On asyncio ``fn``
runs inside ``lease_timeout()``: it is cancelled at the loss and the loop goes on. A thread cannot be cancelled,
so on the threaded side ``fn`` is told by ``election.lost`` (or ``check()``) and ends by returning.

A backend that fails a campaign (a server restarting, a failover) is waited out with a capped backoff rather
than ending the loop: a service's leader loop must outlive its coordinator's restarts. An exception from ``fn``
itself resigns and propagates: a bug in the leader's work is not retried in a tight loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _idiom_sync as idiom
from .. import _rt_sync as rt
from .._core.text import seconds
from .._core.types import LeaderInfo
from .._errors import BackendError, LockLost, NotHeld

if TYPE_CHECKING:
    from .election import Election

log = logging.getLogger("distlock")

#: the first and the longest wait before campaigning again after a backend error
RETRY_FIRST, RETRY_MAX = 0.5, 10.0
#: how long one watch of the leader runs before the watcher checks whether the loop ended
WATCH_SLICE = 1.0

ElectionCallback = Callable[[Any], object]
LeaderCallback = Callable[[LeaderInfo | None], object]


def lead(
    election: Election,
    fn: idiom.LeaderWork,
    *,
    requeue: bool,
    value: str | None,
    on_started: ElectionCallback | None,
    on_stopped: ElectionCallback | None,
    on_new_leader: LeaderCallback | None,
) -> int:
    """The loop of ``AsyncElection.lead``; the number of terms led."""
    ended: list[bool] = []
    watcher = None
    if on_new_leader is not None:
        watcher = rt.Background(lambda: _watch_leaders(election, on_new_leader, ended), "distlock-leader-watch")
    terms = 0
    try:
        while True:
            _campaign(election, value)
            terms += 1
            try:
                _term(election, fn, on_started)
            finally:
                if on_stopped is not None:
                    on_stopped(election)
            if not requeue:
                return terms
    finally:
        ended.append(True)
        if watcher is not None:
            watcher.cancel()
            watcher.join(WATCH_SLICE * 2)


def _campaign(election: Election, value: str | None) -> None:
    """Campaign until leading, waiting out backend errors (capped backoff)."""
    wait = RETRY_FIRST
    while True:
        try:
            if election.campaign(value):
                return
        except BackendError as exc:
            log.warning("lead %r: campaign failed (%s); again in %s", election.name, exc, seconds(wait))
            rt.sleep(wait)
            wait = min(wait * 2, RETRY_MAX)


def _term(election: Election, fn: idiom.LeaderWork, on_started: ElectionCallback | None) -> None:
    """One leadership: ``on_started``, ``fn`` in the scope that ends at the loss; then the leadership given
    back (whatever ``on_started`` or ``fn`` raised)."""
    try:
        if on_started is not None:
            on_started(election)
        with idiom.leading_scope(election):
            fn(election)
    except LockLost:
        log.warning("lead %r: leadership lost while leading", election.name)
    finally:
        with contextlib.suppress(LockLost, NotHeld):  # lost: nothing to give back but the object's state
            election.resign()


def _watch_leaders(election: Election, callback: LeaderCallback, ended: list[bool]) -> None:
    """``on_new_leader``: each change of leader (None: no leader), from a worker of its own, in slices so that
    the threaded side's worker sees the loop's end (a task is cancelled instead)."""
    last: object = object()
    while not ended:
        try:
            for info in election._observe(WATCH_SLICE):
                key = None if info is None else (info.term, info.owner, info.value)
                if key != last and not ended:
                    last = key
                    try:
                        callback(info)
                    except Exception:  # user code must not stop the watcher
                        log.exception("on_new_leader callback %r raised", callback)
        except BackendError as exc:
            log.warning("lead %r: watching the leader failed (%s)", election.name, exc)
            rt.sleep(WATCH_SLICE)

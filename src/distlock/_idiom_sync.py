"""How the sync side guides its callers (the twin of ``_idiom_async.py``): ``async with`` on a sync object says
to use ``with`` (``SyncOnly``), a sync store's call made on a running event loop is warned about once
(``blocks_event_loop``), ``connect`` is a plain call (``opener``), and ``lease_timeout()`` is refused in one
line (``LeaseTimeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._wrong_form import WrongForm


# -- guiding the wrong form ---------------------------------------------------------------------------------
class SyncOnly(WrongForm):
    """Base of the sync side's context managers (the twin of the asyncio side's ``AsyncOnly``): ``async with``
    (instead of ``with``) fails with one line that says which form to use (``_wrong_form.py``)."""

    _wrong_form = (
        "`async with` on a sync {name}: this is a sync store: use `with` "
        "(or distlock.connect_async() for an asyncio store)"
    )

    if not TYPE_CHECKING:
        __aenter__ = WrongForm._refuse
        __aexit__ = WrongForm._unreached


_DISTLOCK = os.path.dirname(os.path.abspath(__file__)) + os.sep


class LeaseTimeout:
    """The asyncio side's ``lock.lease_timeout()``: a thread cannot be cancelled at an await, so here it is
    refused in one line that names what to do instead."""

    def __init__(self, *_: Any) -> None:
        raise TypeError(
            "lease_timeout() is for asyncio (it cancels the block at the lease end); in sync code call "
            "lock.check(margin) before each side effect, fence your writes, or run a process under `distlock run`"
        )


def blocks_event_loop() -> bool:
    """True, after a warning, if this thread is running an asyncio event loop: a sync store's call made there
    blocks every task of the loop until it returns. One C call when there is no loop."""
    if asyncio._get_running_loop() is None:
        return False
    level, frame = 2, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_DISTLOCK):  # point at the caller
        level, frame = level + 1, frame.f_back
    warnings.warn(
        "a sync distlock store was called on a running asyncio event loop: the call blocks every task of the "
        "loop until it returns; in async code use `await distlock.connect_async(...)`, or run the sync call "
        "in a thread (`await asyncio.to_thread(...)`)",
        RuntimeWarning,
        stacklevel=level,
    )
    return True


F = TypeVar("F")


def opener(fn: F) -> F:
    """``connect``: a plain call (the asyncio side's ``connect_async`` also makes an async context manager)."""
    return fn


#: what ``election.lead(fn)`` runs while leading: ``def fn(election)``
LeaderWork = Callable[[Any], object]


def leading_scope(election: Any) -> contextlib.nullcontext[None]:
    """``election.lead(fn)``'s scope on this side: a thread cannot be cancelled, so ``fn`` runs to its end and
    is told of a loss by ``election.lost`` (or ``election.check()``, which raises ``LockLost``)."""
    return contextlib.nullcontext()

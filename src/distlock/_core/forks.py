"""Which process a holding belongs to: the fork generation of this process.

A holding is the process's that acquired it. A child forked while it was held (a worker pool, a pre-fork
server's workers, ``multiprocessing`` with the fork start method, a daemonising helper) inherits the memory
that records it, but not the holding: the child's leaving a ``with`` block, closing its copy of the store or
taking a lock of its own must not release, renew or report the parent's. Every holding records the generation
it was granted in, and the lock layer and the lease clock drop, without a word to the backend, what a younger
generation finds of an older one.
"""

from __future__ import annotations

import os
import weakref
from typing import Protocol


class Forkable(Protocol):
    def after_fork(self) -> None:
        """In the child, right after the fork, before any other thread runs there."""


_generation = 0
#: objects whose ``after_fork`` the child calls (weakly held: a store that is gone needs nothing)
_tracked: weakref.WeakSet[Forkable] = weakref.WeakSet()


def _forked() -> None:
    global _generation
    _generation += 1
    for obj in list(_tracked):
        obj.after_fork()


def track(obj: Forkable) -> None:
    """Call ``obj.after_fork()`` in every child forked from now on. For the objects whose threading locks a
    thread of the parent may hold at the moment of the fork (a lease worker between two sleeps): the child has
    no such thread, so it must start with new locks or wait for ever."""
    _tracked.add(obj)


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork
    os.register_at_fork(after_in_child=_forked)


def generation() -> int:
    """How many forks this process is from the first one that imported distlock (0 there, 1 in its child...)."""
    return _generation

"""Which process a holding belongs to: the fork generation of this process.

A holding is the process's that acquired it. A child forked while it was held (a worker pool, a pre-fork
server's workers, ``multiprocessing`` with the fork start method, a daemonising helper) inherits the memory
that records it, but not the holding: the child's leaving a ``with`` block, closing its copy of the store or
taking a lock of its own must not release, renew or report the parent's. Every holding records the generation
it was granted in, and the lock layer and the lease clock drop, without a word to the backend, what a younger
generation finds of an older one.

Nor are the parent's connections, sessions and threads the child's: every backend forgets them in its
``after_fork`` (``track``), never closing them (``abandon``), and makes its own on first use, so the
child can lock through the store it inherited at once.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from typing import Protocol


class Forkable(Protocol):
    def after_fork(self) -> None:
        """In the child, right after the fork, before any other thread runs there."""


_generation = 0
#: objects whose ``after_fork`` the child calls (weakly held: a store that is gone needs nothing)
_tracked: weakref.WeakSet[Forkable] = weakref.WeakSet()
#: what a child inherited and must never finalize (``abandon``)
_abandoned: list[object] = []


def _forked() -> None:
    global _generation
    _generation += 1
    failed: BaseException | None = None
    for obj in list(_tracked):
        try:
            obj.after_fork()
        except Exception as exc:  # noqa: BLE001 - one object half made at the fork must not leave the others undone
            failed = failed or exc
    if failed is not None:
        raise failed  # reported by the interpreter (an exception in an at-fork hook is printed, not raised)


def track(obj: Forkable) -> None:
    """Call ``obj.after_fork()`` in every child forked from now on. For the objects whose threading locks a
    thread of the parent may hold at the moment of the fork (a lease worker between two sleeps): the child has
    no such thread, so it must start with new locks or wait for ever."""
    _tracked.add(obj)


if hasattr(os, "register_at_fork"):  # POSIX; elsewhere there is no fork
    os.register_at_fork(after_in_child=_forked)


def abandon(*objs: object) -> None:
    """In a forked child: never finalize ``objs`` (the parent's connections, their sockets, transports and
    drivers), for the life of the process. Closing one in the child would end or disturb the parent's: a
    driver's close can speak on the socket (PostgreSQL's Terminate, MySQL's COM_QUIT, a TLS close_notify, a
    ZooKeeper close-session that deletes the parent's ephemeral nodes), and an asyncio transport's close
    takes its socket out of the parent's event loop's epoll set, which the child shares. Their file
    descriptors stay open in the child until it exits; the server sees nothing, since the parent has them open
    too. Kept out of the interpreter's clean-up at exit as well (a reference it never drops), so no
    ``__del__`` runs then either."""
    incref = _incref()
    for obj in objs:
        if obj is None:
            continue
        _abandoned.append(obj)
        if incref is not None:
            incref(obj)


@functools.cache
def _incref() -> Callable[[object], object] | None:
    try:
        import ctypes

        incref = ctypes.pythonapi.Py_IncRef
    except (ImportError, AttributeError):  # not CPython: the list alone keeps them
        return None
    incref.argtypes = [ctypes.py_object]
    incref.restype = None
    return lambda obj: incref(obj)


def generation() -> int:
    """How many forks this process is from the first one that imported distlock (0 there, 1 in its child...)."""
    return _generation

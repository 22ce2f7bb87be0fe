"""The process-wide state of one side's SQLite stores: the waiting attempts per (database, name) and their
shared wake sockets, the one in-memory database, and the guards a fork takes first.

Each side (asyncio, threads) has its own ``Process``, made once by its ``_async/ears.py``: as before the
split, an asyncio waiter is never woken through a threaded one's waker, nor the reverse, and ``memory://``
is one database per side of a process. No async code: both sides import this module.

Forks: SQLite's own mutexes (its allocator's, a connection's) are plain pthread mutexes: one another thread
holds at the fork stays held in the child, whose first SQLite call would wait on it for ever. So before a
fork every guard of the side is taken (``hold_for_fork``); in the child the state is its own (``own``).
"""

from __future__ import annotations

import atexit
import os
import sqlite3
import threading
import time
import weakref
from typing import Generic, Protocol, TypeVar

from ..._core import forks
from ..._wakeup import Wakers
from . import queries as sql
from .wake import WakeDir, WakeSocket

#: how long a fork waits for the SQLite work other threads have in flight (``Process.hold_for_fork``)
FORK_WAIT = 1.0

#: a database and name: ``(db_key, name)``
Key = tuple[str, str]

E = TypeVar("E")


class Guarded(Protocol):
    """A store's connection (``db.Db``): the mutex a fork takes, read at the fork (a child makes a new one)."""

    guard: threading.Lock


class Hub(Generic[E]):
    """This process's one wake socket of a (database, name), shared by its waiters and observers of the name
    (``E``: the side's ``Ear``). The first of them (``reader``) reads it and passes each wake-up on through
    ``Process.wakers``; when it leaves, the role goes to the next, whose wait it ends (``kick``) so that it
    starts reading."""

    def __init__(self, socket: WakeSocket) -> None:
        self.socket = socket
        self.ears: dict[E, None] = {}  # in joining order; changed under Process.guard

    def reader(self) -> E | None:
        return next(iter(self.ears), None)


class Process(Generic[E]):
    """One side's process-wide state. Made once per side, at import: it registers its fork hooks (after
    ``forks``', so that its ``after_in_child`` runs after the stores' ``after_fork``, which read ``held``)."""

    def __init__(self) -> None:
        self.wakers: Wakers[Key] = Wakers()
        self.hubs: dict[Key, Hub[E]] = {}
        self.guard = threading.Lock()
        self.memory: tuple[sqlite3.Connection, threading.Lock] | None = None
        self.at_exit = False  # close_memory is registered
        self.gen = forks.generation()
        #: every store of the side, whose guard a fork takes first (weakly held: a store that is gone needs none)
        self.stores: weakref.WeakSet[Guarded] = weakref.WeakSet()
        #: the guards a fork took (``hold_for_fork``): in the child, their connections were idle at the fork
        self.held: list[threading.Lock] = []
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(
                before=self.hold_for_fork, after_in_parent=self.let_go_in_parent, after_in_child=self.let_go_in_child
            )

    def own(self) -> None:
        """In a forked child, once: a mutex of its own, none of the parent's wake sockets (each is bound to a
        path the parent's waiters read: never closed here, which would unlink it), and no in-memory database
        (the copy of the parent's holds the parent's holdings, which nobody in the child holds; and a thread
        of the parent may have been inside it). The child makes its own on first use."""
        if self.gen == forks.generation():
            return
        self.gen = forks.generation()
        forks.abandon(self.hubs, self.memory)
        self.hubs = {}
        self.memory = None
        self.guard = threading.Lock()

    def memory_db(self) -> tuple[sqlite3.Connection, threading.Lock]:
        """The side's in-memory database, made on first use."""
        self.own()
        with self.guard:
            if self.memory is None:
                conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
                self.memory = (conn, threading.Lock())
                sql.create_schema(conn)
                if not self.at_exit:
                    # the process-wide database lives as long as the process: closed at its exit, under its
                    # guard (Python 3.13 warns of a connection the garbage collector finds open: ResourceWarning)
                    self.at_exit = True
                    atexit.register(self.close_memory)
            return self.memory

    def close_memory(self) -> None:
        """At exit: the process's in-memory database (a forked child's own, not the copy of its parent's)."""
        with self.guard:
            memory = self.memory
        if memory is not None:
            conn, guard = memory
            with guard:
                conn.close()

    def wake(self, key: Key, wake_dir: WakeDir | None) -> None:
        """Tell waiters that the name may be free: in this process directly, in others by datagram."""
        self.wakers.wake(key)
        if wake_dir is not None:
            hub = self.hubs.get(key)
            wake_dir.wake(key[1], skip=hub.socket.path if hub is not None else None)

    def hold_for_fork(self) -> None:
        """Before a fork: take every SQLite guard of the side, a bounded wait in all, so that no other thread
        is inside SQLite at the fork. A guard not free in time (a transaction waiting for another process's
        write lock) is left as it is, and the child never touches its connection (``Db.after_fork``)."""
        end = time.monotonic() + FORK_WAIT
        guards = {id(g): g for g in [self.guard, *(s.guard for s in list(self.stores))]}  # memory: one
        held = []
        for guard in guards.values():
            if guard.acquire(timeout=max(0.0, end - time.monotonic())):
                held.append(guard)
        self.held = held

    def let_go_in_parent(self) -> None:
        held, self.held = self.held, []
        for guard in reversed(held):
            guard.release()

    def let_go_in_child(self) -> None:
        """After the stores' ``after_fork`` (which read ``held``): the child's process-wide state and guard are
        its own, and the inherited guards, held by the fork, are dropped."""
        self.own()
        self.held = []

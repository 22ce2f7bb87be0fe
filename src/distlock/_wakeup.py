"""Wake-ups of waiting attempts that have no server push, within a process (``Wakers``): the SQL lease
tables and SQLite (whose wake-ups across processes, UNIX datagram sockets, are ``_backends/sqlite/wake.py``).
"""

from __future__ import annotations

import threading
from typing import Generic, Protocol, TypeVar

from ._core import forks

K = TypeVar("K")


class Notifiable(Protocol):
    def notify(self) -> None: ...


class Wakers(Generic[K]):
    """The wakers of the attempts waiting in this process, per key (a name): a release in this process wakes
    them at once, without a round trip. Thread-safe; ``notify`` runs outside the mutex.

    One wake-up, one waiter: ``wake`` notifies only the earliest-registered waiter of the key (plus every
    observer), and a waiter that leaves while first (granted, given up, timed out, cancelled) passes a wake-up
    on to the next. Waking all of them made each release cost one transaction per waiter (each reads the whole
    queue), so 1,000 fair waiters handed off about once a second. One at a time still lets in everyone who can
    be granted together (readers, semaphore permits: each grant passes it on, one check each), and a leaving
    waiter never swallows a wake-up. A fair queue's head is the earliest of its own process as long as waiters
    register in queue order (the SQLite store registers inside the enqueueing transaction); where they may not,
    the bounded re-check slice is the safety net.

    Where the server numbers its queue (the SQL lease tables), waiters register ``queued`` instead and
    are told their place (``place``, the entry's sequence number) by their first refused try: a wake-up
    then goes to the placed waiter with the lowest place, the one of this process the server's queue serves
    first (registration order is not queue order there: waiters register before their first try), and to
    every waiter not placed yet (its place is unknown, so it may be the head). A placed waiter that leaves,
    or whose place moves back (its entry ran out and it joined again at the back), passes the turn on.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        #: waiters in registration order (a dict keeps it, and removes in O(1))
        self._waiting: dict[K, dict[Notifiable, None]] = {}
        #: observers (election watchers): every wake-up is theirs, they take no turn
        self._observers: dict[K, set[Notifiable]] = {}
        #: ``queued`` waiters by their place in the server's queue (None until their first refused try)
        self._places: dict[K, dict[Notifiable, int | None]] = {}
        forks.track(self)

    def after_fork(self) -> None:
        """A forked child has none of the parent's waiters (their threads and tasks are not there): a waiter
        of the parent left first in a line would take every wake-up meant for the child's own. And a guard of
        its own (a thread of the parent may have held this one at the fork)."""
        self._mutex = threading.Lock()
        self._waiting = {}
        self._observers = {}
        self._places = {}

    def watch(self, key: K, waker: Notifiable, *, every: bool = False, queued: bool = False) -> None:
        """Register ``waker``: a waiter (woken in turn), with ``every`` an observer (woken each time), with
        ``queued`` a waiter whose turn follows its place in the server's queue (see ``place``)."""
        with self._mutex:
            if every:
                self._observers.setdefault(key, set()).add(waker)
            elif queued:
                self._places.setdefault(key, {})[waker] = None
            else:
                self._waiting.setdefault(key, {})[waker] = None

    def place(self, key: K, waker: Notifiable, place: int | None) -> None:
        """A ``queued`` waiter's place in the server's queue (None: not queued there, woken every time).
        If it held the turn and no longer does, the new head of this process gets a wake-up."""
        nxt: Notifiable | None = None
        with self._mutex:
            places = self._places.get(key)
            if places is None or waker not in places:
                return
            before = _head(places)
            places[waker] = place
            if before is waker:
                nxt = _head(places)
                nxt = None if nxt is waker else nxt
        if nxt is not None:
            nxt.notify()

    def head(self, key: K) -> Notifiable | None:
        """The placed waiter of ``key`` with the lowest place (the one a wake-up goes to), or None."""
        with self._mutex:
            places = self._places.get(key)
            return None if places is None else _head(places)

    def unwatch(self, key: K, waker: Notifiable, *, pass_on: bool = True) -> None:
        """Unregister ``waker``. A waiter that leaves with the turn passes it on, unless ``pass_on`` is off (an
        exclusive grant: nobody else can be granted until its release, which wakes the next anyway)."""
        nxt: Notifiable | None = None
        with self._mutex:
            line = self._waiting.get(key)
            if line is not None and waker in line:
                first = next(iter(line)) is waker
                del line[waker]
                if not line:
                    del self._waiting[key]
                elif first and pass_on:
                    nxt = next(iter(line))  # the wake-up it may have had goes on, never lost with it
            group = self._observers.get(key)
            if group is not None:
                group.discard(waker)
                if not group:
                    del self._observers[key]
            places = self._places.get(key)
            if places is not None and waker in places:
                was_head = _head(places) is waker
                del places[waker]
                if not places:
                    del self._places[key]
                elif was_head and pass_on:
                    nxt = _head(places)
        if nxt is not None:
            nxt.notify()

    def first(self, key: K) -> Notifiable | None:
        """The waiter a wake-up of ``key`` goes to now (None if nobody waits)."""
        with self._mutex:
            return next(iter(self._waiting.get(key, ())), None)

    def wake(self, key: K) -> None:
        with self._mutex:
            line = self._waiting.get(key)
            targets = [next(iter(line))] if line else []
            targets.extend(self._observers.get(key, ()))
            places = self._places.get(key)
            if places:
                head = _head(places)
                targets.extend(w for w, at in places.items() if at is None or w is head)
        for waker in targets:
            waker.notify()

    def wake_observers(self, key: K) -> None:
        """Wake only the observers of ``key``: the name changed hands, but no waiter can get it now (a release
        granted it to a waiter directly)."""
        with self._mutex:
            targets = list(self._observers.get(key, ()))
        for waker in targets:
            waker.notify()

    def __bool__(self) -> bool:
        """Whether anyone waits at all."""
        with self._mutex:
            return bool(self._waiting or self._observers or self._places)


def _head(places: dict[Notifiable, int | None]) -> Notifiable | None:
    """The placed waiter with the lowest place (O(waiters of one name in this process), under the mutex)."""
    best: tuple[int, Notifiable] | None = None
    for waker, at in places.items():
        if at is not None and (best is None or at < best[0]):
            best = (at, waker)
    return None if best is None else best[1]

"""Wake-ups of waiting attempts that have no server push: within a process (``Wakers``, the SQL lease
tables and SQLite), and across processes for the SQLite store (``WakeDir``, ``WakeSocket``).

Across processes, one UNIX datagram socket per process and (database, name), shared by that process's waiters.

SQLite has no notification channel, so waiters of a file store would otherwise have to poll. The first
waiter of a name in a process binds a datagram socket in ``<database>.wake/`` named
``<hash of lock name>-<random>``; the process's other waiters of the name share it (one of them reads it and
passes each wake-up on through ``Wakers``, so to this process's earliest waiter only). Whoever
releases, abandons or breaks a lock sends one byte to every socket of that name: one datagram per waiting
process, not per waiter (a directory listing and a few ``sendto`` calls, all non-blocking). A process that
crashed leaves a socket file nobody listens on: the next ``sendto`` gets ECONNREFUSED and removes it.

Best effort by design: a lost datagram only delays a waiter until its next bounded re-check, never breaks
exclusion (which the database transaction alone guarantees).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import socket
import threading
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from . import _hostdir
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


#: the datagram of a release, abandon or break (to be passed on to this process's earliest waiter)
RELEASED = b"!"
#: the datagram that only ends the reader's wait: its own waker was notified (see ``WakeSocket.poke``)
POKE = b"."

#: sun_path is 108 bytes on Linux; longer database paths fall back to bounded polling
_MAX_PATH = 100


def _prefix(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:16] + "-"


class WakeDir:
    def __init__(self, db_path: str, shared: bool = False) -> None:
        self.dir = Path(db_path + ".wake")
        #: the database is every user's (the host-wide default store): so are the directory and the sockets,
        #: or a waiter of another user could neither bind here nor be woken
        self.shared = shared
        self.usable = hasattr(socket, "AF_UNIX") and len(str(self.dir)) + 27 <= _MAX_PATH

    def listen(self, name: str) -> WakeSocket | None:
        """A socket that receives a byte whenever ``name`` may have become free; None if unavailable."""
        if not self.usable:
            return None
        path = self.dir / (_prefix(name) + secrets.token_hex(4))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            if self.shared:
                _hostdir.share_dir(self.dir)  # not sticky: a sender removes the sockets of dead waiters
            else:
                self.dir.mkdir(mode=0o700, exist_ok=True)
            sock.bind(str(path))
            if self.shared:
                _hostdir.share_socket(path)  # sending to a socket takes write permission on it
            sock.setblocking(False)
        except OSError:
            sock.close()
            self.usable = False
            return None
        return WakeSocket(sock, path)

    def wake(self, name: str, skip: Path | None = None) -> None:
        """One byte to each process listening for ``name`` (but ``skip``: this process's own socket, whose
        waiters the releaser has woken directly)."""
        if not self.usable:
            return
        prefix = _prefix(name)
        own = skip.name if skip is not None else None
        try:
            entries = [e for e in os.listdir(self.dir) if e.startswith(prefix) and e != own]
        except OSError:
            return
        if not entries:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
            out.setblocking(False)
            for entry in entries:
                target = str(self.dir / entry)
                try:
                    out.sendto(RELEASED, target)
                except (ConnectionRefusedError, FileNotFoundError):
                    with contextlib.suppress(OSError):
                        os.unlink(target)  # its waiter is gone
                except OSError:
                    pass  # buffer full: it has a wake-up pending already


class WakeSocket:
    def __init__(self, sock: socket.socket, path: Path) -> None:
        self.sock = sock
        self.path = path

    def drain(self) -> bool:
        """Read all pending bytes: True if one of them says a name may be free (not only a poke)."""
        released = False
        with contextlib.suppress(OSError):
            while data := self.sock.recv(64):
                released = released or RELEASED in data
        return released

    def poke(self) -> None:
        """End the wait of whoever reads this socket (its own waker was notified), without a wake-up."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
            out.setblocking(False)
            with contextlib.suppress(OSError):  # buffer full: the reader has something to read already
                out.sendto(POKE, str(self.path))

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self.sock.close()

"""Wake-ups of waiting attempts that have no server push: within a process (:class:`Wakers`, the SQL lease
tables and SQLite), and across processes for the SQLite store (:class:`WakeDir`, :class:`WakeSocket`).

Across processes, one UNIX datagram socket per waiting attempt.

SQLite has no notification channel, so waiters of a file store would otherwise have to poll. Each waiting
attempt binds a datagram socket in ``<database>.wake/`` named ``<hash of lock name>-<random>``; whoever
releases, abandons or breaks a lock sends one byte to every socket of that name (a directory listing and a
few ``sendto`` calls, all non-blocking). A waiter that crashed leaves a socket file nobody listens on: the
next ``sendto`` gets ECONNREFUSED and removes it.

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

K = TypeVar("K")


class Notifiable(Protocol):
    def notify(self) -> None: ...


class Wakers(Generic[K]):
    """The wakers of the attempts waiting in this process, per key (a name): a release in this process wakes
    them at once, without a round trip. Thread-safe; ``notify`` runs outside the guard."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._by_key: dict[K, set[Notifiable]] = {}

    def watch(self, key: K, waker: Notifiable) -> None:
        with self._guard:
            self._by_key.setdefault(key, set()).add(waker)

    def unwatch(self, key: K, waker: Notifiable) -> None:
        with self._guard:
            group = self._by_key.get(key)
            if group is not None:
                group.discard(waker)
                if not group:
                    del self._by_key[key]

    def wake(self, key: K) -> None:
        with self._guard:
            group = list(self._by_key.get(key, ()))
        for waker in group:
            waker.notify()

    def __bool__(self) -> bool:
        """Whether anyone waits at all."""
        with self._guard:
            return bool(self._by_key)


#: sun_path is 108 bytes on Linux; longer database paths fall back to bounded polling
_MAX_PATH = 100


def _prefix(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:16] + "-"


class WakeDir:
    def __init__(self, db_path: str) -> None:
        self.dir = Path(db_path + ".wake")
        self.usable = hasattr(socket, "AF_UNIX") and len(str(self.dir)) + 27 <= _MAX_PATH

    def listen(self, name: str) -> WakeSocket | None:
        """A socket that receives a byte whenever ``name`` may have become free; None if unavailable."""
        if not self.usable:
            return None
        path = self.dir / (_prefix(name) + secrets.token_hex(4))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.dir.mkdir(mode=0o700, exist_ok=True)
            sock.bind(str(path))
            sock.setblocking(False)
        except OSError:
            sock.close()
            self.usable = False
            return None
        return WakeSocket(sock, path)

    def wake(self, name: str) -> None:
        if not self.usable:
            return
        prefix = _prefix(name)
        try:
            entries = [e for e in os.listdir(self.dir) if e.startswith(prefix)]
        except OSError:
            return
        if not entries:
            return
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as out:
            out.setblocking(False)
            for entry in entries:
                target = str(self.dir / entry)
                try:
                    out.sendto(b"!", target)
                except (ConnectionRefusedError, FileNotFoundError):
                    with contextlib.suppress(OSError):
                        os.unlink(target)  # its waiter is gone
                except OSError:
                    pass  # buffer full: it has a wake-up pending already


class WakeSocket:
    def __init__(self, sock: socket.socket, path: Path) -> None:
        self.sock = sock
        self.path = path

    def drain(self) -> None:
        with contextlib.suppress(OSError):
            while self.sock.recv(64):
                pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        self.sock.close()

"""Wake-ups across processes for the SQLite store: one UNIX datagram socket per process and (database, name),
shared by that process's waiters (``WakeDir``, ``WakeSocket``).

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
from pathlib import Path

from . import hostdir

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
                hostdir.share_dir(self.dir)  # not sticky: a sender removes the sockets of dead waiters
            else:
                self.dir.mkdir(mode=0o700, exist_ok=True)
            sock.bind(str(path))
            if self.shared:
                hostdir.share_socket(path)  # sending to a socket takes write permission on it
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

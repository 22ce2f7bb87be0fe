"""The directory of the host's default SQLite store: one every user of the host writes.

A directory every user writes is one every user can tamper with: a file in it may be replaced at any moment,
by a symbolic link too. So nothing here, nor in the SQLite store and its wake-up sockets, changes a mode or an
owner through a path that could lead elsewhere: each new directory or file is made under a temporary name,
given its mode through its own descriptor (opened without following links), then put in place in one step;
a socket's mode is set without following a link. SQLite opens its files without following a link in their
last component, and the store uses a world-writable database only if no link led to it.
A directory in a sticky one (``/var/tmp``) can be renamed by its owner only: so root, which must never be led
into another directory by a user, makes a directory another user made its own before using it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

#: the modes of the host store's directory and file when a process makes them (the umask does not apply):
#: every user reads and writes them. No sticky bit on the directory: with one, Linux's ``fs.protected_regular``
#: refuses to open another user's ``-wal``/``-shm`` file there, which every SQLite connection must do.
DIR_MODE = 0o777
FILE_MODE = 0o666

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def prepare(home: Path, chosen: bool) -> str | None:
    """Make ``home`` and its ``locks.db`` if missing, writable by every user; None if this process can use
    both, else why not (a few words). An existing directory or file keeps its modes (an admin's choice: a
    group's). ``chosen``: the directory was named by the user (``$DISTLOCK_HOME``), so it may be a link."""
    db = home / "locks.db"
    try:
        if not os.path.lexists(home):
            home.parent.mkdir(parents=True, exist_ok=True)
            _put_in_place(home, _new_dir, os.rename, os.rmdir)
        st = os.lstat(home)
        if stat.S_ISLNK(st.st_mode) and not chosen:
            return "it is a symbolic link: another user may have made it"
        if not stat.S_ISLNK(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            return "it is not a directory"
        if not chosen and hasattr(os, "fchown") and os.geteuid() == 0 and st.st_uid != 0:
            _take_over(home, st)
        if not os.path.lexists(db):
            _put_in_place(db, _new_file, lambda tmp, path: os.link(tmp, path, follow_symlinks=False), os.unlink)
    except NotADirectoryError as exc:
        return f"{exc.filename} is not a directory"
    except FileExistsError as exc:  # a parent of ``home`` is a file
        return f"{exc.filename} is not a directory"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    if os.path.islink(db):
        return "its locks.db is a symbolic link"
    if not os.access(home, os.W_OK | os.X_OK) or not os.access(db, os.R_OK | os.W_OK):
        return "not writable"
    return None


def _new_dir(tmp: str) -> None:
    os.mkdir(tmp, 0o700)
    fd = os.open(tmp, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
    try:
        os.fchmod(fd, DIR_MODE)
    finally:
        os.close(fd)


def _new_file(tmp: str) -> None:
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | _NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)


def _put_in_place(
    path: Path, make: Callable[[str], None], place: Callable[[str, Path], object], drop: Callable[[str], object]
) -> None:
    """``make`` a temporary ``path`` with its mode, then ``place`` it as ``path`` in one step: another process
    never sees it half made (with this one's umask, which would send that process to its own store)."""
    tmp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        make(tmp)
        place(tmp, path)
    except FileExistsError:
        pass  # another process made it first
    except OSError as exc:
        if exc.errno != errno.ENOTEMPTY:  # a rename onto the directory another process made and filled
            raise
    finally:
        if os.path.lexists(tmp):
            drop(tmp)


def _take_over(home: Path, seen: os.stat_result) -> None:
    """Root makes the directory its own (the mode stays): its maker could otherwise rename it and put a link
    to any directory in its place, where root would then make the store's files."""
    fd = os.open(home, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino):
            raise OSError(errno.EAGAIN, "it was replaced while being looked at")
        os.fchown(fd, 0, -1)
    finally:
        os.close(fd)


def world_writable(path: Path) -> bool:
    """Whether every user may write ``path`` (the host store's database: its wake-up sockets are everyone's
    too, and no link may lead to it)."""
    try:
        return bool(os.stat(path).st_mode & stat.S_IWOTH)
    except OSError:
        return False


def share_socket(path: Path) -> None:
    """Let every user send to the socket bound at ``path``; never through a link (another user may have put
    one there): then, or where the system cannot tell, it keeps the mode it was made with."""
    try:
        os.chmod(path, 0o666, follow_symlinks=False)
    except (NotImplementedError, OSError):
        pass


def share_dir(path: Path) -> None:
    """Make the directory ``path`` if missing, writable by every user (the store's wake-up sockets)."""
    if os.path.lexists(path):
        return
    _put_in_place(path, _new_dir, os.rename, os.rmdir)

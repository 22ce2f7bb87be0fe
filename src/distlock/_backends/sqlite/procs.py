"""Which local process holds a lock, and whether it is provably gone (pure logic, the ``/proc`` reads injected).

A holding of the single-host SQLite store records who took it: this host's boot (Linux's
``/proc/sys/kernel/random/boot_id``), the pid namespace, the pid, and the process's start time (field 22 of
``/proc/PID/stat``, clock ticks since boot). The next acquirer on the same host frees the holding at once if
that process is gone. "Gone" is decided only on proof, never on doubt:

* another boot or another pid namespace (another host sharing the file, a container, a reboot since): not ours
  to judge, the lease runs out as it would;
* no process has that pid (no ``/proc/PID``, and the kernel says so: ``/proc`` may hide other users'
  processes): gone;
* a process with that pid but another start time: the pid was reused, the holder is gone;
* the same start time: the holder itself, alive, unless it is a zombie (it exited and its parent has not
  reaped it yet: a ``kill -9``'d child of a shell or of a test) with no thread left but its leader;
* anything unreadable or unparsable: alive.

Where ``/proc`` is missing (macOS, BSD, Windows) no identity is recorded and no holding is ever freed early.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

#: the first field of a recorded identity: its layout (another layout, later or foreign, is never judged)
LAYOUT = "linux1"


class ProcView(Protocol):
    """What the judgement reads of ``/proc`` (injected: the unit tests give their own)."""

    def boot_id(self) -> str | None:
        """This boot's id; None if unknown."""

    def pid_ns(self) -> str | None:
        """This process's pid namespace (device and inode of ``/proc/self/ns/pid``); None if unknown, or if the
        ``/proc`` mounted here is another pid namespace's (its pids are not the ones this process sees)."""

    def stat(self, pid: int) -> str | None:
        """``/proc/PID/stat``; None if there is no such process. Raises OSError if that cannot be told."""


class LinuxProc:
    """The real ``/proc`` of this process."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root
        self._boot: list[str | None] = []  # read once: it changes only with the boot

    def boot_id(self) -> str | None:
        if not self._boot:
            try:
                with open(f"{self.root}/sys/kernel/random/boot_id", encoding="utf-8") as f:
                    self._boot.append(f.read().strip() or None)
            except (OSError, ValueError):
                self._boot.append(None)
        return self._boot[0]

    def pid_ns(self) -> str | None:
        try:
            if os.readlink(f"{self.root}/self") != str(os.getpid()):
                return None  # a /proc of another pid namespace: its pids are not the ones this process sees
            st = os.stat(f"{self.root}/self/ns/pid")
        except OSError:
            return None
        return f"{st.st_dev}.{st.st_ino}"

    def stat(self, pid: int) -> str | None:
        try:
            with open(f"{self.root}/{pid}/stat", encoding="utf-8", errors="replace") as f:
                return f.read()
        except (FileNotFoundError, ProcessLookupError):  # ESRCH: it exited while being read
            pass
        # No entry is no proof: a /proc mounted with hidepid=2 (invisible) hides other users' processes. The
        # kernel itself answers whether the pid exists (signal 0 sends nothing).
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except OSError as exc:  # EPERM: it exists, another user's
            raise OSError(f"process {pid} exists but /proc does not show it") from exc
        raise OSError(f"process {pid} exists but /proc does not show it")


@dataclass(frozen=True)
class Stat:
    state: str
    threads: int
    start: int


def parse_stat(text: str) -> Stat | None:
    """State (field 3), thread count (field 20) and start time (field 22) of a ``/proc/PID/stat`` line. The
    command name (field 2) is in parentheses and may hold spaces and parentheses itself: the fields are
    counted from the last ``)``."""
    _, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 20:
        return None
    try:
        return Stat(fields[0], int(fields[17]), int(fields[19]))
    except ValueError:
        return None


@dataclass(frozen=True)
class Identity:
    boot: str
    ns: str
    pid: int
    start: int

    def __str__(self) -> str:
        return f"{LAYOUT}:{self.boot}:{self.ns}:{self.pid}:{self.start}"

    @classmethod
    def parse(cls, text: str | None) -> Identity | None:
        parts = (text or "").split(":")
        if len(parts) != 5 or parts[0] != LAYOUT or not parts[1] or not parts[2]:
            return None
        try:
            who = cls(parts[1], parts[2], int(parts[3]), int(parts[4]))
        except ValueError:
            return None
        return who if who.pid > 0 and who.start >= 0 else None  # never 0 or -1: kill() reads those as groups


def identity(view: ProcView, pid: int) -> str | None:
    """The identity to record for process ``pid`` (this one); None where it cannot be told in full."""
    boot, ns = view.boot_id(), view.pid_ns()
    try:
        text = view.stat(pid)
    except OSError:
        return None
    stat = parse_stat(text) if text is not None else None
    if not boot or not ns or stat is None or ":" in boot or ":" in ns:
        return None
    return str(Identity(boot, ns, pid, stat.start))


def gone(recorded: str | None, view: ProcView) -> bool:
    """True only if the process ``recorded`` names has provably ended (the module's rules); False if it is
    alive, or on another host, boot or pid namespace, or if anything cannot be told."""
    who = Identity.parse(recorded)
    if who is None or who.boot != view.boot_id() or who.ns != view.pid_ns():
        return False
    try:
        text = view.stat(who.pid)
    except OSError:
        return False
    if text is None:
        return True
    stat = parse_stat(text)
    if stat is None:
        return False
    if stat.start != who.start:
        return True  # the pid now names another process
    return stat.state in ("Z", "X") and stat.threads <= 1


class Local:
    """This process's identity (made once per pid: a forked child has its own) and the judge of others."""

    def __init__(self, view: ProcView | None = None) -> None:
        self.view: ProcView = view if view is not None else LinuxProc()
        self._pid = -1
        self._own: str | None = None

    def own(self) -> str | None:
        pid = os.getpid()
        if pid != self._pid:
            self._own = identity(self.view, pid)
            self._pid = pid
        return self._own

    def gone(self, recorded: str) -> bool:
        return recorded != self.own() and gone(recorded, self.view)

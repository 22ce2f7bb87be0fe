"""CMD under the lock: how ``distlock run`` starts its command, hands it the terminal, and stops it.

``run`` is meant to be as dependable as flock(1): the child never outlives the lock. CMD is started through a
small trampoline that asks the kernel to SIGKILL it when ``run`` dies (even by ``kill -9``), in a process group
of its own (so a loss stops its whole tree), with the terminal's foreground handed to it and back; on loss of the
lock it gets SIGTERM, then SIGKILL after ``--kill-after``. Kept apart from the command definitions
(:mod:`.lock`) because it is process plumbing, not lock logic: of the lock it reads only the fence and the
loss notice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from typing import Any

from .._core.text import seconds
from . import EXIT_LOST, Abort

#: signals that end ``run``/``hold`` while waiting or holding (forwarded to CMD while it runs)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXIT_CANNOT_EXEC = 126  # the trampoline's exit when CMD cannot be executed
EXIT_NOT_FOUND = 127  # ... and when it is not found

# Started as CMD's process in place of CMD: asks the kernel to SIGKILL it when its parent (``run``) dies, then
# execs CMD (the parent-death signal survives execve). Doing this in a separate interpreter instead of a
# ``preexec_fn`` keeps Python code out of the forked child of a threaded parent (the store's renewer and
# callback threads run in ``run``), where a lock held by another thread at fork time could deadlock it.
_TRAMPOLINE = r"""
import ctypes, os, signal, sys
parent = int(sys.argv[1])
try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
except (OSError, AttributeError):
    pass  # not Linux: run still kills CMD on every exit it gets to handle
if os.getppid() != parent:  # run died before the prctl: the signal would never come
    os._exit(137)
for s in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(s, signal.SIG_DFL)  # give CMD the dispositions a shell would
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as exc:
    sys.stderr.write(f"distlock: cannot run {sys.argv[2]!r}: {exc.strerror}\n")
    os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
"""


class _Terminal:
    """Hands the controlling terminal's foreground to CMD's process group and back (as a shell does), so an
    interactive CMD in its own process group can still read the terminal and gets Ctrl-C directly."""

    def __init__(self) -> None:
        self.fd: int | None = None
        try:
            if os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp():
                self.fd = 0
        except OSError:
            self.fd = None

    def give(self, pgid: int) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.tcsetpgrp(self.fd, pgid)

    def take_back(self) -> None:
        if self.fd is not None:
            old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # we are a background group at this point
            try:
                with contextlib.suppress(OSError):
                    os.tcsetpgrp(self.fd, os.getpgrp())
            finally:
                signal.signal(signal.SIGTTOU, old)


def supervise(
    lock: Any, name: str, argv: list[str], kill_after: float, *, env: dict[str, str] | None = None, what: str = "lock"
) -> int:
    """Start CMD, wait for it, kill it if the lock is lost; the lock is held throughout.

    ``lock``: anything with ``on_lost``, ``lost`` and ``fence`` (or an election: ``env`` then gives CMD's
    variables, ``what`` names it in the message)."""
    lost = threading.Event()
    lock.on_lost(lambda _lock: lost.set())
    if env is None:
        fence = lock.fence
        env = {"DISTLOCK_NAME": name, "DISTLOCK_FENCE": "" if fence is None else str(fence)}
    env = dict(os.environ, **env)
    terminal = _Terminal()
    # own process group: a loss kills CMD's whole tree (a shell's children too), not only its first process
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(os.getpid()), *argv], env=env, process_group=0
    )
    terminal.give(child.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGCONT)  # it may have stopped on the terminal before it was handed over

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signum)

    old = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
    try:
        if lock.lost.is_set():  # lost between acquire and registering the callback
            lost.set()
        code = None
        while code is None:
            if lost.is_set():
                _kill(child, kill_after)
                code = child.wait()
                break
            try:
                code = child.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                code = None
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        terminal.take_back()
    if lost.is_set():
        how = "SIGTERM" if code != -signal.SIGKILL else f"SIGTERM, then SIGKILL after {seconds(kill_after)}"
        raise Abort(f"{what} {name!r} was lost while the command ran; the command was stopped ({how})", EXIT_LOST)
    return code if code >= 0 else 128 - code


def _kill(child: subprocess.Popen[bytes], kill_after: float) -> None:
    """SIGTERM to CMD's process group, then SIGKILL if CMD is still there after ``kill_after`` seconds."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGTERM)
    try:
        child.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)  # the rest of the group too, even when CMD itself exited

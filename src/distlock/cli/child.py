"""CMD under the lock: how ``distlock run`` starts its command, hands it the terminal, and stops it.

``run`` is meant to be as dependable as flock(1), whose every child holds the lock's file descriptor: nothing
CMD starts outlives the lock. CMD is started through a small trampoline that asks the kernel to SIGKILL it when
``run`` dies (even by ``kill -9``), in a process group of its own, with the terminal's foreground handed to it
and back; on loss of the lock its whole tree gets SIGTERM, then SIGKILL after ``--kill-after``. On Linux a
keeper process in CMD's group SIGKILLs the group when ``run`` dies, and ``run`` is a child subreaper, so what
CMD left behind (even in a session of its own) is found and stopped when CMD ends (see ``_Tree``). Kept
apart from the command definitions (``lock``) because it is process plumbing, not lock logic: of the lock it
reads only the fence and the loss notice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
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
# callback threads run in ``run``), where a lock held by another thread at fork time could deadlock it. The
# signal comes when the *thread* that forked ends, not the process: ``supervise`` forks from the main thread
# (it installs signal handlers, which only the main thread may), and that thread lives as long as ``run``.
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


#: the Linux-only parts (keeper, subreaper, /proc): elsewhere ``run`` signals CMD's process group only
LINUX = sys.platform.startswith("linux")
_PR_SET_CHILD_SUBREAPER = 36

# The keeper: started before CMD as the leader of CMD's process group, it blocks on a pipe whose only writer is
# ``run``. The kernel closes that end however ``run`` ends (``kill -9`` and the OOM killer included), and then the
# keeper SIGKILLs its group: CMD's shell, its children, their children. The parent-death signal alone cannot do
# this: only the direct child gets it, and a shell's children live on. A pipe's end of file, unlike that signal,
# does not depend on which thread of ``run`` forked. The keeper ignores the signals a terminal or a forwarded
# signal sends to the whole group (it is in the group, with the terminal's foreground), and says "ready" only once
# they are ignored, so a Ctrl-C right at the start cannot take it away.
_KEEPER = r"""
import os, signal, sys
for s in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPIPE", "SIGUSR1",
          "SIGUSR2", "SIGALRM"):
    signal.signal(getattr(signal, s), signal.SIG_IGN)
os.write(1, b"+")
os.close(1)
while os.read(int(sys.argv[1]), 1):
    pass
os.killpg(0, signal.SIGKILL)
"""


def _processes() -> dict[int, tuple[str, int, int]]:
    """Every process (Linux ``/proc``): pid -> (state, parent pid, process group)."""
    out: dict[int, tuple[str, int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
                state, ppid, pgrp = stat[stat.rindex(b")") + 2 :].split()[:3]
            except (OSError, ValueError):
                continue  # gone meanwhile
            out[int(entry)] = (state.decode(), int(ppid), int(pgrp))
    return out


class _Tree:
    """CMD's processes: its process group and, on Linux, every process it started, wherever it went.

    On Linux ``run`` becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``): a process CMD started whose parent
    died is re-parented to ``run`` instead of init, so the tree stays findable (by parent links in ``/proc``)
    even for a daemon that left the group with ``setsid``. While ``run`` lives it stops that whole tree: on loss
    of the lock, on a stop signal that ends CMD, and when CMD ends with processes left behind (flock(1)'s children
    hold the lock as long as they run; ``run`` cannot hold it past its own end, so they are stopped instead).
    If ``run`` is killed (``kill -9``) the keeper (``_KEEPER``) SIGKILLs the group; a process that left the
    group is out of its reach then. Elsewhere than Linux: only the group, and only on loss (as before)."""

    def __init__(self) -> None:
        self.pgid = 0  # 0 until the group exists: CMD then leads a group of its own
        self.cmd = 0
        self._keeper: subprocess.Popen[bytes] | None = None
        self._pipe: int | None = None  # run's end of the keeper's pipe
        self._before: set[int] = set()  # run's children before CMD (not CMD's: a caller's own subprocesses)
        self._ours: set[int] = set()  # every process of CMD's tree seen (to reap the ones re-parented to run)

    def start(self) -> None:
        """The keeper and its group, before CMD (Linux; a no-op elsewhere)."""
        if not LINUX:
            return
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        me = os.getpid()
        self._before = {pid for pid, (_, ppid, _) in _processes().items() if ppid == me}
        read_end, self._pipe = os.pipe()  # both ends close-on-exec: CMD never holds the writer
        try:
            self._keeper = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _KEEPER, str(read_end)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                pass_fds=(read_end,),
                process_group=0,
            )
        finally:
            os.close(read_end)
        assert self._keeper.stdout is not None
        with self._keeper.stdout as says:
            ready = says.read(1)
        if ready != b"+":
            self.close()
            raise Abort("cannot start the keeper of the command's process group", EXIT_CANNOT_EXEC)
        self.pgid = self._keeper.pid

    def adopt(self, cmd: int) -> None:
        self.cmd = cmd
        if not self.pgid:
            self.pgid = cmd

    def _escaped(self, procs: dict[int, tuple[str, int, int]]) -> tuple[set[int], set[int]]:
        """(CMD's whole tree, the part of it outside the group), living or not, run and the keeper excluded."""
        me = os.getpid()
        keeper = self._keeper.pid if self._keeper is not None else 0
        children: dict[int, list[int]] = {}
        for pid, (_, ppid, _) in procs.items():
            children.setdefault(ppid, []).append(pid)
        roots = [self.cmd, *(pid for pid in children.get(me, ()) if pid not in self._before and pid != keeper)]
        todo = [pid for pid, (_, _, pgrp) in procs.items() if pgrp == self.pgid] + roots
        tree: set[int] = set()
        while todo:  # the group, CMD, what was re-parented to run, and all their descendants
            pid = todo.pop()
            if pid in procs and pid not in tree:
                tree.add(pid)
                todo.extend(children.get(pid, ()))
        tree -= {me, keeper, 0}
        self._ours |= tree
        return tree, {pid for pid in tree if procs[pid][2] != self.pgid}

    def left(self) -> bool:
        """Whether any process of CMD's tree is alive (always False elsewhere than Linux: not known there)."""
        if not LINUX or not self.pgid:
            return False
        procs = _processes()
        tree, _ = self._escaped(procs)
        return any(procs[pid][0] != "Z" for pid in tree)

    def signal(self, signum: int) -> None:
        """``signum`` to CMD's group, and once each to the processes of its tree outside the group."""
        if not self.pgid:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signum)
        if LINUX:
            procs = _processes()
            for pid in self._escaped(procs)[1]:
                if procs[pid][0] != "Z":
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signum)

    def close(self) -> None:
        """SIGKILL for whatever of CMD's tree is left (Linux; the keeper's pipe closed, the keeper reaped)."""
        if self._pipe is not None:
            if self.pgid:
                self.signal(signal.SIGKILL)
            os.close(self._pipe)  # the keeper SIGKILLs its group (itself too), if still there
            self._pipe = None
        if self._keeper is not None:
            self._keeper.wait()
        # reap what was re-parented to run, so no zombie waits for run's own end
        deadline = time.monotonic() + 1.0
        pending = set(self._ours) - {self.cmd}
        while pending and time.monotonic() < deadline:
            for pid in list(pending):
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done = pid  # not ours to reap (its parent lives, or init has it)
                if done:
                    pending.discard(pid)
            if pending:
                time.sleep(0.01)


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
    """Start CMD, wait for it, kill it if the lock is lost; the lock is held throughout, and nothing of CMD's
    tree runs on once this returns (Linux; elsewhere CMD's group is stopped on loss only).

    ``lock``: anything with ``on_lost``, ``lost`` and ``fence`` (or an election: ``env`` then gives CMD's
    variables, ``what`` names it in the message)."""
    lost = threading.Event()
    lock.on_lost(lambda _lock: lost.set())
    if env is None:
        fence = lock.fence
        env = {"DISTLOCK_NAME": name, "DISTLOCK_FENCE": "" if fence is None else str(fence)}
    env = dict(os.environ, **env)
    terminal = _Terminal()
    tree = _Tree()
    old: dict[signal.Signals, Any] = {}
    try:
        tree.start()
        # own process group (the keeper's, on Linux): a loss kills CMD's whole tree, not only its first process.
        # Not a session of its own: CMD must stay on run's controlling terminal to get it as foreground.
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _TRAMPOLINE, str(os.getpid()), *argv],
            env=env,
            process_group=tree.pgid,
        )
        tree.adopt(child.pid)
        terminal.give(tree.pgid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(tree.pgid, signal.SIGCONT)  # it may have stopped on the terminal before it was handed over

        def forward(signum: int, _frame: object) -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(tree.pgid, signum)

        old = {s: signal.signal(s, forward) for s in STOP_SIGNALS}
        if lock.lost.is_set():  # lost between acquire and registering the callback
            lost.set()
        code = None
        while code is None:
            if lost.is_set():
                _kill(child, tree, kill_after)
                code = child.wait()
                break
            try:
                code = child.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                code = None
        if not lost.is_set() and tree.left():  # CMD ended, leaving processes behind: not to run on unlocked
            _kill(child, tree, kill_after)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        tree.close()
        terminal.take_back()
    if lost.is_set():
        how = "SIGTERM" if code != -signal.SIGKILL else f"SIGTERM, then SIGKILL after {seconds(kill_after)}"
        raise Abort(f"{what} {name!r} was lost while the command ran; the command was stopped ({how})", EXIT_LOST)
    return code if code >= 0 else 128 - code


def _kill(child: subprocess.Popen[bytes], tree: _Tree, kill_after: float) -> None:
    """SIGTERM to CMD's tree, then SIGKILL if CMD or (Linux) any of its tree is still there after ``kill_after``
    seconds."""
    tree.signal(signal.SIGTERM)
    deadline = time.monotonic() + kill_after
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=kill_after)
    while tree.left() and time.monotonic() < deadline:
        time.sleep(0.05)
    tree.signal(signal.SIGKILL)  # the rest of the tree too, even when CMD itself exited

"""What ``run``, ``hold`` and ``elect`` say on stderr while they wait (``-v/--verbose``, ``-q/--quiet``).

On a terminal a status line appears after a second of waiting (a quarter of a second with ``--verbose``) and is redrawn in place (then wiped once the
wait ends); off a terminal nothing is said unless ``--verbose``, and then plain lines. ``--verbose`` also
names the store (its URL with credentials masked) and says when the wait ended. ``--quiet`` says nothing.

The holder is read by a thread of its own with the store's ``inspect`` (``leader`` for an election) every few
seconds, so the acquire itself never waits for it; a failed read only leaves the holder out of the line.
Nothing printed here comes from anything but the lock's name, the holders' owner ids, client names, fences,
seconds left, and the masked URL: never a credential.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import click

from .._core.text import seconds
from .._core.timing import monotonic
from .._core.types import LeaderInfo, LockInfo
from .._sync.store import Store

#: seconds of waiting before the status line shows on a terminal (without --verbose)
TERMINAL_DELAY = 1.0
#: seconds of waiting before --verbose says so: a free lock, taken at once, needs no word
VERBOSE_DELAY = 0.25
#: seconds between two reads of the holder (and two lines off a terminal)
REFRESH = 3.0
#: seconds between two redraws of the status line on a terminal (the counters move in between reads)
REDRAW = 0.5


def verbosity() -> bool | None:
    """The command line's choice: True (``-v``), False (``-q``) or None (neither: only on a terminal)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return obj.get("verbose") if isinstance(obj, dict) else None


def say(text: str) -> None:
    """A line of ``--verbose`` on stderr."""
    click.echo(f"distlock: {text}", err=True)


def wanted(verbose: bool | None, stream: TextIO | None = None) -> tuple[bool, bool]:
    """(say anything, plain lines): --verbose -> yes; --quiet -> no; neither -> only on a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: no terminal
        tty = False
    if verbose is False:
        return False, False
    return bool(verbose) or tty, not tty


def store_line(store: Store) -> str:
    """``store URL`` with the URL's credentials masked (the backend's own redaction)."""
    return f"store {store._backend.describe()}"


def _left(ttl_left: float | None, elapsed: float) -> str:
    return "" if ttl_left is None else f", {seconds(max(0.0, ttl_left - elapsed))} left"


def lock_holders(info: LockInfo | None, elapsed: float) -> str:
    """``held by web-1 (fence 12), 27s left; owner host:1:thread-2`` (``elapsed``: seconds since the read).
    The owner id comes last, where a narrow terminal cuts the line: the client name says more, sooner."""
    if info is None or not info.holders:
        return "free (about to be taken)"
    h = info.holders[0]
    more = f" and {len(info.holders) - 1} more" if len(info.holders) > 1 else ""
    text = f"held by {h.client_name or h.owner}{more} (fence {h.fence}){_left(h.ttl_left, elapsed)}"
    return text if h.client_name is None else f"{text}; owner {h.owner}"


def leader_of(info: LeaderInfo | None, elapsed: float) -> str:
    """``leader 10.0.0.7:8080 (web-1, term 12), 27s left``, or ``no leader``."""
    if info is None:
        return "no leader (about to be taken)"
    client = "" if info.client_name is None else f"{info.client_name}, "
    return f"leader {info.value} ({client}term {info.term}){_left(info.ttl_left, elapsed)}"


class _Feedback:
    """The thread that reads the holder and says what the wait is for."""

    def __init__(
        self,
        what: str,
        read: Callable[[], Any],
        describe: Callable[[Any, float], str],
        timeout: float | None,
        plain: bool,
        delay: float,
        stream: TextIO,
    ) -> None:
        self.what, self.read, self.describe = what, read, describe
        self.timeout, self.plain, self.delay, self.stream = timeout, plain, delay, stream
        self.began = monotonic()
        self.stop = threading.Event()
        self.guard = threading.Lock()  # one writer at a time, and none after the wait ended
        self.drawn = False  # a status line is on the terminal (to wipe)
        self.thread = threading.Thread(target=self._main, name="distlock-wait-feedback", daemon=True)

    def _main(self) -> None:
        if self.stop.wait(self.delay):
            return
        known: tuple[Any, float] | None = None  # (what the last read said, when)
        next_read = 0.0
        while not self.stop.is_set():
            now = monotonic()
            if now >= next_read:
                try:
                    known = (self.read(), monotonic())
                except Exception:  # noqa: BLE001  (a failed read leaves the holder out, never ends the wait)
                    known = None
                next_read = monotonic() + REFRESH
            self._say(known)
            if self.stop.wait(REFRESH if self.plain else REDRAW):
                return

    def _line(self, known: tuple[Any, float] | None) -> str:
        waited = monotonic() - self.began
        limit = "" if self.timeout is None else f" of {seconds(self.timeout)}"
        text = f"distlock: waiting for {self.what} ({seconds(round(waited))}{limit})"  # whole seconds: it moves
        if known is not None:
            text += ": " + self.describe(known[0], monotonic() - known[1])
        return text

    def _say(self, known: tuple[Any, float] | None) -> None:
        line = self._line(known)
        with self.guard:
            if self.stop.is_set():
                return
            if self.plain:
                self.stream.write(line + "\n")
            else:
                width = max(20, shutil.get_terminal_size().columns - 1)  # no wrap: \r must reach its start
                self.stream.write("\r\x1b[K" + line[:width])
                self.drawn = True
            self.stream.flush()

    def end(self) -> None:
        with self.guard:
            self.stop.set()
            if self.drawn:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
        self.thread.join(0.2)  # a read stuck on a silent server is left to finish (daemon): never waited for


@contextmanager
def waiting(
    verbose: bool | None,
    what: str,
    read: Callable[[], Any],
    describe: Callable[[Any, float], str],
    timeout: float | None,
    stream: TextIO | None = None,
) -> Iterator[None]:
    """Say on ``stream`` (stderr) what the body waits for while it runs (see the module's docstring)."""
    out = sys.stderr if stream is None else stream
    say, plain = wanted(verbose, out)
    if not say:
        yield
        return
    feedback = _Feedback(what, read, describe, timeout, plain, VERBOSE_DELAY if verbose else TERMINAL_DELAY, out)
    feedback.thread.start()
    try:
        yield
    finally:
        feedback.end()

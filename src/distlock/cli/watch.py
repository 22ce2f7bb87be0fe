"""``distlock list --watch [PREFIX]``: the held locks, live (docs/operations.md, "Watching the locks live").

On a terminal: a table redrawn in place (rich's ``Live``) with each holder's owner, fence, mode, seconds left
(counted down between reads) and the waiters; ``q`` or Ctrl-C quits, and the terminal is put back as it was.
Anywhere else (a pipe, a file): a snapshot each time the locks change -- a plain table followed by a blank
line, or with ``--json`` one line holding the JSON array ``list --json`` prints. SIGINT, SIGTERM or SIGHUP
end it with exit 0. The reads are ``distlock._sync.listing.snapshots``'s: push where the backend has it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import sys
import termios
import tty
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

import click
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from .._core.timing import monotonic
from .._core.types import PrimitiveInfo
from .._sync.listing import Snapshot
from .._sync.store import Store
from .lock import Interrupted, _raise_on_stop_signals
from .table import COLUMNS, PRIMITIVE_COLUMNS, RIGHT, plain, plain_primitives, primitive_rows, rows, to_json

#: how often the terminal view is redrawn (seconds left count down) and looks for ``q``
TICK = 0.25


#: how often the terminal view reads the latches and barriers again (they have no push of their own here)
PRIMITIVES_EVERY = 1.0


def watch(store: Store, prefix: str, as_json: bool) -> None:
    """Run the live view until ``q``, Ctrl-C or a stop signal (then return: exit 0)."""
    prims = _Primitives(store, prefix)
    with _raise_on_stop_signals(), contextlib.suppress(Interrupted):
        if sys.stdout.isatty() and not as_json:
            _live(store.watch_list(prefix, tick=TICK), prefix, prims)
        else:
            for snap in store.watch_list(prefix):
                now = prims.read()
                if as_json:
                    click.echo(json.dumps([*(to_json(i) for i in snap.locks), *(p.to_json() for p in now)]))
                else:
                    click.echo(plain(snap.locks) + plain_primitives(now))
                sys.stdout.flush()


class _Primitives:
    """The latches and barriers under the prefix, read with each snapshot (``read``) or at most every
    ``PRIMITIVES_EVERY`` seconds (``recent``: the terminal view, redrawn every ``TICK``); none where the backend
    cannot list them."""

    def __init__(self, store: Store, prefix: str) -> None:
        self._store, self._prefix = store, prefix
        self._last: Sequence[PrimitiveInfo] = ()
        self._at = -math.inf

    def read(self) -> Sequence[PrimitiveInfo]:
        self._last = self._store._list_primitives(self._prefix) or ()
        self._at = monotonic()
        return self._last

    def recent(self) -> Sequence[PrimitiveInfo]:
        return self.read() if monotonic() - self._at >= PRIMITIVES_EVERY else self._last


def _table(snap: Snapshot, prefix: str) -> Table:
    held = len(snap.locks)
    table = Table(
        title=f"distlock list --watch {prefix!r}: {held} held",
        caption="q or Ctrl-C quits",
        expand=False,
    )
    for col in COLUMNS:
        table.add_column(col, justify="right" if col in RIGHT else "left", overflow="fold")
    for row in rows(snap.locks, monotonic() - snap.read_at):
        table.add_row(*row)
    return table


def _primitives_table(prims: Sequence[PrimitiveInfo]) -> Table:
    table = Table(title=f"latches and barriers: {len(prims)}", expand=False)
    for col in PRIMITIVE_COLUMNS:
        table.add_column(col, overflow="fold")
    for row in primitive_rows(prims):
        table.add_row(*row)
    return table


def _live(snaps: Iterator[Snapshot], prefix: str, prims: _Primitives) -> None:
    console = Console()
    with _keys(sys.stdin) as pressed, Live(console=console, auto_refresh=False, transient=False) as live:
        for snap in snaps:
            if "q" in pressed().lower():
                return
            now = prims.recent()
            view = _table(snap, prefix) if not now else Group(_table(snap, prefix), _primitives_table(now))
            live.update(view, refresh=True)


@contextlib.contextmanager
def _keys(stdin: TextIO) -> Iterator[Any]:
    """Keys typed on a terminal, one at a time without Enter (cbreak: Ctrl-C still interrupts); the
    terminal's settings are restored on the way out, whatever ends the view."""
    if not stdin.isatty():
        yield lambda: ""
        return
    fd = stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:

        def pressed() -> str:
            typed = b""
            while select.select([fd], [], [], 0)[0]:
                chunk = os.read(fd, 64)
                if not chunk:
                    break
                typed += chunk
            return typed.decode("utf-8", "replace")

        yield pressed
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)

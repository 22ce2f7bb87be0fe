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
import os
import select
import sys
import termios
import tty
from collections.abc import Iterator
from typing import Any, TextIO

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from .._core.timing import monotonic
from .._sync.listing import Snapshot
from .._sync.store import Store
from .lock import Interrupted, _raise_on_stop_signals
from .table import COLUMNS, RIGHT, plain, rows, to_json

#: how often the terminal view is redrawn (seconds left count down) and looks for ``q``
TICK = 0.25


def watch(store: Store, prefix: str, as_json: bool) -> None:
    """Run the live view until ``q``, Ctrl-C or a stop signal (then return: exit 0)."""
    with _raise_on_stop_signals(), contextlib.suppress(Interrupted):
        if sys.stdout.isatty() and not as_json:
            _live(store.watch_list(prefix, tick=TICK), prefix)
        else:
            for snap in store.watch_list(prefix):
                click.echo(json.dumps([to_json(i) for i in snap.locks]) if as_json else plain(snap.locks))
                sys.stdout.flush()


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


def _live(snaps: Iterator[Snapshot], prefix: str) -> None:
    console = Console()
    with _keys(sys.stdin) as pressed, Live(console=console, auto_refresh=False, transient=False) as live:
        for snap in snaps:
            if "q" in pressed().lower():
                return
            live.update(_table(snap, prefix), refresh=True)


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

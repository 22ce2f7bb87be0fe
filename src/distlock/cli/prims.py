"""``latch`` and ``barrier``: count-down latches and barriers from the shell (docs/cli.md).

``distlock latch NAME`` prints the latch's count; ``--count N`` creates it with N unless it exists (the first
user sets it), ``--down`` counts it down once (and prints the count after), ``--wait`` blocks until it is zero.
``distlock barrier NAME --parties N`` arrives and blocks until N participants arrived. Waits keep the one
deadline of ``-w`` (connecting counts); a stop signal ends them (128 + N; a barrier's arrival is withdrawn).

Exit codes: 0 done (a wait: the latch reached zero, the barrier tripped); 75 (or ``-E``) the wait timed out (a
barrier's arrival withdrawn, so it counted for nobody); 2 bad usage; 69 backend unreachable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import click

from .._core.timing import Budget, Deadline
from .._sync.store import Store
from . import EXIT_TIMEOUT, EXIT_USAGE, Abort, feedback, one_line_errors
from .lock import _open, _raise_on_stop_signals, _seconds


def _wait_options(f: Any) -> Any:
    f = click.option(
        "-E", "--conflict-exit-code", "conflict_code", type=click.IntRange(0, 255), default=EXIT_TIMEOUT,
        show_default=True, metavar="CODE", help="Exit code when the wait timed out.",
    )(f)  # fmt: skip
    return click.option(
        "-w",
        "--timeout",
        type=float,
        default=None,
        metavar="S",
        help="Give up waiting after S seconds (default: never).",
    )(f)


def _seconds_option(flag: str, default: float, help: str) -> Callable[[Any], Any]:
    """An option of S seconds with its default shown (the latch's linger, the barrier's lease)."""
    return click.option(flag, type=float, default=default, show_default=True, metavar="S", help=help)


@contextlib.contextmanager
def _opened(obj: dict[str, Any], name: str, timeout: float | None) -> Iterator[tuple[Store, Deadline]]:
    """The store within the wait's deadline (connecting counts), a stop signal raising ``Interrupted`` (128 + N),
    every call bounded by the deadline; errors as one line."""
    with one_line_errors(obj["debug"]):
        if name.startswith("-"):
            raise Abort(f"NAME {name!r} starts with '-': options go before NAME", EXIT_USAGE)
        _seconds(timeout, "--timeout", zero_ok=True)
        deadline = Deadline.after(timeout)
        with _open(obj["url"], deadline) as store, _raise_on_stop_signals():
            if feedback.verbosity():
                feedback.say(feedback.store_line(store))
            with Budget(until=deadline.calls_end()):
                yield store, deadline


@click.command(short_help="Create, count down, wait for or show the count-down latch NAME.")
@click.option("--count", "count", type=int, default=None, metavar="N", help="Create the latch with N unless it exists.")
@click.option("--down", is_flag=True, help="Count it down once; print the count after.")
@click.option("--wait", "wait", is_flag=True, help="Block until the count is zero (after --down, if given).")
@_wait_options
@_seconds_option("--linger", 60.0, "How long the latch stays at zero for late arrivals, then nothing is left of it.")
@click.argument("name")
@click.pass_obj
def latch(
    obj: dict[str, Any], name: str, count: int | None, down: bool, wait: bool, timeout: float | None,
    conflict_code: int, linger: float,
) -> None:  # fmt: skip
    """The count-down latch NAME (store.latch): print its count (0: at zero, or no such latch); --count N creates
    it, --down counts it down, --wait blocks until zero. Exit 75 (or -E) if --wait timed out."""
    if timeout is not None and not wait:
        with one_line_errors(obj["debug"]):
            raise Abort("-w/--timeout bounds --wait: add --wait", EXIT_USAGE)
    with _opened(obj, name, timeout) as (store, deadline):
        the_latch = store.latch(name, count, linger=linger)
        left = the_latch.count_down() if down else None
        if not wait:
            click.echo(str(left if left is not None else the_latch.count()))
            return
        if left is not None:
            click.echo(str(left))
        if not the_latch.wait(timeout=deadline.remaining()):
            raise Abort(f"latch {name!r} not at zero within {timeout:g}s", conflict_code)


@click.command(short_help="Arrive at the barrier NAME and wait until --parties arrived.")
@click.option("--parties", type=int, required=True, metavar="N", help="How many participants the barrier waits for.")
@_wait_options
@_seconds_option(
    "--ttl", 10.0, "The arrival's lease (renewed while waiting): a killed participant stops counting S after."
)
@click.argument("name")
@click.pass_obj
def barrier(
    obj: dict[str, Any], name: str, parties: int, timeout: float | None, conflict_code: int, ttl: float
) -> None:
    """Arrive at the barrier NAME (store.barrier) and block until N participants have arrived: exit 0. Exit 75 (or
    -E) after -w S, the arrival withdrawn (it counted for nobody)."""
    with _opened(obj, name, timeout) as (store, deadline):
        if not store.barrier(name, parties, ttl=ttl).wait(timeout=deadline.remaining()):
            raise Abort(f"barrier {name!r}: fewer than {parties} arrived within {timeout:g}s", conflict_code)


COMMANDS = [latch, barrier]

"""``elect`` and ``leader``: leader election from the shell (docs/election.md).

``distlock elect NAME VALUE -- CMD`` campaigns and runs CMD while leader, with ``run``'s guarantees (CMD
never outlives the leadership: SIGTERM, then SIGKILL on loss) and DISTLOCK_TERM in its environment; with no
CMD it leads until a stop signal, like ``etcdctl elect NAME PROPOSAL``. ``distlock elect --listen NAME``
prints every change of leader, like ``etcdctl elect -l``; ``distlock leader NAME`` prints it once.

Text lines: ``TERM VALUE`` for a leader, ``-`` for no leader. ``--json``: one object per line,
``{"name", "value", "owner", "term", "ttl_left"}``, or ``{"name", "value": null, ...}`` with every field
null when there is no leader.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

import click

from .._core.text import seconds
from .._core.timing import Budget, monotonic
from .._core.types import LeaderInfo
from .._errors import LockError
from . import EXIT_LOST, EXIT_TIMEOUT, EXIT_USAGE, Abort, connect, feedback, one_line_errors
from .child import supervise
from .lock import Interrupted, _command_line, _deadline, _open, _raise_on_stop_signals, _seconds


def _line(name: str, info: LeaderInfo | None, as_json: bool) -> str:
    if as_json:
        if info is None:
            return json.dumps({"name": name, "value": None, "owner": None, "term": None, "ttl_left": None})
        return json.dumps(info.to_json())
    return "-" if info is None else f"{info.term} {info.value}"


@click.command(
    context_settings={"allow_interspersed_args": False},
    short_help="Run CMD while leader of NAME (or --listen: print each leader).",
)
@click.option("-l", "--listen", is_flag=True, help="Print the leader and every change of it (no campaign).")
@click.option("--json", "as_json", is_flag=True, help="With --listen: one JSON object per line.")
@click.option("--ttl", type=float, default=30.0, show_default=True, metavar="S", help="Lease (renewed while leader).")
@click.option(
    "-w", "--timeout", type=float, default=None, metavar="S",
    help="Give up campaigning (or listening) after S seconds (default: never).",
)  # fmt: skip
@click.option(
    "-E", "--conflict-exit-code", "conflict_code", type=int, default=EXIT_TIMEOUT, show_default=True,
    metavar="CODE", help="Exit code when not leader within -w.",
)  # fmt: skip
@click.option("-c", "--command", "shell", default=None, metavar="'SHELL CMD'", help="Run a shell string (sh -c).")
@click.option(
    "--requeue", is_flag=True,
    help="After a loss of leadership, campaign again and run CMD again (for ever); exit when CMD itself ends.",
)  # fmt: skip
@click.option(
    "--kill-after", type=float, default=5.0, show_default=True, metavar="S",
    help="On loss of leadership: SIGTERM to CMD, then SIGKILL after S seconds.",
)  # fmt: skip
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def elect(
    obj: dict[str, Any],
    listen: bool,
    as_json: bool,
    ttl: float,
    timeout: float | None,
    conflict_code: int,
    shell: str | None,
    requeue: bool,
    kill_after: float,
    name: str,
    args: tuple[str, ...],
) -> None:
    """Campaign in the election NAME with VALUE and run CMD while leader: ``elect NAME VALUE [--] CMD...``.

    Candidates lead in the order they campaigned. CMD gets DISTLOCK_NAME, DISTLOCK_TERM (the leadership's
    fence) and DISTLOCK_VALUE; on loss of leadership it gets SIGTERM, then SIGKILL after --kill-after, and
    elect exits 70. With no CMD: print "NAME TERM" once leader and lead until SIGINT/SIGTERM/SIGHUP (then
    resign, exit 0). ``elect --listen NAME``: print the leader ("TERM VALUE", "-" for none) and every change.
    With --requeue: a loss of leadership stops CMD as above, then elect campaigns again and starts CMD again when
    it leads (Curator's LeaderSelector with autoRequeue); it ends when CMD ends by itself, with CMD's code.
    Exit codes: CMD's own; 75 (or -E CODE) not leader within -w; 70 lost; 2 usage; 69 backend unreachable.
    """
    with one_line_errors(obj["debug"]):
        if name.startswith("-"):
            raise Abort(f"NAME {name!r} starts with '-': options go before NAME", EXIT_USAGE)
        _seconds(ttl, "--ttl")
        _seconds(timeout, "--timeout", zero_ok=True)
        _seconds(kill_after, "--kill-after", zero_ok=True)
        if listen:
            if args or shell is not None:
                raise Abort("--listen takes only NAME", EXIT_USAGE)
            _listen(obj["url"], name, timeout, as_json)
            return
        if not args:
            raise Abort("elect needs NAME and VALUE (or --listen NAME)", EXIT_USAGE)
        value, rest = args[0], args[1:]
        argv = _command_line(shell, rest)
        if requeue:
            if argv is None or timeout is not None:
                raise Abort("--requeue needs a CMD and campaigns for ever: no -w with it", EXIT_USAGE)
            sys.exit(_lead_again(obj["url"], name, value, ttl, argv, kill_after))
        sys.exit(_lead(obj["url"], name, value, ttl, timeout, conflict_code, argv, kill_after))


def _lead(
    url: str | None,
    name: str,
    value: str,
    ttl: float,
    timeout: float | None,
    conflict_code: int,
    argv: list[str] | None,
    kill_after: float,
) -> int:
    deadline = _deadline(False, timeout)  # -w S: connecting counts, as for run
    with _open(url, deadline) as store:
        election = store.election(name, ttl=ttl)
        verbose = feedback.verbosity()
        if verbose:
            feedback.say(feedback.store_line(store))
        with _raise_on_stop_signals():
            began = monotonic()
            with feedback.waiting(
                verbose, f"leadership of {name!r}", lambda: store.leader(name), feedback.leader_of, timeout
            ):
                with Budget(until=deadline.calls_end()):
                    won = election.campaign(value, timeout=deadline.remaining())
            if not won:
                raise Abort(f"not leader of {name!r} within {seconds(timeout or 0)}", conflict_code)
            if verbose:
                feedback.say(f"leader of {name!r} (term {election.term}) after {seconds(monotonic() - began)}")
            try:
                if argv is None:
                    return _hold(election, name)
                env = {"DISTLOCK_NAME": name, "DISTLOCK_TERM": str(election.term), "DISTLOCK_VALUE": value}
                return supervise(election, name, argv, kill_after, env=env, what="leadership of")
            finally:
                with contextlib.suppress(LockError):
                    if election.is_leader():
                        election.resign()


class _Ended(Exception):
    """CMD ended by itself while leading: ``elect --requeue`` exits with its code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _lead_again(url: str | None, name: str, value: str, ttl: float, argv: list[str], kill_after: float) -> int:
    """``elect --requeue``: CMD under each leadership (``election.lead``), campaigning again after each loss."""
    with _open(url, _deadline(False, None)) as store, _raise_on_stop_signals():
        election = store.election(name, ttl=ttl)
        verbose = feedback.verbosity()

        def term(el: Any) -> None:
            if verbose:
                feedback.say(f"leader of {name!r} (term {el.term})")
            env = {"DISTLOCK_NAME": name, "DISTLOCK_TERM": str(el.term), "DISTLOCK_VALUE": value}
            try:
                code = supervise(el, name, argv, kill_after, env=env, what="leadership of")
            except Abort as lost:
                if lost.code != EXIT_LOST:
                    raise
                click.echo(f"distlock: {lost}; campaigning again", err=True)
                return
            raise _Ended(code)

        try:
            election.lead(term, value=value)
        except _Ended as ended:
            return ended.code
    raise AssertionError("lead() with requeue returns only by an exception")  # pragma: no cover


def _hold(election: Any, name: str) -> int:
    click.echo(f"{name} {election.term}")
    sys.stdout.flush()
    try:
        while not election.lost.wait(0.2):
            pass
    except Interrupted:
        return 0
    raise Abort(f"leadership of {name!r} was lost", EXIT_LOST)


def _listen(url: str | None, name: str, timeout: float | None, as_json: bool) -> None:
    with connect(url) as store, _raise_on_stop_signals(), contextlib.suppress(Interrupted):
        for info in store.observe(name, timeout=timeout):
            click.echo(_line(name, info, as_json))
            sys.stdout.flush()


@click.command(short_help="Print the leader of the election NAME.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing; exit 0 if there is a leader, 1 if not.")
@click.argument("name")
@click.pass_obj
def leader(obj: dict[str, Any], name: str, as_json: bool, quiet: bool) -> None:
    """Print the leader of NAME once: "TERM VALUE" ("-" when there is none; exit 1 then)."""
    with one_line_errors(obj["debug"]), connect(obj["url"]) as store:
        info = store.leader(name)
        if not quiet:
            click.echo(_line(name, info, as_json))
        if info is None:
            sys.exit(1)


COMMANDS = [elect, leader]

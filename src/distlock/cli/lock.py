"""``run`` and ``hold``: the commands that take a lock from the shell and keep it.

``run`` is meant to be as dependable as flock(1): options only before NAME, CMD verbatim after it, the child
never outliving the lock, nor anything it started (SIGTERM then SIGKILL on loss, SIGKILL when ``run`` itself
dies, even by ``kill -9``).
``hold`` (and ``run`` with no CMD) takes the lock, prints "NAME FENCE" and keeps it until a stop signal.
Both share flock(1)'s options (``lock_options``), their checks, and the way a stop signal ends the wait
(``Interrupted``, exit 128 + N). Starting and stopping CMD itself is in ``child``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import shlex
import signal
import sys
from collections.abc import Iterator
from typing import Any

import click

from .._core.text import seconds
from .._core.timing import Budget, Deadline, monotonic
from .._errors import LockError
from .._sync.store import Store
from . import EXIT_LOST, EXIT_TIMEOUT, EXIT_USAGE, Abort, connect, feedback, one_line_errors
from .child import STOP_SIGNALS, supervise


class Interrupted(BaseException):
    """A stop signal arrived while ``run``/``hold`` waited for or held the lock (exit 128 + signal). A
    BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _seconds(value: float | None, what: str, *, zero_ok: bool = False) -> float | None:
    if value is None:
        return None
    if math.isnan(value) or math.isinf(value) or value < 0 or (value == 0 and not zero_ok):
        raise Abort(f"{what} must be {'>= 0' if zero_ok else '> 0'} seconds (finite)", EXIT_USAGE)
    return value


@contextlib.contextmanager
def _raise_on_stop_signals() -> Iterator[None]:
    """While waiting for the lock: SIGINT / SIGTERM / SIGHUP raise ``Interrupted`` (main thread only)."""

    def handler(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@dataclasses.dataclass(frozen=True)
class Flock:
    """flock(1)'s options plus the lease, as ``run`` and ``hold`` take them (``lock_options``): one place
    for their checks (``check``), the wait they allow (``deadline``), the lock they name and its acquire."""

    nonblock: bool
    timeout: float | None
    conflict_code: int
    shared: bool
    exclusive: bool
    legacy_mode: str | None
    ttl: float
    permits: int | None

    def check(self, name: str) -> None:
        """One-line usage errors, before anything connects."""
        if name.startswith("-"):
            raise Abort(f"NAME {name!r} starts with '-': options go before NAME", EXIT_USAGE)
        _seconds(self.ttl, "--ttl")
        _seconds(self.timeout, "--timeout", zero_ok=True)
        if self.nonblock and self.timeout is not None:
            raise Abort("-n/--nonblock and -w/--timeout exclude each other", EXIT_USAGE)
        if not 0 <= self.conflict_code <= 255:
            raise Abort("-E/--conflict-exit-code must be 0-255", EXIT_USAGE)
        if self.shared and self.exclusive:
            raise Abort("-s/--shared and -x/--exclusive exclude each other", EXIT_USAGE)
        if self.permits is not None:
            if self.permits < 1:
                raise Abort("--permits must be 1 or more", EXIT_USAGE)
            if self.mode is not None:
                raise Abort("--permits takes a permit of semaphore(NAME): no -s or -x with it", EXIT_USAGE)

    @property
    def mode(self) -> str | None:
        """None for the mutex lock(NAME); "shared" or "exclusive" for a side of rwlock(NAME)."""
        if self.shared or self.legacy_mode == "read":
            return "shared"
        if self.exclusive or self.legacy_mode == "write":
            return "exclusive"
        return None

    @contextlib.contextmanager
    def held(self, url: str | None, name: str) -> Iterator[Any]:
        """The lock NAME, held: the store connected and the lock taken within -n / -w (``Abort`` if not), a stop
        signal raising ``Interrupted`` until the block ends; the store closed after it."""
        deadline = _deadline(self.nonblock, self.timeout)
        with _open(url, deadline) as store:
            lock = self.lock_for(store, name)
            with _raise_on_stop_signals():
                self.acquire(store, lock, name, deadline)
                yield lock

    def lock_for(self, store: Store, name: str) -> Any:
        if self.permits is not None:
            return store.semaphore(name, permits=self.permits, ttl=self.ttl)
        if self.mode is None:
            return store.lock(name, ttl=self.ttl)
        rw = store.rwlock(name, ttl=self.ttl)
        return rw.read if self.mode == "shared" else rw.write

    def acquire(self, store: Store, lock: Any, name: str, deadline: Deadline) -> None:
        """Take ``lock`` within ``deadline`` (one try with -n), saying so with -v; ``Abort`` with -E's code if
        it was not acquired."""
        timeout = None if deadline.at is None else deadline.at - deadline.start
        verbose = feedback.verbosity()
        if verbose:
            feedback.say(feedback.store_line(store))
        began = monotonic()
        with Budget(until=deadline.calls_end()):  # what connecting left of it
            if self.nonblock:
                ok = lock.acquire(blocking=False)
            else:
                inspect = functools.partial(store.inspect, name)
                with feedback.waiting(verbose, f"{name!r}", inspect, feedback.lock_holders, timeout):
                    ok = lock.acquire(timeout=deadline.remaining())
        if not ok:
            why = "is held by another owner" if self.nonblock else f"not acquired within {seconds(timeout or 0)}"
            raise Abort(f"lock {name!r} {why}", self.conflict_code)
        if verbose:
            feedback.say(f"acquired {name!r} (fence {lock.fence}) after {seconds(monotonic() - began)}")


def _deadline(nonblock: bool, timeout: float | None) -> Deadline:
    """The wait ``-n`` / ``-w S`` allow, from now: connecting counts (docs/cli.md, "One deadline")."""
    return Deadline.after(0.0 if nonblock else timeout)


def _open(url: str | None, deadline: Deadline) -> Store:
    """The store, connected within the wait's budget: a server that never answers costs ``-w S`` (at least
    2 s), not the backend's connect timeout."""
    with Budget(until=deadline.calls_end()):
        return connect(url)


def lock_options(f: Any) -> Any:
    """The options ``run`` and ``hold`` share (flock(1)'s, plus the lease), handed to the command as one
    ``flock: Flock`` argument."""

    @functools.wraps(f)
    def command(
        *args: Any,
        nonblock: bool,
        timeout: float | None,
        conflict_code: int,
        shared: bool,
        exclusive: bool,
        legacy_mode: str | None,
        ttl: float,
        permits: int | None,
        **kwargs: Any,
    ) -> Any:
        flock = Flock(nonblock, timeout, conflict_code, shared, exclusive, legacy_mode, ttl, permits)
        return f(*args, flock=flock, **kwargs)

    for opt in reversed(
        [
            click.option("-n", "--nonblock", is_flag=True, help="One try: fail at once if the lock is held."),
            click.option(
                "-w",
                "--timeout",
                "--wait",
                "timeout",
                type=float,
                default=None,
                metavar="S",
                help="Give up if not acquired within S seconds (default: wait forever).",
            ),
            click.option(
                "-E",
                "--conflict-exit-code",
                "conflict_code",
                type=int,
                default=EXIT_TIMEOUT,
                show_default=True,
                metavar="CODE",
                help="Exit code when the lock is not acquired (-n or -w).",
            ),
            click.option("-s", "--shared", is_flag=True, help="Shared: the read side of rwlock(NAME)."),
            click.option(
                "-x",
                "--exclusive",
                is_flag=True,
                help="Exclusive: the write side of rwlock(NAME) (excludes -s holders).",
            ),
            click.option(
                "--permits",
                type=int,
                default=None,
                metavar="N",
                help="A permit of semaphore(NAME): at most N holders at once (like `consul lock -n N`).",
            ),
            click.option("--read", "legacy_mode", flag_value="read", hidden=True),
            click.option("--write", "legacy_mode", flag_value="write", hidden=True),
            click.option(
                "--ttl",
                type=float,
                default=30.0,
                show_default=True,
                metavar="S",
                help="Lease in seconds (renewed while held).",
            ),
        ]
    ):
        command = opt(command)
    return command


@click.command(
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": False},
    short_help="Run CMD while holding the lock NAME (like flock(1)).",
)
@lock_options
@click.option("-c", "--command", "shell", default=None, metavar="'SHELL CMD'", help="Run a shell string (sh -c).")
@click.option(
    "--kill-after",
    type=float,
    default=5.0,
    show_default=True,
    metavar="S",
    help="On loss of the lock: SIGTERM to CMD, then SIGKILL after S seconds.",
)
@click.option(
    "--once",
    is_flag=True,
    help="At most once (a scheduled job): never wait; if NAME is held, skip CMD and exit 0 (or -E CODE).",
)
@click.option(
    "--at-most",
    type=float,
    default=None,
    metavar="S",
    help="With --once: the lease, not renewed (default 600): a crashed run frees NAME after S seconds.",
)
@click.option(
    "--at-least",
    type=float,
    default=None,
    metavar="S",
    help="With --once: keep NAME held until S seconds after the start, even if CMD ends sooner (default 0).",
)
@click.argument("name")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def run(
    ctx: click.Context,
    name: str,
    flock: Flock,
    shell: str | None,
    kill_after: float,
    once: bool,
    at_most: float | None,
    at_least: float | None,
    cmd: tuple[str, ...],
) -> None:
    """Run CMD while holding the lock NAME (default: the mutex lock(NAME)); with no CMD, hold it like ``distlock hold``.

    Options go before NAME; everything after NAME is CMD, verbatim (an optional ``--`` first is dropped), or
    ``-c 'SHELL CMD'``. CMD gets DISTLOCK_NAME and DISTLOCK_FENCE in its environment and never outlives the lock:
    if the lock is lost CMD's processes get SIGTERM, then SIGKILL after --kill-after, and run exits 70; if run
    dies, even by SIGKILL, they are killed; those CMD leaves running when it ends are stopped too. Exit codes:
    CMD's own (128+N if it died of signal N); 75 (or -E CODE) not acquired; 2 bad usage; 69 backend unreachable; 70 lost; 126/127 CMD not executable / not found; 130 Ctrl-C.

    With --once (a scheduled job on several hosts): one try; if NAME is held CMD is skipped and run exits 0
    (or -E CODE if given); the lease is --at-most, not renewed, and NAME stays held until --at-least seconds
    after the start even if CMD ends sooner.
    """
    obj = ctx.obj
    with one_line_errors(obj["debug"]):
        flock.check(name)
        _seconds(kill_after, "--kill-after", zero_ok=True)
        argv = _command_line(shell, cmd)
        if once or at_most is not None or at_least is not None:
            given = ctx.get_parameter_source("conflict_code") is not click.core.ParameterSource.DEFAULT
            run_once = _OnceRun(name, at_most, at_least, flock.conflict_code if given else 0)
            if ctx.get_parameter_source("ttl") is not click.core.ParameterSource.DEFAULT:
                raise Abort("--once takes its lease from --at-most, not --ttl", EXIT_USAGE)
            sys.exit(run_once.run(obj["url"], run_once.check(once, flock, argv), kill_after))
        if argv is None:
            _hold(obj["url"], name, flock)
            return
        sys.exit(_run(obj["url"], name, flock, argv, kill_after))


def _command_line(shell: str | None, cmd: tuple[str, ...]) -> list[str] | None:
    """CMD as argv, or None to just hold the lock."""
    if cmd and cmd[0] in ("-c", "--command") and shell is None:
        if len(cmd) != 2:
            raise Abort("-c takes exactly one shell string: -c 'CMD ARGS'", EXIT_USAGE)
        shell, cmd = cmd[1], ()
    if shell is not None:
        if cmd:
            raise Abort("give either -c 'SHELL CMD' or CMD [ARG...], not both", EXIT_USAGE)
        return ["/bin/sh", "-c", shell]
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    return list(cmd) if cmd else None


def _run(url: str | None, name: str, flock: Flock, argv: list[str], kill_after: float) -> int:
    with flock.held(url, name) as lock:
        try:
            return supervise(lock, name, argv, kill_after)
        finally:
            with contextlib.suppress(LockError):
                if lock.owned():
                    lock.release()


class _OnceRun:
    """``run --once``: CMD at most once across hosts (``store.once``), skipped when NAME is held."""

    def __init__(self, name: str, at_most: float | None, at_least: float | None, skip_code: int) -> None:
        self.name = name
        self.at_most = 600.0 if at_most is None else at_most
        self.at_least = 0.0 if at_least is None else at_least
        self.skip_code = skip_code

    def check(self, once: bool, flock: Flock, argv: list[str] | None) -> list[str]:
        """The options' checks (one-line usage errors); CMD's argv."""
        if not once:
            raise Abort("--at-most and --at-least go with --once", EXIT_USAGE)
        if flock.mode is not None or flock.timeout is not None or flock.permits is not None:
            raise Abort("--once never waits and takes the mutex: no -w, -s, -x or --permits with it", EXIT_USAGE)
        if argv is None:
            raise Abort("--once needs a CMD to run", EXIT_USAGE)
        _seconds(self.at_most, "--at-most")
        _seconds(self.at_least, "--at-least", zero_ok=True)
        if self.at_least > self.at_most:
            raise Abort("--at-least must not exceed --at-most", EXIT_USAGE)
        return argv

    def run(self, url: str | None, argv: list[str], kill_after: float) -> int:
        with _open(url, _deadline(True, None)) as store, _raise_on_stop_signals():
            if feedback.verbosity():
                feedback.say(feedback.store_line(store))
            with store.once(self.name, at_most=self.at_most, at_least=self.at_least) as ran:
                if not ran:
                    if self.skip_code:
                        raise Abort(f"lock {self.name!r} is held by another owner: skipped", self.skip_code)
                    return 0
                return supervise(ran, self.name, argv, kill_after)


@click.command(short_help="Hold the lock NAME until interrupted (like `etcdctl lock NAME`).")
@lock_options
@click.argument("name")
@click.argument("extra", nargs=-1, type=click.UNPROCESSED, metavar="")
@click.pass_obj
def hold(
    obj: dict[str, Any],
    name: str,
    flock: Flock,
    extra: tuple[str, ...],
) -> None:
    """Take the lock NAME, print "NAME FENCE" on one line, and hold it (renewing) until SIGINT, SIGTERM or SIGHUP;
    then release it and exit 0. Exit 70 if the lock is lost meanwhile, 75 (or -E CODE) if not acquired.
    It takes no command: ``distlock run NAME -- CMD`` runs one under the lock."""
    with one_line_errors(obj["debug"]):
        if extra:  # taken, so the error can point at ``run`` instead of click's "unexpected extra arguments"
            cmd = shlex.join(extra[1:] if extra[0] == "--" else extra)
            raise Abort(f"hold takes no command; to run one under the lock: distlock run {shlex.quote(name)} -- {cmd}",
                        EXIT_USAGE)  # fmt: skip
        flock.check(name)
        _hold(obj["url"], name, flock)


def _hold(url: str | None, name: str, flock: Flock) -> None:
    with flock.held(url, name) as lock:
        try:
            click.echo(f"{name} {lock.fence}")
            sys.stdout.flush()
            while not lock.lost.wait(0.2):
                pass
        except Interrupted:
            with contextlib.suppress(LockError):
                lock.release()
            return
        with contextlib.suppress(LockError):
            lock.release()
        raise Abort(f"lock {name!r} was lost", EXIT_LOST)


COMMANDS = [run, hold]

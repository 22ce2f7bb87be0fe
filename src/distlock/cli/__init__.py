"""The ``distlock`` command line (SPEC section 8).

Exit codes of its own: 0 ok; 2 bad usage or URL; 69 backend unreachable; 70 the lock was lost while
``run``'s command ran; 75 lock not acquired in time. ``run`` otherwise exits with its command's code.
Errors are one line on stderr; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import importlib
import logging
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click

from .. import __version__
from .._errors import AcquireTimeout, BackendError, ConfigError, LockError, UnsupportedFeature
from .._url import scrub

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69
EXIT_LOST = 70
EXIT_TIMEOUT = 75


class Abort(Exception):
    """A one-line error with the exit code to use."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def exit_code_for(err: BaseException) -> int:
    if isinstance(err, AcquireTimeout):
        return EXIT_TIMEOUT
    if isinstance(err, (ConfigError, UnsupportedFeature)):
        return EXIT_USAGE
    if isinstance(err, BackendError):
        return EXIT_UNAVAILABLE
    return 1


@contextmanager
def one_line_errors(debug: bool) -> Iterator[None]:
    """Turn every error into one scrubbed line on stderr and the documented exit code."""
    try:
        yield
    except Abort as err:
        click.echo(f"distlock: {err}", err=True)
        sys.exit(err.code)
    except LockError as err:
        if debug:
            traceback.print_exc()
        click.echo(f"distlock: {scrub(str(err))}", err=True)
        sys.exit(exit_code_for(err))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--url", envvar="DISTLOCK_URL", default=None, help="Store URL (default: $DISTLOCK_URL, else SQLite).")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.version_option(version=__version__, prog_name="distlock")
@click.pass_context
def cli(ctx: click.Context, url: str | None, debug: bool) -> None:
    """Distributed locks from the shell: run commands under a lock, inspect and break locks."""
    logging.basicConfig(level=logging.DEBUG if debug else logging.ERROR, format="distlock: %(message)s")
    ctx.obj = {"url": url, "debug": debug}


def _register() -> None:
    # each command lives in its own module, which defines ``command`` (a click command)
    for module in ("commands", "demo", "bench", "check"):
        try:
            mod = importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{module}":
                continue
            raise
        for cmd in getattr(mod, "COMMANDS", [getattr(mod, "command", None)]):
            if cmd is not None:
                cli.add_command(cmd)


_register()


def main(argv: list[str] | None = None) -> Any:
    runner: Callable[..., Any] = cli.main
    try:
        return runner(args=argv, prog_name="distlock", standalone_mode=True)
    except click.exceptions.Exit as e:  # pragma: no cover - standalone_mode handles it
        sys.exit(e.exit_code)

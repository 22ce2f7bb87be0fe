"""The ``distlock`` command line (docs/cli.md).

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
from pathlib import Path
from typing import Any

import click

from .. import __version__
from .._errors import AcquireTimeout, BackendError, ConfigError, LockError, UnsupportedFeature
from .._url import scrub

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69
EXIT_LOST = 70
EXIT_TIMEOUT = 75
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT) while waiting


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


def file_option(flag: str, dest: str, help: str) -> Callable[[Any], Any]:
    """An option naming a file to write (``-`` for stdout where the command says so)."""
    return click.option(flag, dest, type=click.Path(dir_okay=False, path_type=Path), default=None, help=help)


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
    except (KeyboardInterrupt, SystemExit, click.exceptions.Exit, click.ClickException):
        raise
    except Exception as err:  # noqa: BLE001  (a bug of ours: still one line; the traceback with --debug)
        if debug:
            traceback.print_exc()
        click.echo(f"distlock: internal error: {type(err).__name__}: {scrub(str(err))}", err=True)
        sys.exit(1)


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
    # each module defines ``command`` (a click command) or ``COMMANDS`` (the several it holds)
    for module in ("lock", "elect", "admin", "demo", "bench", "check", "init"):
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

from .lock import Interrupted  # noqa: E402  (needs the names above)


def main(argv: list[str] | None = None) -> Any:
    """The ``distlock`` entry point: usage errors are one line (exit 2), Ctrl-C exits 130."""
    runner: Callable[..., Any] = cli.main
    try:
        code = runner(args=argv, prog_name="distlock", standalone_mode=False)
    except click.UsageError as err:
        where = (
            f"distlock {err.ctx.command_path.split(' ', 1)[1]}"
            if err.ctx and " " in err.ctx.command_path
            else "distlock"
        )
        click.echo(f"{where}: {err.format_message()} (see '{where} --help')", err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as err:
        click.echo(f"distlock: {err.format_message()}", err=True)
        sys.exit(err.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    except Interrupted as sig:  # a stop signal while waiting for a lock
        sys.exit(128 + sig.signum)
    sys.exit(code if isinstance(code, int) else 0)

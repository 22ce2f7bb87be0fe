"""The ``distlock`` command line (docs/cli.md).

Exit codes of its own: 0 ok; 2 bad usage or URL; 69 backend unreachable; 70 the lock was lost while
``run``'s command ran; 75 lock not acquired in time. ``run`` otherwise exits with its command's code.
Errors are one line on stderr; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from .. import __version__
from .._errors import AcquireTimeout, BackendError, ConfigError, LockError, UnsupportedFeature
from .._sync.store import Store
from .._sync.store import connect as _connect
from .._url import StoreConfig, default_store, parse_url, scrub

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


def json_option(what: str) -> Callable[[Any], Any]:
    """``--json FILE``: write ``what`` as JSON to FILE, or with ``-`` to stdout (``json_to_stdout``)."""
    return file_option("--json", "json_file", f"Write {what} as JSON ('-' for stdout).")


def json_to_stdout(json_file: Path | None) -> bool:
    """Does ``--json`` write to stdout? Then the command's tables go to stderr, out of the JSON's way."""
    return json_file is not None and str(json_file) == "-"


def write_json(json_file: Path | None, doc: Any, *, sort_keys: bool = False) -> None:
    """Write ``doc`` where ``--json`` says (nowhere without it), indented."""
    if json_file is None:
        return
    text = json.dumps(doc, indent=2, sort_keys=sort_keys)
    if json_to_stdout(json_file):
        click.echo(text)
    else:
        json_file.write_text(text + "\n")


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


def _url_error(err: ConfigError) -> ConfigError:
    """``err`` saying which URL it is about (``--url``, ``$DISTLOCK_URL`` or the default): a bad
    ``$DISTLOCK_URL`` must not look like a bad ``--url``. Unchanged outside a command (a worker process)."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    if not isinstance(obj, dict):
        return err
    source = obj.get("url_source") or "the default URL (the host's SQLite store; set --url or $DISTLOCK_URL)"
    return ConfigError(f"{source}: {err.args[0]}", name=err.name, backend=err.backend)


_noted: list[str] = []


def default_url() -> str:
    """The default store's URL, and on stderr (once) the note that it is not the host-wide one, if it is not."""
    url, note = default_store()
    if note is not None and note not in _noted:
        _noted.append(note)
        click.echo(f"distlock: note: {note}", err=True)
    return url


def connect(url: str | None) -> Store:
    """The store at ``url`` (the commands' only way to open one), else the default (``default_url``): a URL
    error names the URL's source."""
    if url is None:
        url = default_url()
    try:
        return _connect(url)
    except ConfigError as err:
        raise _url_error(err) from None


def store_line(store: Store) -> str:
    """Which store a command uses, for people: its URL (credentials masked) and, for a file, its full path."""
    shown = store._backend.describe()
    path = getattr(store._backend, "db_key", None)
    if store.scheme == "sqlite" and isinstance(path, str) and not shown.endswith(path):
        shown += f" ({path})"
    return f"store: {shown}"


def url_config(url: str | None) -> StoreConfig:
    """``url`` parsed (for commands that look at it before opening it); errors name the URL's source."""
    try:
        return parse_url(url)
    except ConfigError as err:
        raise _url_error(err) from None


def _set_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``--url`` / ``$DISTLOCK_URL`` (before the command or after it): the URL and where it came from."""
    if value is None:
        return None
    obj = ctx.find_root().ensure_object(dict)
    obj["url"] = value
    source = ctx.get_parameter_source("url")
    obj["url_source"] = "$DISTLOCK_URL" if source is click.core.ParameterSource.ENVIRONMENT else "--url"
    return value


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.find_root().ensure_object(dict)["debug"] = True
        logging.getLogger().setLevel(logging.DEBUG)
    return value


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.find_root().ensure_object(dict)["verbose"] = True
    return value


def _set_quiet(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.find_root().ensure_object(dict)["verbose"] = False
    return value


_URL_HELP = "Store URL (default: $DISTLOCK_URL, else SQLite). Accepted before or after the command."
_DEBUG_HELP = "Show tracebacks and debug logs. Accepted before or after the command."


def global_options(*, sub: bool) -> list[click.Option]:
    """The group's options, which every command accepts too (as etcdctl, kubectl and git do): on the group
    ``--url`` also reads ``$DISTLOCK_URL``; on a command it only overrides what the group got."""
    return [
        click.Option(
            ["--url"], envvar=None if sub else "DISTLOCK_URL", default=None, expose_value=False, is_eager=True,
            callback=_set_url, help=_URL_HELP, metavar="URL",
        ),
        click.Option(["--debug"], is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                     help=_DEBUG_HELP),
        click.Option(["-v", "--verbose"], is_flag=True, expose_value=False, is_eager=True, callback=_set_verbose,
                     help="While waiting for a lock: say what for and who holds it (on stderr; on a terminal "
                          "it shows after 1s anyway), and which store is used."),
        click.Option(["-q", "--quiet"], is_flag=True, expose_value=False, is_eager=True, callback=_set_quiet,
                     help="Say nothing while waiting for a lock."),
        *([] if not sub else [click.Option(
            ["--version"], is_flag=True, expose_value=False, is_eager=True, callback=_show_version,
            help="Show the version and exit.")]),
    ]  # fmt: skip


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version`` after the command too (the group's own is click's ``version_option``)."""
    if value and not ctx.resilient_parsing:
        click.echo(f"distlock, version {__version__}")
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name="distlock")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Distributed locks from the shell: run commands under a lock, inspect and break locks."""
    obj = ctx.ensure_object(dict)
    obj.setdefault("url", None)
    obj.setdefault("debug", False)
    obj.setdefault("verbose", None)  # None: the waiting feedback only on a terminal (cli/feedback.py)
    logging.basicConfig(level=logging.DEBUG if obj["debug"] else logging.ERROR, format="distlock: %(message)s")


cli.params[:0] = global_options(sub=False)

# reST markup of the docstrings, which click prints as they are: ``x`` and :role:`x` (``~a.b`` shows ``b``)
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?(?:[\w.]*\.)?([^`]+)`")


def plain(text: str | None) -> str | None:
    """Help text with the docstrings' reST literals and Sphinx roles as plain words."""
    if text is None:
        return None
    return _ROLE.sub(r"\1", text).replace("``", "")


def _forgiving(cmd: click.Command) -> None:
    """Give ``cmd`` (and its subcommands) the global options, and help text without reST markup."""
    cmd.help, cmd.short_help = plain(cmd.help), plain(cmd.short_help)
    for param in cmd.params:
        if isinstance(param, click.Option):
            param.help = plain(param.help)
    taken = {opt for param in cmd.params for opt in param.opts}
    cmd.params.extend(opt for opt in global_options(sub=True) if not taken.intersection(opt.opts))
    for sub in getattr(cmd, "commands", {}).values():
        _forgiving(sub)


def _register() -> None:
    # each module defines ``command`` (a click command) or ``COMMANDS`` (the several it holds)
    for module in ("lock", "elect", "prims", "admin", "demo", "bench", "check", "init"):
        try:
            mod = importlib.import_module(f"{__name__}.{module}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{module}":
                continue
            raise
        for cmd in getattr(mod, "COMMANDS", [getattr(mod, "command", None)]):
            if cmd is not None:
                _forgiving(cmd)
                cli.add_command(cmd)


cli.help = plain(cli.help)
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

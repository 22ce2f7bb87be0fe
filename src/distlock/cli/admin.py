"""``status``, ``list``, ``release`` and ``request-release``: the admin commands that look at locks, break them,
or ask their holders to let go.

``--json`` layouts (stable; documented in docs/cli.md):

* ``status``: ``{"name", "held": bool, "kind", "waiters", "holders": [{"owner", "fence", "mode", "ttl_left"}]}``
  (a semaphore's also ``"permits", "taken", "waiting_permits"`` and each holder's ``"permits"``)
  (a holder's ``"client_name"`` too when its store has one)
* ``list``: a JSON array of the same objects (``held`` is always true there); ``list --watch --json``
  prints one such array per line, each time the locks change (``watch``).

(``init``, the admin command that creates a SQL store's tables, is in ``init``.)
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .._core.types import LockInfo
from . import EXIT_USAGE, Abort, connect, one_line_errors, store_line
from .table import plain, to_json


def _info_json(name: str, info: LockInfo | None) -> dict[str, Any]:
    if info is None:
        return {"name": name, "held": False, "kind": None, "waiters": 0, "holders": []}
    return to_json(info)


@click.command()
@click.option("-q", "--quiet", is_flag=True, help="Print nothing; exit 0 if held, 1 if free.")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(obj: dict[str, Any], name: str, quiet: bool, as_json: bool) -> None:
    """Show who holds NAME (owner, fence, mode, seconds left, waiters: the table list prints), or "NAME: free"."""
    with one_line_errors(obj["debug"]), connect(obj["url"]) as store:
        info = store.inspect(name)
        held = info is not None and bool(info.holders)
        if quiet:
            sys.exit(0 if held else 1)
        if as_json:
            click.echo(json.dumps(_info_json(name, info)))
            return
        click.echo(store_line(store), err=True)  # on stderr: the table on stdout stays the table
        if info is None or not info.holders:
            click.echo(f"{name}: free")
            return
        click.echo(plain([info]), nl=False)


@click.command(name="list")
@click.argument("prefix", default="")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option(
    "-w", "--watch", "live", is_flag=True,
    help="Keep watching: a live table on a terminal (q quits), else a new snapshot on each change.",
)  # fmt: skip
@click.pass_obj
def list_(obj: dict[str, Any], prefix: str, as_json: bool, live: bool) -> None:
    """List held locks whose names start with PREFIX (--watch: live, until q or Ctrl-C)."""
    with one_line_errors(obj["debug"]), connect(obj["url"]) as store:
        if live:
            from .watch import watch  # rich and the terminal handling only when asked for

            watch(store, prefix, as_json)
            return
        infos = list(store.list(prefix))
        if as_json:
            click.echo(json.dumps([_info_json(i.name, i) for i in infos]))
            return
        click.echo(plain(infos), nl=False)


@click.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="Required: this breaks another process's lock.")
@click.pass_obj
def release(obj: dict[str, Any], name: str, force: bool) -> None:
    """Force-release NAME (admin). Its holders see their lock as lost."""
    with one_line_errors(obj["debug"]):
        if not force:
            raise Abort("release breaks another owner's lock; pass --force to do it", EXIT_USAGE)
        with connect(obj["url"]) as store:
            broke = store.break_lock(name)
        click.echo(f"{name}: released" if broke else f"{name}: was not held")


@click.command(name="request-release")
@click.argument("name")
@click.option("--reason", default="", help="What the holders' on_revoke callbacks and revoke_reason get.")
@click.pass_obj
def request_release(obj: dict[str, Any], name: str, reason: str) -> None:
    """Ask the holders of NAME to release it; they decide (nothing is broken). Exit 1 if nobody holds it."""
    with one_line_errors(obj["debug"]), connect(obj["url"]) as store:
        asked = store.request_release(name, reason)
    click.echo(f"{name}: its holders were asked to release it" if asked else f"{name}: not held, nobody asked")
    if not asked:
        sys.exit(1)


COMMANDS = [status, list_, release, request_release]

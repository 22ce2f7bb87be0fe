"""``run``, ``status``, ``list`` and ``release``: the everyday commands.

``--json`` layouts (stable; documented in docs/cli.md):

* ``status``: ``{"name", "held": bool, "kind", "waiters", "holders": [{"owner", "fence", "mode", "ttl_left"}]}``
* ``list``: a JSON array of the same objects (``held`` is always true there).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any

import click

from .. import _sync
from .._core.types import LockInfo
from .._errors import LockError
from .._sync.store import connect
from . import EXIT_LOST, EXIT_TIMEOUT, EXIT_USAGE, Abort, one_line_errors


def _info_json(name: str, info: LockInfo | None) -> dict[str, Any]:
    if info is None:
        return {"name": name, "held": False, "kind": None, "waiters": 0, "holders": []}
    return {"held": bool(info.holders), **info.to_json()}


def _positive(value: float | None, what: str) -> float | None:
    if value is not None and not value > 0:
        raise Abort(f"{what} must be > 0 seconds", EXIT_USAGE)
    return value


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.option("--ttl", type=float, default=30.0, show_default=True, help="Lease in seconds (renewed while CMD runs).")
@click.option("--timeout", type=float, default=None, help="Give up (exit 75) if not acquired within S seconds.")
@click.option("--read", "mode", flag_value="read", help="Take the read side of rwlock(NAME) (shared).")
@click.option("--write", "mode", flag_value="write", help="Take the write side of rwlock(NAME) (exclusive).")
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.pass_obj
def run(
    obj: dict[str, Any], name: str, ttl: float, timeout: float | None, mode: str | None, cmd: tuple[str, ...]
) -> None:
    """Run CMD while holding the lock NAME (default: the mutex lock(NAME)).

    CMD gets DISTLOCK_NAME and DISTLOCK_FENCE in its environment. If the lock is lost while CMD runs,
    CMD gets SIGTERM and run exits 70. Exit 75 if not acquired in time; otherwise CMD's exit code.
    """
    with one_line_errors(obj["debug"]):
        _positive(ttl, "--ttl")
        if timeout is not None and timeout < 0:
            raise Abort("--timeout must be >= 0 seconds", EXIT_USAGE)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise Abort("run needs a command after --", EXIT_USAGE)
        with connect(obj["url"]) as store:
            lock: _sync.locks.Lock
            if mode is None:
                lock = store.lock(name, ttl=ttl)
            else:
                rw = store.rwlock(name, ttl=ttl)
                lock = rw.read if mode == "read" else rw.write
            if not lock.acquire(timeout=timeout):
                raise Abort(f"lock {name!r} not acquired within {timeout}s", EXIT_TIMEOUT)
            code = _run_child(lock, name, cmd)
        sys.exit(code)


def _run_child(lock: Any, name: str, cmd: tuple[str, ...]) -> int:
    env = dict(os.environ, DISTLOCK_NAME=name, DISTLOCK_FENCE=str(lock.fence if lock.fence is not None else ""))
    try:
        child = subprocess.Popen(list(cmd), env=env)
    except OSError as exc:
        lock.release()
        raise Abort(
            f"cannot run {cmd[0]!r}: {exc.strerror}", 127 if isinstance(exc, FileNotFoundError) else 126
        ) from None
    lost = threading.Event()

    def on_lost(_lock: object) -> None:
        lost.set()
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    lock.on_lost(on_lost)
    if lock.lost.is_set():  # lost between acquire and registering the callback
        on_lost(lock)

    def forward(signum: int, _frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        code = child.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    try:
        lock.release()
    except LockError:
        lost.set()
    if lost.is_set():
        raise Abort(f"lock {name!r} was lost while the command ran; it was sent SIGTERM", EXIT_LOST)
    return code if code >= 0 else 128 - code


@click.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status(obj: dict[str, Any], name: str, as_json: bool) -> None:
    """Show who holds NAME (owner, fence, seconds left) and how many wait."""
    with one_line_errors(obj["debug"]), connect(obj["url"]) as store:
        info = store.inspect(name)
        if as_json:
            click.echo(json.dumps(_info_json(name, info)))
            return
        if info is None or not info.holders:
            click.echo(f"{name}: free")
            return
        click.echo(f"{name}: held ({info.kind}), {info.waiters if info.waiters is not None else '?'} waiting")
        for h in info.holders:
            left = "session" if h.ttl_left is None else f"{h.ttl_left:.1f}s left"
            click.echo(f"  {h.owner}  fence={h.fence}  mode={h.mode}  {left}")


@click.command(name="list")
@click.argument("prefix", default="")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def list_(obj: dict[str, Any], prefix: str, as_json: bool) -> None:
    """List held locks whose names start with PREFIX."""
    with one_line_errors(obj["debug"]), connect(obj["url"]) as store:
        infos = list(store.list(prefix))
        if as_json:
            click.echo(json.dumps([_info_json(i.name, i) for i in infos]))
            return
        for info in infos:
            fences = ",".join(str(h.fence) for h in info.holders)
            click.echo(f"{info.name}\t{info.kind}\tholders={len(info.holders)}\tfence={fences}")


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


COMMANDS = [run, status, list_, release]

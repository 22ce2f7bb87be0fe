"""``distlock demo``: several processes contend for one lock on the embedded default and prove it holds.

Each worker process loops: acquire ``demo/counter``, read a shared counter file, write it back plus one (a
read-modify-write that loses updates the moment two processes overlap), record the fence in a fenced
log that rejects a fence not larger than the last one, release. The parent shows live progress and a
closing table; the run passes when the counter equals the number of acquisitions and no fence went
backwards. Exit 1 if either check fails.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from .._url import redact
from . import connect, default_url, one_line_errors

LOCK_NAME = "distlock-demo/counter"


def _worker(index: int, url: str | None, workdir: str, seconds: float, ttl: float, events: Any) -> None:
    counter = Path(workdir) / "counter"
    fence_log = Path(workdir) / "fences"
    deadline = time.monotonic() + seconds
    with connect(url) as store:
        lock = store.lock(LOCK_NAME, ttl=ttl)
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            if not lock.acquire(timeout=max(0.0, deadline - t0)):
                break
            waited = time.monotonic() - t0
            fence = lock.fence or 0
            value = int(counter.read_text() or "0")
            time.sleep(0.001)  # widen the window a broken lock would lose updates in
            counter.write_text(str(value + 1))
            last = int(fence_log.read_text() or "0")
            stale = fence <= last
            if not stale:
                fence_log.write_text(str(fence))
            lock.release()
            events.put((index, waited, fence, stale))
    events.put((index, None, None, None))


def _table(stats: dict[int, list[tuple[float, int, bool]]], done: set[int], title: str) -> Table:
    table = Table(title=title)
    for col in ("worker", "acquisitions", "wait p50 ms", "wait max ms", "last fence", "stale writes", "state"):
        table.add_column(col, justify="right")
    for index in sorted(stats):
        rows = stats[index]
        waits = [w * 1000 for w, _, _ in rows]
        table.add_row(
            str(index),
            str(len(rows)),
            f"{statistics.median(waits):.1f}" if waits else "-",
            f"{max(waits):.1f}" if waits else "-",
            str(rows[-1][1]) if rows else "-",
            str(sum(1 for _, _, s in rows if s)),
            "done" if index in done else "running",
        )
    return table


@click.command()
@click.option("--workers", type=click.IntRange(2, 64), default=4, show_default=True, help="Processes contending.")
@click.option("--seconds", type=click.FloatRange(0.5, 600), default=5.0, show_default=True, help="How long each runs.")
@click.option("--ttl", type=click.FloatRange(0.1, 3600), default=10.0, show_default=True, help="Lease of the lock.")
@click.pass_obj
def demo(obj: dict[str, Any], workers: int, seconds: float, ttl: float) -> None:
    """Several processes contend on one lock (embedded SQLite by default): live progress, then a summary."""
    url: str = obj["url"] or default_url()  # resolved here: the workers open the same store, with no note each
    # a pipe or CI log has no width: rich would assume 80 columns and cut the table's headers
    console = Console() if sys.stdout.isatty() else Console(width=110)
    with one_line_errors(obj["debug"]):
        connect(url).close()  # fail fast, in one line, on a bad URL or store
        shown = redact(url)
        console.print(f"[bold]distlock demo[/]: {workers} processes, {seconds:g}s, lock {LOCK_NAME!r} on {shown}")
        ctx = mp.get_context("spawn")
        events = ctx.Queue()
        with tempfile.TemporaryDirectory(prefix="distlock-demo-") as workdir:
            (Path(workdir) / "counter").write_text("0")
            (Path(workdir) / "fences").write_text("0")
            procs = [
                ctx.Process(target=_worker, args=(i, url, workdir, seconds, ttl, events), daemon=True)
                for i in range(workers)
            ]
            for p in procs:
                p.start()
            stats: dict[int, list[tuple[float, int, bool]]] = {i: [] for i in range(workers)}
            done: set[int] = set()
            started = time.monotonic()
            with Live(_table(stats, done, "running"), console=console, refresh_per_second=8, transient=True) as live:
                while len(done) < workers:
                    try:
                        index, waited, fence, stale = events.get(timeout=0.2)
                    except queue.Empty:
                        if not any(p.is_alive() for p in procs) and events.empty():
                            break
                        continue
                    if waited is None:
                        done.add(index)
                    else:
                        stats[index].append((waited, fence, stale))
                    live.update(_table(stats, done, f"running {time.monotonic() - started:.1f}s"))
            for p in procs:
                p.join(10)
            counter = int((Path(workdir) / "counter").read_text())
        total = sum(len(r) for r in stats.values())
        stale_total = sum(1 for r in stats.values() for _, _, s in r if s)
        elapsed = time.monotonic() - started
        console.print(_table(stats, done, f"{total} acquisitions in {elapsed:.1f}s ({total / elapsed:.0f}/s)"))
        crashed = [i for i, p in enumerate(procs) if p.exitcode not in (0, None)]
        ok_counter = counter == total
        ok_fences = stale_total == 0
        console.print(
            f"shared counter = {counter}, acquisitions = {total}: "
            + ("[green]equal: no lost update[/]" if ok_counter else "[red]DIFFERENT: updates were lost[/]")
        )
        console.print(
            "fences: " + ("[green]strictly increasing[/]" if ok_fences else f"[red]{stale_total} stale writes[/]")
        )
        if crashed:
            console.print(f"[red]workers {crashed} crashed[/]")
        if not (ok_counter and ok_fences) or crashed or total == 0:
            raise SystemExit(1)
        console.print(f"[dim]pid {os.getpid()}: all checks passed[/]")


command = demo

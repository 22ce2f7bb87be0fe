"""``distlock bench``: uncontended rate and latency, hand-off latency, 8-way contention and the raw limit, and the
same with the async API (plus 100 tasks on one lock) next to it.

See docs/bench.md for the JSON layout. Exit codes: 0 measured; 1 a backend failed a measurement;
2 bad usage or URL.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .._url import parse_url, redact
from ..benchmark.measure import ASYNC_COST_TARGET, bench_url
from ..checker.servers import FAMILIES, spawned
from . import default_url, file_option, json_option, json_to_stdout, one_line_errors, url_config, write_json


def _n(v: float | None, unit: str = "") -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}{unit}" if v >= 100 else f"{v:.3g}{unit}"


def _p50_p99(m: dict[str, Any] | None) -> str:
    if not m or m["latency_ms"]["p50"] is None:
        return "n/a"
    return f"{_n(m['latency_ms']['p50'])}/{_n(m['latency_ms']['p99'])}"


def _share(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.0%}"


def render(results: list[dict[str, Any]]) -> Table:
    caption = (
        "; ".join(f"{r['backend']}: {r['url']}" for r in results)
        + ". vs raw: a rate as a share of the raw limit (round trips/s / 2), the hand-off p50 as a multiple of one"
        " raw round trip (its floor), all measured in this run"
    )
    table = Table(title="distlock bench", title_justify="left", caption=caption, caption_justify="left")
    for col in (
        "backend",
        "pairs/s",
        "vs raw",
        "p50/p99 ms",
        "hand-off p50/p99",
        "vs raw",
        "8-way /s",
        "vs raw",
        "min-max",
        "raw limit/s",
        "round trip ms",
    ):
        table.add_column(col, justify="right" if col != "backend" else "left")
    for r in results:
        u, c, raw = r["uncontended"], r["contention"], r["raw"]
        ratios = r.get("vs_raw") or {}
        hand = ratios.get("handoff_p50")
        table.add_row(
            r["backend"],
            _n(u and u["rate_per_s"]),
            _share(ratios.get("uncontended")),
            _p50_p99(u),
            _p50_p99(r["handoff"]),
            "n/a" if hand is None else f"{hand:.3g}x",
            _n(c and c["rate_per_s"]),
            _share(ratios.get("contention")),
            f"{c['min']}-{c['max']}" if c else "n/a",
            _n(raw["limit_per_s"]) if raw else "n/a",
            _n(raw["round_trip_ms"]) if raw else "n/a",
        )
    return table


def render_async(results: list[dict[str, Any]]) -> Table:
    caption = (
        f"async/sync = async time per acquire+release over the sync one (target <= {ASYNC_COST_TARGET}x); "
        "cpu = the same for this process's CPU time (the client's own cost, less sensitive to machine load); "
        "tasks = asyncio tasks on one lock in one process, min-max acquisitions per task"
    )
    table = Table(title="distlock bench, async API", title_justify="left", caption=caption, caption_justify="left")
    for col in ("backend", "sync pairs/s", "async pairs/s", "async/sync", "cpu", "p50/p99 ms", "hand-off p50/p99",
                "tasks /s", "per-task min-max"):  # fmt: skip
        table.add_column(col, justify="right" if col != "backend" else "left")
    for r in results:
        a = r.get("async") or {}
        u, t, ratio = a.get("uncontended"), a.get("tasks"), r.get("async_cost_ratio")
        verdict = "n/a" if ratio is None else f"{ratio:.2f}x {'ok' if ratio <= ASYNC_COST_TARGET else 'OVER'}"
        table.add_row(
            r["backend"],
            _n(r["uncontended"] and r["uncontended"]["rate_per_s"]),
            _n(u and u["rate_per_s"]),
            verdict,
            "n/a" if r.get("async_cpu_ratio") is None else f"{r['async_cpu_ratio']:.2f}x",
            _p50_p99(u),
            _p50_p99(a.get("handoff")),
            f"{_n(t['rate_per_s'])} ({t['tasks']})" if t else "n/a",
            f"{t['min']}-{t['max']}" if t else "n/a",
        )
    return table


@click.command()
@click.option("--url", "urls", multiple=True, help="A store URL to measure (repeatable; default: the global --url).")
@click.option(
    "--spawn",
    "spawn",
    is_flag=False,
    flag_value="redis",
    default=None,
    metavar="FAMILY[,FAMILY...]",
    help=f"Also start local servers and measure them: {', '.join(FAMILIES)} or all (plain --spawn: redis).",
)
@click.option(
    "--seconds", type=click.FloatRange(0.2, 600), default=3.0, show_default=True, help="Length of each measurement."
)
@click.option(
    "--workers", type=click.IntRange(2, 64), default=8, show_default=True, help="Processes in the contention run."
)
@click.option(
    "--tasks",
    "n_tasks",
    type=click.IntRange(2, 10_000),
    default=100,
    show_default=True,
    help="asyncio tasks on one lock in the async contention run.",
)
@json_option("results")
@file_option("--plot", "plot_file", "Draw a PNG chart (needs python-distlock[plot]).")
@click.pass_obj
def bench(
    obj: dict[str, Any],
    urls: tuple[str, ...],
    spawn: str | None,
    seconds: float,
    workers: int,
    n_tasks: int,
    json_file: Path | None,
    plot_file: Path | None,
) -> None:
    """Measure each backend: uncontended, hand-off between processes, 8-way contention, vs its raw limit; and the
    same with the async API, plus N tasks on one lock."""
    to_stderr = json_to_stdout(json_file)
    # a pipe or CI log has no width: rich would assume 80 columns and cut the two tables' headers
    console = Console(stderr=to_stderr, width=None if (sys.stderr if to_stderr else sys.stdout).isatty() else 140)
    with one_line_errors(obj["debug"]), contextlib.ExitStack() as stack:
        targets = list(urls) or ([] if spawn and not obj["url"] else [obj["url"] or default_url()])
        for u in targets:  # bad URLs fail before anything runs (naming the global URL's source)
            (parse_url if urls else url_config)(u)
        families = [f.strip() for f in (spawn or "").split(",") if f.strip()]
        families = list(FAMILIES) if families == ["all"] else families
        for family in families:
            with console.status(f"starting {family}"):
                targets.append(stack.enter_context(spawned(family)).url)
        if plot_file is not None:
            from ..benchmark.plot import plot  # fail early when matplotlib is missing
        load_start = os.getloadavg()  # the figures are only as steady as the machine: say how busy it was
        results = []
        for u in targets:
            with console.status(f"measuring {redact(u)}"):
                results.append(bench_url(u, seconds, workers=workers, n_tasks=n_tasks))
            for e in results[-1]["errors"]:
                console.print(f"[red]{redact(u)}: {e}[/]")
        console.print(render(results))
        console.print(render_async(results))
        doc = {
            "version": 3,
            "seconds": seconds,
            "host": {
                "cpus": os.cpu_count(),
                "machine": platform.machine(),
                "python": platform.python_version(),
                "load_avg": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in os.getloadavg()]},
            },
            "backends": results,
        }
        write_json(json_file, doc)
        if plot_file is not None:
            plot(results, plot_file)
            console.print(f"chart written to {plot_file}")
        if any(r["errors"] for r in results):
            raise SystemExit(1)


command = bench

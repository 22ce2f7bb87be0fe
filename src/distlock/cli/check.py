"""``distlock check``: the safety checker (docs/checker.md).

Exit codes: 0 every check passed; 1 a safety violation or a liveness failure (the table says which);
2 bad usage or URL; 69 backend unreachable.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from .._errors import ConfigError
from .._url import redact
from ..checker.runner import ALGORITHMS, APIS, FAULTS, CheckConfig, run_check
from ..checker.servers import FAMILIES, spawned
from ..checker.sinks import SINKS, WRITERS
from . import default_url, file_option, json_option, json_to_stdout, one_line_errors, write_json


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _verdict(ok: bool, good: str = "ok") -> str:
    return f"[green]{good}[/]" if ok else "[bold red]VIOLATION[/]"


def render(report: dict[str, Any]) -> Table:
    """The closing table: one row per measurement, with a verdict column."""
    lv = report["liveness"]
    fenced = report["fenced"]
    unf = report["unfenced"]
    table = Table(title=f"distlock check: {report['algorithm']} on {report['url']}", title_justify="left")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("verdict")
    table.add_row("acquisitions", str(report["acquisitions"]), "")
    table.add_row("wait ms p50 / p99 / max", " / ".join(_ms(report["wait_ms"][k]) for k in ("p50", "p99", "max")), "")
    table.add_row("hold ms p50 / p99 / max", " / ".join(_ms(report["hold_ms"][k]) for k in ("p50", "p99", "max")), "")
    faults = ", ".join(f"{k} {v['landed']}" for k, v in report["faults"].items()) or "none"
    table.add_row("faults landed", faults, "")
    table.add_row("holders told they lost the lock", str(report["told_lost"]), "")
    table.add_row(
        "unfenced lost updates",
        f"{unf['lost_updates']} of {unf['writes']}",
        "[yellow]expected under pause (not a violation)[/]"
        if unf["lost_updates"] and unf["explained"]
        else ("[green]none[/]" if not unf["lost_updates"] else "[bold red]unexplained[/]"),
    )
    if fenced["unfenced_lock"]:
        table.add_row("fenced writes", "n/a: the lock gives no fences", "")
    else:
        table.add_row("fenced writes accepted", str(fenced["accepted"]), "")
        table.add_row("fenced stale writes rejected", str(fenced["stale_rejected"]), "")
        table.add_row(
            "fenced stale writes accepted", str(fenced["stale_accepted"]), _verdict(fenced["stale_accepted"] == 0)
        )
    table.add_row(
        "fence monotonicity violations", str(report["fence_violations"]), _verdict(report["fence_violations"] == 0)
    )
    table.add_row(
        "silent overlaps (neither holder told)",
        f"{report['overlaps']['silent']} of {report['overlaps']['total']} overlaps",
        _verdict(report["overlaps"]["silent"] == 0),
    )
    late = report["told_late"]
    if late["handovers"]:
        value = f"max {_ms(late['max_ms'])} ms; {late['told']} of {late['handovers']} hand-overs told"
        if late["never_told"]:
            value += f", {late['never_told']} never"
    else:
        value = "no hand-over of a lost lock"
    table.add_row("told late (lost after the next grant)", value, _verdict(late["late"] == 0))
    kill_gap = lv["max_unavailable_after_kill_s"]
    table.add_row(
        "unavailable after a holder was killed",
        "-" if kill_gap is None else f"{kill_gap:.2f}s (lease {lv['ttl']:g}s, allowed {lv['allowed_s']:g}s)",
        ""
        if kill_gap is None
        else ("[green]ok[/]" if kill_gap <= lv["allowed_s"] else "[bold red]LIVENESS FAILURE[/]"),
    )
    pause_gap = lv["max_unavailable_after_pause_s"]
    table.add_row("unavailable after a holder was paused", "-" if pause_gap is None else f"{pause_gap:.2f}s", "")
    if report["errors"]:
        table.add_row("worker errors", str(report["errors"]), report["error_samples"][0][:80])
    return table


def render_primitive(report: dict[str, Any]) -> Table:
    """The closing table of a barrier, latch or double barrier run (``--algorithm barrier`` / ``latch`` /
    ``double-barrier``)."""
    kind = report["kind"]
    double = kind == "double-barrier"
    table = Table(title=f"distlock check: {kind} on {report['url']}", title_justify="left")
    for col, justify in (("measure", "left"), ("value", "right"), ("verdict", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    size = {"barrier": "parties", "latch": "count per round"}.get(kind, "members per round")
    table.add_row(size, str(report["size"]), "")
    if double:
        table.add_row("member rounds completed / timed out / failed",
                      f"{report['completed']} / {report['timed_out']} / {report['failed']}", "")  # fmt: skip
    else:
        table.add_row("waits released / timed out / failed",
                      f"{report['released']} / {report['timed_out']} / {report['failed']}", "")  # fmt: skip
    for label, key in (("wait", "wait_ms"), ("leave", "leave_ms")) if double else (("wait", "wait_ms"),):
        table.add_row(f"{label} ms p50 / p99 / max", " / ".join(_ms(report[key][k]) for k in ("p50", "p99", "max")), "")
    faults = ", ".join(f"{k} {v['landed']}" for k, v in report["faults"].items()) or "none"
    table.add_row("faults landed", faults, "")
    early = {"barrier": "released before enough arrivals", "latch": "released before the count reached zero"}.get(
        kind, "entered before every member entered"
    )
    table.add_row(early, str(report["early_releases"]), _verdict(report["early_releases"] == 0))
    if double:
        table.add_row("left before every member left or ran out", str(report["early_leaves"]),
                      _verdict(report["early_leaves"] == 0))  # fmt: skip
    if kind == "latch":
        table.add_row("count-downs reporting a count twice", str(report["repeated_counts"]),
                      _verdict(report["repeated_counts"] == 0))  # fmt: skip
    if report["errors"]:
        table.add_row("worker errors", str(report["errors"]), report["error_samples"][0][:80])
    return table


def render_semaphore(report: dict[str, Any]) -> Table:
    """The closing table of a semaphore run (``--algorithm semaphore``)."""
    table = Table(title=f"distlock check: semaphore on {report['url']}", title_justify="left")
    for col, justify in (("measure", "left"), ("value", "right"), ("verdict", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    table.add_row("permits (capacity)", str(report["size"]), "")
    by = ", ".join(f"{n} x{k}" for k, n in report["granted_by_permits"].items()) or "none"
    table.add_row("holdings granted (by permits)", f"{report['granted']} ({by})", "")
    table.add_row("timed out / refused / told lost",
                  f"{report['timed_out']} / {report['refused']} / {report['told_lost']}", "")  # fmt: skip
    table.add_row("wait ms p50 / p99 / max", " / ".join(_ms(report["wait_ms"][k]) for k in ("p50", "p99", "max")), "")
    faults = ", ".join(f"{k} {v['landed']}" for k, v in report["faults"].items()) or "none"
    table.add_row("faults landed", faults, "")
    table.add_row("most permits held at once (not told lost)", str(report["peak_permits"]), "")
    table.add_row("over-grants", str(report["over_grants"]), _verdict(report["over_grants"] == 0))
    table.add_row("holdings sharing a fence", str(report["shared_fences"]), _verdict(report["shared_fences"] == 0))
    big = report["big_requests"]
    longest = "-" if big["longest_wait_s"] is None else f"{big['longest_wait_s']:.2f}s of {big['run_s']:g}s"
    table.add_row(f"longest wait for all {report['size']} permits ({big['granted']}/{big['asked']} granted)", longest,
                  _verdict(big["starved"] == 0, f"ok (bound {big['bound_s']:g}s)"))  # fmt: skip
    if report["errors"]:
        table.add_row("worker errors", str(report["errors"]), report["error_samples"][0][:80])
    return table


def _choice(flag: str, choices: tuple[str, ...], default: str, help: str) -> Callable[[Any], Any]:
    """An option taking one of ``choices``, its default shown in ``--help``."""
    return click.option(flag, type=click.Choice(choices), default=default, show_default=True, help=help)


def _names(given: tuple[str, ...], known: tuple[str, ...], flag: str) -> tuple[str, ...]:
    """Repeated and comma-separated names of ``flag``, in the order of ``known`` (``all``: every one)."""
    asked = {n.strip() for g in given for n in g.split(",") if n.strip()}
    if "all" in asked:
        return known
    unknown = sorted(asked - set(known))
    if unknown:
        raise ConfigError(f"unknown {flag} {unknown[0]!r}; choose from {', '.join(known)} or all")
    return tuple(n for n in known if n in asked)


def render_sinks(report: dict[str, Any]) -> Table:
    """The data sinks' table: per sink and writer, the writes, the stale ones accepted and refused, by fault;
    then when ``at_risk`` came before ``lost``, by fault."""
    table = Table(title="data sinks (--sink): stale writes accepted", title_justify="left")
    for col in ("sink", "writer", "fault", "writes", "stale accepted", "refused", "verdict"):
        table.add_column(col, justify="right" if col in ("writes", "stale accepted", "refused") else "left")
    for sink, writers in report["sinks"].items():
        for writer, fig in writers.items():
            rows = [("all", fig)] + [(f, per) for f, per in sorted(fig["by_fault"].items()) if f != "none"]
            for fault, per in rows:
                stale = per["stale_accepted"]
                if writer == "unfenced":
                    verdict = "[yellow]caught (expected)[/]" if stale else ""
                else:
                    verdict = _verdict(stale == 0)
                if fig["errors"]:
                    verdict += f" ({fig['errors']} failed)"
                table.add_row(sink, writer, fault, str(per["writes"]), str(stale), str(per["stale_refused"]),
                              verdict if fault == "all" else "")  # fmt: skip
    return table


def render_at_risk(report: dict[str, Any]) -> Table:
    """When ``at_risk`` came before ``lost``, per fault that hit the holding (judged under freeze, half-open)."""
    table = Table(title="at_risk before lost (per fault)", title_justify="left")
    for col in ("fault", "lost", "at_risk first", "after", "never", "min ms", "median ms", "in release", "verdict"):
        table.add_column(col, justify="left" if col in ("fault", "verdict") else "right")
    for fault, g in report["at_risk"].items():
        ok = not (g["after"] or g["never"])
        table.add_row(fault, str(g["lost"]), str(g["before"]), str(g["after"]), str(g["never"]), _ms(g["min_ms"]),
                      _ms(g["median_ms"]), str(g["in_release"]), _verdict(ok) if g["judged"] else "")  # fmt: skip
    return table


def _with_options(url: str, options: tuple[str, ...]) -> str:
    for opt in options:
        key, eq, _value = opt.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"{opt!r} is not KEY=VALUE", param_hint="--url-option")
        url += ("&" if "?" in url else "?") + opt
    return url


@click.command()
@click.option("--url", "check_url", default=None, help="Store URL to check (default: the global --url, else SQLite).")
@click.option("--workers", type=click.IntRange(2, 64), default=8, show_default=True, help="Worker processes.")
@click.option("--seconds", type=click.FloatRange(1, 3600), default=10.0, show_default=True, help="Run length.")
@click.option("--ttl", type=click.FloatRange(0.2, 600), default=2.0, show_default=True, help="Lease of the lock.")
@click.option(
    "--hold",
    type=click.FloatRange(0.0, 10),
    default=0.02,
    show_default=True,
    help="Max sleep in the critical section (s).",
)
@click.option("--faults", default="", help=f"Comma-separated faults: {', '.join(FAULTS)}.")
@click.option(
    "--url-option",
    "url_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Add a URL option to the store checked, also with --spawn (e.g. mode=session for postgres/mysql).",
)
@_choice(
    "--algorithm",
    ALGORITHMS,
    "distlock",
    "distlock's lock, its leader election, a barrier, latch, double barrier or semaphore, or a known-broken baseline"
    " the checker must catch.",
)
@_choice(
    "--api",
    APIS,
    "sync",
    "Which of distlock's APIs the workers drive: the threaded one, or asyncio (its own drivers and tasks).",
)
@click.option(
    "--sink",
    "sinks",
    multiple=True,
    metavar="SINK[,SINK]",
    help=f"Each holding also writes to real data: {', '.join(SINKS)} (several allowed, or all); stale writes counted.",
)
@click.option(
    "--writer",
    "writers",
    multiple=True,
    metavar="MODE[,MODE]",
    help=f"How holders write to the sinks: {', '.join(WRITERS)} (default: all three).",
)
@click.option(
    "--sql-sink",
    default=None,
    metavar="URL|postgres|mysql",
    help="Where --sink sql writes: a database URL, or a server started for the run (default: the SQL server "
    "under test, else an SQLite file).",
)
@click.option(
    "--election",
    is_flag=True,
    help="Check leader election: the workers campaign, the leader writes with its term (= --algorithm election).",
)
@click.option(
    "--spawn",
    type=click.Choice(FAMILIES),
    is_flag=False,
    flag_value="redis",
    default=None,
    help="Start local servers of this family for the run and check them (plain --spawn: redis).",
)
@click.option(
    "--volatile",
    is_flag=True,
    help="With --spawn redis/redlock/postgres: commits not kept or not waited for, so a server-restart forgets "
    "locks and fences (F4 in docs/safety.md).",
)
@click.option(
    "--permits",
    type=click.IntRange(1, 64),
    default=None,
    help="With --algorithm semaphore: its capacity (default 3); requests take 1 to this many permits.",
)
@json_option("the report")
@file_option("--history", "history", "Write every operation and fault as JSON lines (for your own analysis).")
@click.pass_obj
def check(
    obj: dict[str, Any],
    check_url: str | None,
    workers: int,
    seconds: float,
    ttl: float,
    hold: float,
    faults: str,
    url_options: tuple[str, ...],
    algorithm: str,
    api: str,
    sinks: tuple[str, ...],
    writers: tuple[str, ...],
    sql_sink: str | None,
    election: bool,
    spawn: str | None,
    volatile: bool,
    permits: int | None,
    json_file: Path | None,
    history: Path | None,
) -> None:
    """Torture a lock with N processes and faults; check fencing, exclusion and liveness. Exit 1 on a violation."""
    fault_list = tuple(f.strip() for f in faults.split(",") if f.strip())
    console = Console(stderr=json_to_stdout(json_file))
    with one_line_errors(obj["debug"]), contextlib.ExitStack() as stack:
        unknown = [f for f in fault_list if f not in FAULTS]
        if unknown:  # before any server is started
            raise ConfigError(f"unknown fault {unknown[0]!r}; choose from {', '.join(FAULTS)}")
        sink_list = _names(sinks, SINKS, "--sink")
        writer_list = _names(writers, WRITERS, "--writer") if writers else WRITERS
        if election:
            if algorithm not in ("distlock", "election"):
                raise click.UsageError("--election and --algorithm exclude each other")
            algorithm = "election"
        if volatile and not spawn:
            raise click.UsageError("--volatile only applies to a server started with --spawn")
        server = stack.enter_context(spawned(spawn, fault_list, not volatile, ttl)) if spawn else None
        url = server.url if server is not None else (check_url or obj["url"] or default_url())
        if url_options:
            url = _with_options(url, url_options)
        shown = redact(url)
        cfg = CheckConfig(
            url=url,
            algorithm=algorithm,
            workers=workers,
            seconds=seconds,
            ttl=ttl,
            hold=hold,
            faults=fault_list,
            server=server,
            history=history,
            api=api,
            sinks=sink_list,
            writers=writer_list,
            sql_sink=sql_sink,
            permits=permits,
            extra={"url": shown},
        )
        console.print(
            f"[bold]distlock check[/]: {algorithm}{' (asyncio API)' if api == 'async' else ''} on {shown}, {workers} workers, {seconds:g}s, ttl {ttl:g}s, "
            f"faults: {', '.join(fault_list) or 'none'}"
        )
        with console.status("running") as status:
            report = run_check(
                cfg,
                lambda p: status.update(
                    f"running {p['elapsed']:.1f}s: {p['acquisitions']} acquisitions, {p['faults']} faults"
                ),
            )
        if report.get("faults_skipped"):
            console.print(f"[yellow]note:[/] {report['faults_skipped']}")
        if report.get("kind") == "semaphore":
            console.print(render_semaphore(report))
        else:
            console.print(render_primitive(report) if "kind" in report else render(report))
        if "sinks" in report:
            console.print(render_sinks(report))
            if report["at_risk"]:  # (no holding was lost: nothing to say)
                console.print(render_at_risk(report))
        for v in report["safety_violations"]:
            console.print(f"[bold red]safety violation:[/] {v}")
        for v in report["liveness_failures"]:
            console.print(f"[bold red]liveness failure:[/] {v}")
        if report["ok"]:
            console.print("[green]all checks passed[/]")
        write_json(json_file, report, sort_keys=True)
        if not report["ok"]:
            raise SystemExit(1)


command = check

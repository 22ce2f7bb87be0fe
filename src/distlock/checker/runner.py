"""Run one check: start the workers, let the injector break things, collect the history, analyse it.

``run_check`` is the whole check: it prepares the two shared resources and the store (one warm-up
acquisition in this process, so a bad URL fails in one line), runs ``_run`` and cleans the lock up
afterwards, bounded. ``_run`` owns the worker processes from start to kill: it starts them (each with its
own report pipe and, for gray link faults, its own proxied URL), hands them to the ``injector.Injector``
for the length of the run, waits a bounded time for them to finish, stops what is left, then writes the history
(``--history``) and assembles the report: the run's settings in front of ``history.analyse``'s verdicts
(``primitive_analysis.analyse_primitive``'s for a barrier, latch or double barrier).

Where the rest lives: the settings and their validation in ``config``, the faults and their timing in
``injector``, the report pipes and the tally of what was heard in ``collect``.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import secrets
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._errors import ConfigError, LockError
from .broken import BROKEN
from .collect import Reports, Tally
from .config import (
    ALGORITHMS,
    APIS,
    FAULTS,
    PRIMITIVE_KINDS,
    CheckConfig,
    capacity,
    gray_faults_skipped,
    lease_of,
    member_place,
    validate,
)
from .gray import GRAY_FAULTS, Links
from .history import analyse
from .injector import MAX_RESPAWNS, Injector
from .primitive_analysis import analyse_primitive
from .primitives import DOUBLE_BARRIER, PRIMITIVES, count, double_parties, parties
from .resource import FencedRegister, UnfencedSet
from .semaphore import SEMAPHORE, analyse_semaphore
from .servers import spawned
from .sinks import SinkSpec, open_sink, sql_dialect
from .worker import DISTLOCK_ALGORITHMS, Spec, run_worker


def _warm_up(cfg: CheckConfig, name: str) -> None:
    """Open the store once in this process and take the lock once: a bad URL or an unreachable server fails
    here in one line, and tables or scripts created on first use exist before eight processes race to."""
    if cfg.algorithm not in (*DISTLOCK_ALGORITHMS, *PRIMITIVE_KINDS):
        return
    from .._sync.store import connect

    with connect(cfg.url) as store:
        if cfg.algorithm == "barrier":  # one party: trips at once, and what the backend makes at first use exists
            store.barrier(f"{name}/warm-up", 1, ttl=cfg.ttl).wait(timeout=30.0)
            return
        if cfg.algorithm == "latch":
            store.latch(f"{name}/warm-up", 1, linger=1.0).count_down()
            return
        if cfg.algorithm == DOUBLE_BARRIER:  # a backend without double barriers refuses here, in one line
            gate = store.double_barrier(f"{name}/warm-up", 1, ttl=cfg.ttl, linger=1.0)
            if gate.enter(timeout=30.0):
                gate.leave(timeout=30.0)
            return
        # a backend without semaphores refuses here, in one line (UnsupportedFeature)
        lock: Any = (
            store.semaphore(name, permits=capacity(cfg), ttl=cfg.ttl)
            if cfg.algorithm == SEMAPHORE
            else store.lock(name, ttl=cfg.ttl)
        )
        if lock.acquire(timeout=30.0):
            lock.release()


def _cleanup(cfg: CheckConfig, name: str, workdir: str, sinks: SinkSpec | None = None) -> None:
    _cleanup_sinks(sinks)
    with contextlib.suppress(Exception):
        if cfg.algorithm in (*DISTLOCK_ALGORITHMS, SEMAPHORE):
            from .._sync.store import connect

            with connect(cfg.url) as store:
                store.break_lock(name)
        else:
            lock = BROKEN[cfg.algorithm][0](cfg.url or "", name, cfg.ttl, Path(workdir))
            lock.cleanup()
            lock.close()


def _sink_spec(cfg: CheckConfig, workdir: str, run: str, stack: contextlib.ExitStack) -> SinkSpec | None:
    """Where the data sinks of ``--sink`` live: the SQL server under test (else an SQLite file of the run; or
    ``--sql-sink``: a URL, or a server started for the run), the Redis under test when it is one plain server
    (else one started for the run), files in the run's directory."""
    if not cfg.sinks:
        return None
    from .._url import parse_url

    under_test = parse_url(cfg.url)
    sql_url = (cfg.url or "") if under_test.backend in ("postgres", "mysql") else f"sqlite:///{workdir}/sink.db"
    if cfg.sql_sink in ("postgres", "mysql"):
        sql_url = stack.enter_context(spawned(cfg.sql_sink)).url
    elif cfg.sql_sink is not None:
        sql_url = cfg.sql_sink
        sql_dialect(sql_url)  # a one-line ConfigError for a URL of another kind
    redis_url = None
    if "redis" in cfg.sinks:
        if under_test.scheme == "redis" and len(under_test.hosts) == 1 and not under_test.params:
            redis_url = cfg.url
        else:
            redis_url = stack.enter_context(spawned("redis")).url
    spec = SinkSpec(cfg.sinks, cfg.writers, sql_url, redis_url, workdir, run)
    for kind in cfg.sinks:
        sink = open_sink(kind, spec)
        try:
            sink.create([spec.resource(w) for w in cfg.writers])
        except Exception as err:  # one line, exit 2
            raise ConfigError(f"--sink {kind}: could not set up the resource: {type(err).__name__}: {err}") from err
        finally:
            sink.close()
    return spec


def _read_sinks(spec: SinkSpec) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """What each resource accepted, in its order (the parent reads it after the workers have stopped)."""
    logs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for kind in spec.sinks:
        sink = open_sink(kind, spec)
        try:
            logs[kind] = {w: sink.accepted(spec.resource(w)) for w in spec.writers}
        finally:
            sink.close()
    return logs


def _cleanup_sinks(spec: SinkSpec | None) -> None:
    if spec is None:
        return
    for kind in spec.sinks:
        with contextlib.suppress(Exception):
            sink = open_sink(kind, spec)
            try:
                sink.cleanup([spec.resource(w) for w in spec.writers])
            finally:
                sink.close()


def run_check(cfg: CheckConfig, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    validate(cfg)
    tag = secrets.token_hex(6)
    name = f"distlock-check/{tag}"
    with tempfile.TemporaryDirectory(prefix="distlock-check-") as workdir, contextlib.ExitStack() as stack:
        unfenced = UnfencedSet(Path(workdir) / "unfenced.txt")
        unfenced.create()
        FencedRegister(Path(workdir) / "fenced.db").create()
        sinks = _sink_spec(cfg, workdir, tag, stack)
        spec = Spec(
            cfg.url,
            cfg.algorithm,
            name,
            cfg.ttl,
            cfg.hold,
            workdir,
            api=cfg.api,
            sinks=sinks,
            workers=cfg.workers,
            permits=capacity(cfg),
        )
        if cfg.server is not None:
            cfg.server.focus = name
        _warm_up(cfg, name)
        try:
            report = _run(cfg, spec, unfenced, progress)
        finally:
            # best effort and bounded: a store that hangs must not hang the verdict
            cleaner = threading.Thread(target=_cleanup, args=(cfg, name, workdir, sinks), daemon=True)
            cleaner.start()
            cleaner.join(15.0)
    return report


def _run(
    cfg: CheckConfig, spec: Spec, unfenced: UnfencedSet, progress: Callable[[dict[str, Any]], None] | None
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    reports = Reports(ctx)
    states: Any = ctx.Array("i", cfg.workers + MAX_RESPAWNS, lock=False)
    linger: Any = ctx.Array("i", cfg.workers + MAX_RESPAWNS, lock=False)
    go = ctx.Event()
    end: Any = ctx.Value("d", 0.0, lock=False)
    procs: dict[int, Any] = {}
    skipped = gray_faults_skipped(cfg)
    gray = [f for f in cfg.faults if f in GRAY_FAULTS] if skipped is None else []
    links = Links(cfg.url or "") if gray else None
    tally = Tally()
    exited, errors = tally.exited, tally.errors

    def spawn(index: int) -> None:
        own = spec if links is None else replace(spec, url=links.url_for(index))
        writer = reports.pipe()
        p = ctx.Process(target=run_worker, args=(index, own, writer, states, go, end, linger), daemon=True)
        p.start()
        writer.close()  # the worker has its copy: when it dies, its pipe reads as closed
        procs[index] = p

    def drain(wait: float) -> None:
        for ev in reports.drain(wait):
            tally.take(ev)

    try:
        for i in range(cfg.workers):
            spawn(i)
        deadline = time.monotonic() + 60.0
        while len(tally.ready) < cfg.workers:
            drain(0.05)
            if exited:
                raise ConfigError(f"a worker could not start: {errors[0] if errors else 'it exited'}")
            if time.monotonic() > deadline:
                raise ConfigError(f"workers did not start within 60s: {errors[:1]}")
        started = time.monotonic()
        end.value = started + cfg.seconds
        go.set()
        injector = Injector(cfg, procs, states, linger, links, tally.faults, spawn, drain, progress, name=spec.name)
        injector.run(started, end.value, tally.ops)
        # let the workers finish: each stops at ``end`` (an acquire gives up there)
        give_up = time.monotonic() + 30.0 + cfg.ttl
        while len(exited) < len(procs) and time.monotonic() < give_up:
            drain(0.05)
            if all(not p.is_alive() for p in procs.values()):
                drain(0.2)
                break
        for i, p in procs.items():
            if i not in exited and p.is_alive():
                errors.append(f"worker {i}: still running 30s after the end of the run (killed)")
        run_end = end.value
    finally:
        reports.close()  # late reports are not counted; a worker sending one is not held up
        for p in procs.values():
            if p.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
        # every process gets the same bounded grace to close its store, then is killed
        stop_by = time.monotonic() + 10.0
        for p in procs.values():
            p.join(max(0.0, stop_by - time.monotonic()))
        for i, p in procs.items():
            if p.is_alive():
                if i in exited:
                    errors.append(f"worker {i}: its store did not close within 10s (killed)")
                p.kill()
                p.join(5.0)
        if links is not None:
            links.close()
    final = unfenced.read()
    if cfg.history is not None:
        tally.write_history(cfg.history, final)
    lease = lease_of(cfg)
    sink_logs = _read_sinks(spec.sinks) if spec.sinks is not None else None
    if cfg.algorithm == SEMAPHORE:
        report = analyse_semaphore(tally.ops, tally.grants, tally.lost, tally.faults, cap=capacity(cfg), lease=lease,
                                   seconds=cfg.seconds, run_end=run_end, errors=errors)  # fmt: skip
    elif cfg.algorithm in PRIMITIVES:
        size = {"barrier": parties, "latch": count, DOUBLE_BARRIER: double_parties}[cfg.algorithm](cfg.workers)
        report = analyse_primitive(cfg.algorithm, tally.ops, tally.steps, tally.faults, size=size, errors=errors,
                                   run_out=member_place(cfg))  # fmt: skip
    else:
        report = _analyse_lock(tally, final, lease, run_end, errors, sink_logs)
    report_head: dict[str, Any] = {
        "version": 1,
        "algorithm": cfg.algorithm,
        "workers": cfg.workers,
        "seconds": cfg.seconds,
        "ttl": cfg.ttl,
        "lease_s": lease,
        "hold_s": cfg.hold,
        "faults_requested": list(cfg.faults),
        "faults_skipped": skipped,
        "workers_started": len(procs),
        **({} if spec.sinks is None else {"sink_stores": _sink_stores(spec.sinks), "writers": list(cfg.writers)}),
    }
    return {**report_head, **cfg.extra, **report}


def _analyse_lock(
    tally: Tally, final: list[str], lease: float, run_end: float, errors: list[str],
    sink_logs: dict[str, dict[str, list[dict[str, Any]]]] | None,
) -> dict[str, Any]:  # fmt: skip
    return analyse(
        tally.ops,
        tally.faults,
        final,
        ttl=lease,
        run_end=run_end,
        errors=errors,
        grants=tally.grants,
        lost=tally.lost,
        sink_logs=sink_logs,
        at_risk=tally.at_risk,
    )


def _sink_stores(spec: SinkSpec) -> dict[str, str]:
    """Where each sink wrote, for the report (passwords redacted)."""
    from .._url import redact

    where = {"sql": redact(spec.sql_url), "redis": redact(spec.redis_url or ""), "file": spec.directory}
    return {k: where[k] for k in spec.sinks}


# the command line imports these from here; LockError is re-exported as before
__all__ = ["ALGORITHMS", "APIS", "FAULTS", "CheckConfig", "LockError", "run_check"]

"""Run one check: start the workers, inject faults, collect the history, analyse it.

Faults are injected one at a time, each bounded in time, and only while enough of the run is left to judge
its outcome:

* ``kill``  -- SIGKILL of a worker that is holding the lock (a crash), then a fresh worker is started in its
  place. Measures how long the lock stays unavailable (liveness).
* ``pause`` -- SIGSTOP of a worker while it sleeps inside its critical section, for ``2 * ttl + 0.3 s`` (past
  its lease), then SIGCONT. The resumed worker finishes its writes blindly: the fenced register must reject
  them and the lock must tell the worker it lost the lock.
* ``server-restart`` -- (``--spawn`` only) kill -9 of every server of the spawned deployment, and a restart on
  the same ports and data.
* ``leader-kill`` -- (``--spawn etcd|zookeeper``) kill -9 of the cluster's current leader, restarted after a lease.
* ``partition`` -- (``--spawn etcd|zookeeper``, root) the member listed first in the URL is cut off from its
  peers and the clients (its network namespace's link goes down) for a lease, then healed.
* ``clock-skew`` -- (``--spawn postgres|mysql``) F2 in docs/safety.md: a holder is paused in its critical section for half
  its lease (which a correct clock lets it survive), and meanwhile the database server's wall clock jumps
  forward by ``2 * ttl + 1 s`` (libfaketime): its lease expires early, another worker takes the lock, and the
  resumed holder's writes must be rejected by the fenced register.
* ``freeze``, ``half-open``, ``slow`` -- gray link faults (:mod:`.gray`): every worker reaches the servers
  through loopback proxies of its own; a holder is made to stay in its critical section (it *lingers* until
  ``lost`` fires), then its proxies stop forwarding silently (``freeze``), drop the connections open now
  (``half-open``: it must reconnect), or forward every chunk ``lease / 3`` late each way (``slow``), for
  ``1.25 * lease + 0.3 s``. The told-late figure (:func:`.history.told_late`) judges what the holder was told.

A fault "lands" when the target was still inside its critical section when the signal arrived (checked from
the state it publishes in shared memory); faults that miss are retried and not counted.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import multiprocessing.connection as mp_conn
import os
import secrets
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._errors import ConfigError, LockError
from .broken import BROKEN
from .gray import GRAY_FAULTS, Links, link_hosts
from .history import analyse, liveness_allowance
from .resource import FencedRegister, UnfencedSet
from .servers import SERVER_FAULTS, Spawned
from .worker import DISTLOCK_ALGORITHMS, DONE, HOLD_SLEEP, HOLDING, LINGER, Spec, run_worker

FAULTS = ("kill", "pause", "server-restart", "leader-kill", "partition", "clock-skew", *GRAY_FAULTS)
ALGORITHMS = (*DISTLOCK_ALGORITHMS, *BROKEN)
MAX_RESPAWNS = 200


@dataclass
class CheckConfig:
    url: str | None
    algorithm: str = "distlock"
    workers: int = 8
    seconds: float = 10.0
    ttl: float = 2.0
    hold: float = 0.02
    faults: tuple[str, ...] = ()
    server: Spawned | None = None  # the deployment --spawn started (server faults need one)
    history: Path | None = None  # write every operation and fault as JSON lines here
    extra: dict[str, Any] = field(default_factory=dict)


def validate(cfg: CheckConfig) -> None:
    if cfg.algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown --algorithm {cfg.algorithm!r}; choose from {', '.join(ALGORITHMS)}")
    for f in cfg.faults:
        if f not in FAULTS:
            raise ConfigError(f"unknown fault {f!r}; choose from {', '.join(FAULTS)}")
    for f in cfg.faults:
        if f not in SERVER_FAULTS:
            continue
        if cfg.server is None:
            raise ConfigError(f"the {f} fault needs --spawn (the checker only breaks servers it started)")
        if cfg.server.family not in SERVER_FAULTS[f]:
            raise ConfigError(f"the {f} fault needs --spawn {' or '.join(SERVER_FAULTS[f])}")
    url = cfg.url or ""
    if cfg.algorithm in BROKEN and BROKEN[cfg.algorithm][1] and not url.startswith(("redis://", "rediss://")):
        raise ConfigError(f"--algorithm {cfg.algorithm} needs a redis:// URL (or --spawn)")
    if cfg.algorithm in DISTLOCK_ALGORITHMS and url.startswith("memory:"):
        raise ConfigError("memory:// is in-process only; the check runs several processes (use sqlite:// or a server)")
    gray = [f for f in cfg.faults if f in GRAY_FAULTS]
    if gray and gray_faults_skipped(cfg) is None:
        if cfg.algorithm == "lockfile":
            raise ConfigError(f"{', '.join(gray)}: the lockfile baseline has no network link to break")
        link_hosts(cfg.url)  # a one-line ConfigError: this store has no link to break


def gray_faults_skipped(cfg: CheckConfig) -> str | None:
    """Why the gray link faults asked for are skipped on this store (None: they run, or none were asked).

    A store without a network link (sqlite, a lock file) has nothing to freeze. Asked alone, the faults are
    refused (``validate`` raises); listed among others (the same ``--faults`` for every backend), they are
    skipped and the run says so."""
    gray = [f for f in cfg.faults if f in GRAY_FAULTS]
    if not gray or all(f in GRAY_FAULTS for f in cfg.faults):
        return None
    no_link = cfg.algorithm == "lockfile"
    if not no_link:
        try:
            link_hosts(cfg.url)
        except ConfigError:
            no_link = True
    if not no_link:
        return None
    return f"{', '.join(gray)} skipped: this store has no network link to break"


def gray_timing(lease: float) -> tuple[float, float, float]:
    """(how long a gray fault lasts, how long its target may linger after it, the ``slow`` delay each way)."""
    return 1.25 * lease + 0.3, 0.5 * lease, lease / 3


def effective_lease(url: str | None, ttl: float) -> float:
    """How long a dead or paused holder keeps the lock: the TTL, or ZooKeeper's session timeout (which is what
    frees a ZooKeeper lock; the lock's ``ttl`` does not apply there)."""
    from .._url import parse_url

    config = parse_url(url)
    if config.backend == "zookeeper":
        try:
            return max(ttl, float(config.params.get("session_timeout", "10")))
        except ValueError:
            return ttl
    return ttl


def _warm_up(cfg: CheckConfig, name: str) -> None:
    """Open the store once in this process and take the lock once: a bad URL or an unreachable server fails
    here in one line, and tables or scripts created on first use exist before eight processes race to."""
    if cfg.algorithm not in DISTLOCK_ALGORITHMS:
        return
    from .._sync.store import connect

    with connect(cfg.url) as store:
        lock = store.lock(name, ttl=cfg.ttl)
        if lock.acquire(timeout=30.0):
            lock.release()


def _cleanup(cfg: CheckConfig, name: str, workdir: str) -> None:
    with contextlib.suppress(Exception):
        if cfg.algorithm in DISTLOCK_ALGORITHMS:
            from .._sync.store import connect

            with connect(cfg.url) as store:
                store.break_lock(name)
        else:
            lock = BROKEN[cfg.algorithm][0](cfg.url or "", name, cfg.ttl, Path(workdir))
            lock.cleanup()
            lock.close()


def run_check(cfg: CheckConfig, progress: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    validate(cfg)
    name = f"distlock-check/{secrets.token_hex(6)}"
    with tempfile.TemporaryDirectory(prefix="distlock-check-") as workdir:
        unfenced = UnfencedSet(Path(workdir) / "unfenced.txt")
        unfenced.create()
        FencedRegister(Path(workdir) / "fenced.db").create()
        spec = Spec(cfg.url, cfg.algorithm, name, cfg.ttl, cfg.hold, workdir)
        _warm_up(cfg, name)
        try:
            report = _run(cfg, spec, unfenced, progress)
        finally:
            # best effort and bounded: a store that hangs must not hang the verdict
            cleaner = threading.Thread(target=_cleanup, args=(cfg, name, workdir), daemon=True)
            cleaner.start()
            cleaner.join(15.0)
    return report


class Reports:
    """The parent's ends of the workers' report pipes, one pipe per worker: a worker killed mid-send breaks
    only its own (a shared ``multiprocessing.Queue`` would stall every worker; see checker/worker.py)."""

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._readers: list[Any] = []

    def pipe(self) -> Any:
        """A new pipe; returns the end to hand to the worker (close it here once the worker has started)."""
        reader, writer = self._ctx.Pipe(duplex=False)
        self._readers.append(reader)
        return writer

    def drain(self, wait: float) -> list[dict[str, Any]]:
        """Every report that has arrived, after waiting up to ``wait`` for the first."""
        if not self._readers:
            time.sleep(wait)
            return []
        got: list[dict[str, Any]] = []
        ready: list[Any] = mp_conn.wait(list(self._readers), timeout=wait)
        for reader in ready:
            try:
                for _ in range(100):  # a bound, so one chatty worker cannot keep the parent here
                    got.append(reader.recv())
                    if not reader.poll():
                        break
            except (EOFError, OSError):  # every copy of the worker's end is closed: it has exited or died
                reader.close()
                self._readers.remove(reader)
        return got

    def close(self) -> None:
        for reader in self._readers:
            reader.close()
        self._readers.clear()


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

    def spawn(index: int) -> None:
        own = spec if links is None else replace(spec, url=links.url_for(index))
        writer = reports.pipe()
        p = ctx.Process(target=run_worker, args=(index, own, writer, states, go, end, linger), daemon=True)
        p.start()
        writer.close()  # the worker has its copy: when it dies, its pipe reads as closed
        procs[index] = p

    ops: list[dict[str, Any]] = []
    grants: list[dict[str, Any]] = []
    lost: dict[str, float] = {}
    errors: list[str] = []
    faults: list[dict[str, Any]] = []
    exited: set[int] = set()

    def take(ev: dict[str, Any]) -> None:
        kind = ev["kind"]
        if kind == "op":
            ops.append(ev)
        elif kind == "grant":
            grants.append(ev)
        elif kind == "lost":
            lost.setdefault(ev["op"], ev["t"])
        elif kind == "error":
            errors.append(f"worker {ev['worker']}: {ev['error']}")
        elif kind == "exit":
            exited.add(ev["worker"])
        elif kind == "ready":
            ready.add(ev["worker"])

    def drain(wait: float) -> None:
        for ev in reports.drain(wait):
            take(ev)

    ready: set[int] = set()
    try:
        for i in range(cfg.workers):
            spawn(i)
        deadline = time.monotonic() + 60.0
        while len(ready) < cfg.workers:
            drain(0.05)
            if exited:
                raise ConfigError(f"a worker could not start: {errors[0] if errors else 'it exited'}")
            if time.monotonic() > deadline:
                raise ConfigError(f"workers did not start within 60s: {errors[:1]}")
        started = time.monotonic()
        end.value = started + cfg.seconds
        go.set()
        injector = _Injector(cfg, procs, states, linger, links, faults, spawn, drain, progress)
        injector.run(started, end.value, ops)
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
        lost_recs = [{"kind": "lost", "op": k, "t": t} for k, t in lost.items()]
        with cfg.history.open("w") as fh:
            recs = [*ops, *grants, *lost_recs, *({**f, "kind": f"fault-{f['kind']}"} for f in faults)]
            for rec in sorted(recs, key=_when):
                fh.write(json.dumps(rec, sort_keys=True) + "\n")
            fh.write(json.dumps({"kind": "final-unfenced", "items": final}) + "\n")
    lease = _lease(cfg)
    report = analyse(ops, faults, final, ttl=lease, run_end=run_end, errors=errors, grants=grants, lost=lost)
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
    }
    return {**report_head, **cfg.extra, **report}


def _when(rec: dict[str, Any]) -> float:
    return float(rec.get("t_acq", rec.get("t", 0.0)))


def _lease(cfg: CheckConfig) -> float:
    return effective_lease(cfg.url, cfg.ttl) if cfg.algorithm in DISTLOCK_ALGORITHMS else cfg.ttl


Step = tuple[float, Callable[[], None]]


class _Injector:
    """Injects the faults, one at a time: each is started, then ended by its pending steps (SIGCONT, a
    restart, a heal), and the next one starts only once every step of the current one has run."""

    def __init__(
        self,
        cfg: CheckConfig,
        procs: dict[int, Any],
        states: Any,
        linger: Any,
        links: Links | None,
        faults: list[dict[str, Any]],
        spawn: Callable[[int], None],
        drain: Callable[[float], None],
        progress: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        self.cfg, self.procs, self.states, self.linger, self.links = cfg, procs, states, linger, links
        self.faults, self.spawn, self.drain, self.progress = faults, spawn, drain, progress
        self.lease = _lease(cfg)
        self.pending: list[Step] = []

    def run(self, started: float, end: float, ops: list[dict[str, Any]]) -> None:
        cfg, lease = self.cfg, self.lease
        kinds = [k for k in cfg.faults if k not in GRAY_FAULTS or self.links is not None]
        turn = 0
        pause_for = 2.0 * lease + 0.3
        down_for = lease  # a killed leader stays down, a partition lasts, this long
        gray_for, gray_linger, _ = gray_timing(lease)
        # leave room after each fault to judge its outcome
        room = {
            "kill": liveness_allowance(lease) + 0.5,
            "pause": pause_for + 0.5,
            "server-restart": lease + 1.0,
            "leader-kill": down_for + lease + 1.0,
            "partition": down_for + lease + 1.0,
            "clock-skew": lease / 2 + 1.0,  # the resumed holder writes at once
            **{k: gray_for + gray_linger + lease + 0.5 for k in GRAY_FAULTS},
        }
        next_at = started + min(0.3, cfg.seconds / 10)
        last_progress = 0.0
        try:
            while True:
                now = time.monotonic()
                if now >= end and not self.pending:
                    return
                self.drain(0.002)
                now = time.monotonic()
                if self.progress is not None and now - last_progress > 0.25:
                    last_progress = now
                    self.progress({"elapsed": now - started, "acquisitions": len(ops), "faults": len(self.faults)})
                if self.pending:
                    if now >= self.pending[0][0]:
                        self.pending.pop(0)[1]()
                        if not self.pending:
                            next_at = time.monotonic() + 0.3
                    continue
                if not kinds or now < next_at:
                    continue
                kind = kinds[turn % len(kinds)]
                if now + room[kind] > end:
                    continue
                result = self.inject(kind)
                if result is not None:
                    turn += 1
                    if result > 0:
                        next_at = time.monotonic() + result
        finally:
            for _, step in self.pending:  # a run cut short still heals, resumes and restarts what it broke
                with contextlib.suppress(Exception):
                    step()
            self.pending = []

    def inject(self, kind: str) -> float | None:
        """Start one fault; None if it could not land now (retried), else the pause before the next one."""
        cfg, lease, procs, states, server = self.cfg, self.lease, self.procs, self.states, self.cfg.server
        if kind in ("server-restart", "leader-kill", "partition"):
            assert server is not None
            t = time.monotonic()
            if kind == "server-restart":
                server.restart()
                self.faults.append({"kind": kind, "t": t, "worker": -1, "landed": True})
                return time.monotonic() - t + lease + 0.5
            undo = server.kill_leader() if kind == "leader-kill" else server.partition()
            self.pending = [(t + lease, undo)]
            self.faults.append({"kind": kind, "t": t, "worker": -1, "landed": True})
            return 0.0
        if kind in GRAY_FAULTS:
            return self.inject_gray(kind)
        wanted = (HOLDING, HOLD_SLEEP) if kind == "kill" else (HOLD_SLEEP,)
        target = next((i for i, p in procs.items() if states[i] in wanted and p.is_alive()), None)
        if target is None:
            return None
        proc = procs[target]
        if kind == "kill":
            if len(procs) >= cfg.workers + MAX_RESPAWNS:
                return None
            t = time.monotonic()
            proc.kill()
            proc.join(10)
            landed = states[target] in wanted  # a dead process cannot change its state any more
            states[target] = DONE
            self.faults.append({"kind": "kill", "t": t, "worker": target, "landed": landed})
            if self.links is not None:
                self.links.retire(target)
            self.spawn(max(procs) + 1)
            return lease + 0.5 if landed else None
        t = time.monotonic()
        os.kill(proc.pid, signal.SIGSTOP)
        if states[target] != HOLD_SLEEP:
            os.kill(proc.pid, signal.SIGCONT)  # missed the critical section; try again
            return None
        if kind == "pause":
            pause_for = 2.0 * lease + 0.3
            self.faults.append({"kind": kind, "t": t, "worker": target, "landed": True, "seconds": pause_for})
            self.pending = [(t + pause_for, self.resume(target))]
        else:  # clock-skew: a pause the lease survives, and the server's clock jumps past the lease meanwhile
            assert server is not None
            skew_pause, skew_jump = lease / 2, 2.0 * cfg.ttl + 1.0
            server.skew_clock(skew_jump)
            self.faults.append(
                {"kind": kind, "t": t, "worker": target, "landed": True, "seconds": skew_pause, "jump_s": skew_jump}
            )
            self.pending = [(t + skew_pause, self.resume(target))]
        return 0.0

    def resume(self, index: int) -> Callable[[], None]:
        def cont() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.procs[index].pid, signal.SIGCONT)

        return cont

    def inject_gray(self, kind: str) -> float | None:
        """A holder stays in its critical section (it lingers until ``lost`` fires), then its links break."""
        assert self.links is not None
        states, linger = self.states, self.linger
        target = next(
            (
                i
                for i, p in self.procs.items()
                if states[i] == HOLD_SLEEP and p.is_alive() and i in self.links.by_worker
            ),
            None,
        )
        if target is None:
            return None
        linger[target] = 1
        # it sees the flag when its sleep in the critical section ends (at most --hold from now)
        give_up = time.monotonic() + self.cfg.hold + 0.5
        while states[target] != LINGER and time.monotonic() < give_up:
            time.sleep(0.001)
        if states[target] != LINGER:
            linger[target] = 0  # it left the critical section first; try again
            return None
        links = self.links[target]
        gray_for, gray_linger, slow_by = gray_timing(self.lease)
        t = time.monotonic()
        record: dict[str, Any] = {"kind": kind, "t": t, "worker": target, "landed": True, "seconds": gray_for}
        if kind == "freeze":
            links.freeze()
        elif kind == "half-open":
            record["connections"] = links.half_open()
            record["landed"] = record["connections"] > 0
        else:
            links.slow(slow_by)
            record["delay_s"] = slow_by
        self.faults.append(record)

        def stop_lingering() -> None:
            linger[target] = 0

        self.pending = [(t + gray_for, links.heal), (t + gray_for + gray_linger, stop_lingering)]
        return 0.0


__all__ = ["ALGORITHMS", "FAULTS", "CheckConfig", "LockError", "run_check"]

"""``distlock check``: correct backends pass under kill -9 and SIGSTOP faults; every broken baseline is caught.

The runs are real (worker processes, real signals, a real redis-server) and short: a few seconds each with four
workers and a 1 s TTL. The pure analysis is unit-tested at the end on hand-made histories.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from distlock.checker.collect import Reports
from distlock.checker.config import effective_lease
from distlock.checker.history import analyse, fence_violations, overlaps
from distlock.checker.worker import Events
from tests.backends import SEAM_ROWS
from tools.servers import etcd, mysql, postgres, zookeeper
from tools.servers.proc import faketime_lib, netns_usable
from tools.servers.redis import redis_binary

ROOT = Path(__file__).resolve().parent.parent
HAVE_REDIS_BACKEND = (ROOT / "src/distlock/_backends/redis").is_dir()  # the backend's folder
needs_redis_server = pytest.mark.skipif(redis_binary() is None, reason="redis-server is not installed")


def check(tmp_path: Path, *args: str, url: str | None = None) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "report.json"
    pre = ["--url", url] if url else []
    r = subprocess.run(
        [sys.executable, "-m", "distlock", *pre, "check", "--workers", "4", "--ttl", "1", "--json", str(out), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    report = json.loads(out.read_text()) if out.exists() else {}
    return r.returncode, report, r.stdout + r.stderr


def assert_correct_under_faults(code: int, report: dict[str, Any], output: str) -> None:
    assert code == 0, output
    assert report["ok"] is True
    assert report["faults"]["kill"]["landed"] >= 1 and report["faults"]["pause"]["landed"] >= 1, report["faults"]
    assert report["fenced"]["stale_accepted"] == 0
    assert report["fence_violations"] == 0
    assert report["overlaps"]["silent"] == 0
    # the paused holder resumed and wrote: the fenced register turned it away, and the lock told it
    assert report["fenced"]["stale_rejected"] >= 1
    assert report["told_lost"] >= 1
    assert report["liveness"]["max_unavailable_after_kill_s"] <= report["liveness"]["allowed_s"]
    assert report["acquisitions"] > 20


def test_backend_passes_under_kill_and_pause(backend: str, backend_url: str, tmp_path: Path) -> None:
    """Every backend with a conformance plugin (servers shared with the conformance suite)."""
    if backend == "memory":
        pytest.skip("memory:// is in-process only")
    lease = effective_lease(backend_url, 1.0)  # ZooKeeper: the session timeout of its plugin's URL
    seconds = max(7.0, 3 * lease + 3)  # room for one kill and one pause, each judged before the end
    code, report, output = check(tmp_path, "--seconds", str(seconds), "--faults", "kill,pause", url=backend_url)
    assert_correct_under_faults(code, report, output)
    assert report["algorithm"] == "distlock" and report["lease_s"] == lease


@pytest.mark.parametrize("api", ["sync", "async"])
def test_backend_passes_when_holders_fork(backend: str, backend_url: str, tmp_path: Path, api: str) -> None:
    """``--faults fork``: holders fork children that leave the parent's holding, lock through the store they
    inherited and try the held lock, while the parent holds it and renews; every backend, both APIs. A child
    that used the parent's connections or session, released its lock or was granted it would show in the
    figures (a silent overlap, a stale write) or as an error."""
    if backend == "memory":
        pytest.skip("memory:// is in-process only")
    if api == "async" and (backend not in SEAM_ROWS or backend == "zookeeper"):
        # ZooKeeper: both APIs go through kazoo's own threads, the seam the sync run forks through
        pytest.skip("the asyncio API forks through the same seams on the rows of tests/backends.py SEAM_ROWS")
    lease = effective_lease(backend_url, 1.0)
    seconds = max(7.0, 2 * lease + 6)  # room for at least one fork, judged before the end
    args = ("--seconds", str(seconds), "--faults", "fork", "--api", api)
    code, report, output = check(tmp_path, *args, url=backend_url)
    assert code == 0, output
    assert report["ok"] is True, report["safety_violations"]
    assert report["faults"]["fork"]["landed"] >= 1, report["faults"]
    assert report["errors"] == 0, report["error_samples"]
    assert report["overlaps"]["silent"] == 0 and report["fenced"]["stale_accepted"] == 0
    assert report["acquisitions"] > 10


@needs_redis_server
@pytest.mark.skipif(not HAVE_REDIS_BACKEND, reason="the redis backend has not landed yet")
def test_redis_passes_a_server_restart_with_spawn(tmp_path: Path) -> None:
    code, report, output = check(tmp_path, "--seconds", "4", "--spawn", "--faults", "server-restart")
    assert code == 0, output
    assert report["faults"]["server-restart"]["landed"] >= 1
    assert report["fence_violations"] == 0 and report["fenced"]["stale_accepted"] == 0


@needs_redis_server
@pytest.mark.skipif(not HAVE_REDIS_BACKEND, reason="the redis backend has not landed yet")
def test_restart_of_a_redis_without_persistence_keeps_locking_with_higher_fences(tmp_path: Path) -> None:
    # F4 in docs/safety.md: the restarted server forgot the fence counter; counting again from 1 would hand out
    # fences below earlier ones, and refusing (as an earlier version did: DISTLOCK-FENCE-LOST, counted as worker
    # errors) stopped locking until the workers restarted. The counter starts again from the server clock: the
    # workers go on, and no fence goes back.
    code, report, output = check(tmp_path, "--seconds", "4", "--spawn", "--volatile", "--faults", "server-restart")
    assert code == 0, output
    assert report["url"].startswith("redis://127.0.0.1:")  # the server --spawn started
    assert report["faults"]["server-restart"]["landed"] >= 1
    assert report["fence_violations"] == 0 and report["fenced"]["stale_accepted"] == 0
    assert not [e for e in report["error_samples"] if "FENCE" in str(e)], report["error_samples"]


# -- servers the checker starts itself (--spawn FAMILY) and the server faults ----------------------------------
def assert_safe(code: int, report: dict[str, Any], output: str, *faults: str, least: int = 10) -> None:
    """The run is correct, it made progress (at least ``least`` acquisitions; the checker's own liveness
    judgement is part of ``ok``), and every fault asked for landed."""
    assert code == 0, output
    summary = {
        k: report.get(k) for k in ("ok", "acquisitions", "errors", "error_samples", "faults", "liveness_failures")
    }
    assert report["ok"] is True and report["acquisitions"] >= least, summary
    for fault in faults:
        assert report["faults"][fault]["landed"] >= 1, report["faults"]
    assert report["fenced"]["stale_accepted"] == 0
    assert report["fence_violations"] == 0 and report["overlaps"]["silent"] == 0


@needs_redis_server
@pytest.mark.parametrize("family", ["redis-sentinel", "redis-cluster"])
def test_redis_failover_keeps_fences_up_and_holders_told(tmp_path: Path, family: str) -> None:
    """The ``failover`` fault: kill -9 of the master serving the lock, its replica promoted, the old master back as
    a replica a lease later (Sentinel, and Redis Cluster). The store asks ``wait_replicas=1``; judged by the same
    figures: no fence goes down across the promotion (the new master's counter may be behind: before fences
    followed the server clock they went back here), no silent overlap, no holder told late, nothing stale
    written; and locking goes on after the fault."""
    code, report, output = check(tmp_path, "--seconds", "12", "--spawn", family, "--faults", "failover")
    assert_safe(code, report, output, "failover")
    assert "wait_replicas=1" in report["url"]


@needs_redis_server
def test_spawned_redlock_survives_a_crash_of_all_five_masters(tmp_path: Path) -> None:
    code, report, output = check(tmp_path, "--seconds", "4", "--spawn", "redlock", "--faults", "server-restart")
    assert report["url"].startswith("redlock://127.0.0.1:") and report["url"].count(",") == 4
    assert_safe(code, report, output, "server-restart")


@pytest.mark.skipif(etcd.etcd_binary() is None, reason="etcd is not installed")
def test_spawned_etcd_cluster_under_restart_leader_kill_and_partition(tmp_path: Path) -> None:
    # the restart of all three members last: its length (seconds under load) is not known in advance
    faults = "leader-kill," + ("partition," if netns_usable() else "") + "server-restart"
    code, report, output = check(tmp_path, "--seconds", "8.5", "--spawn", "etcd", "--faults", faults)
    assert report["url"].count(",") == 2  # three members
    assert_safe(code, report, output, *faults.split(","))


@pytest.mark.skipif(not zookeeper.available(), reason="ZooKeeper is not installed")
def test_spawned_zookeeper_ensemble_under_leader_kill_and_partition(tmp_path: Path) -> None:
    partition = netns_usable()
    faults = ("partition," if partition else "") + "leader-kill"  # a killed JVM takes seconds to come back
    code, report, output = check(tmp_path, "--seconds", "9" if partition else "6", "--spawn", "zookeeper",
                                 "--faults", faults)  # fmt: skip
    assert report["url"].count(",") == 2 and "session_timeout=2" in report["url"]
    assert report["lease_s"] == 2.0  # the session timeout the checker gave the spawned ensemble
    # a partition and a leader kill each leave the ensemble without a quorum for seconds (a JVM restarts, a
    # leader is elected, sessions move): on a loaded machine a 9 s run makes under ten acquisitions
    assert_safe(code, report, output, *faults.split(","), least=4)


@pytest.mark.skipif(postgres.pg_bindir() is None or faketime_lib() is None, reason="postgres or libfaketime missing")
def test_database_clock_jump_expires_leases_early_and_fencing_rejects_the_stale_writes(tmp_path: Path) -> None:
    """F2 in docs/safety.md on PostgreSQL: lease expiry uses the database's clock. A holder paused for half its lease would
    keep the lock; with the server's clock jumping forward meanwhile, its lease ends early and another worker
    takes the lock. The resumed holder's writes are rejected by the fenced register; none is accepted.
    (TTL 3 s: the pause is 1.5 s, longer than the 1 s a lease-mode waiter sleeps at most between looks.)"""
    code, report, output = check(
        tmp_path, "--seconds", "7", "--ttl", "3", "--spawn", "postgres", "--faults", "clock-skew,server-restart"
    )
    assert_safe(code, report, output, "clock-skew", "server-restart")
    assert report["fenced"]["stale_rejected"] >= 1  # the early expiry happened, and fencing caught it
    assert report["told_lost"] >= 1


@pytest.mark.skipif(mysql.mariadb_binary() is None or faketime_lib() is None, reason="mariadb or libfaketime missing")
def test_spawned_mariadb_under_clock_skew(tmp_path: Path) -> None:
    code, report, output = check(tmp_path, "--seconds", "6", "--ttl", "3", "--spawn", "mysql", "--faults", "clock-skew")
    assert_safe(code, report, output, "clock-skew")
    assert report["fenced"]["stale_rejected"] >= 1


@pytest.mark.parametrize(
    ("algorithm", "fault"),
    [("setnx-expire", "pause"), ("getset", "pause"), ("del-no-owner", "pause"), ("no-ttl", "kill")],
)
@needs_redis_server  # the redis server of the conformance table (tests/backends.py: fixture ``redis_url``)
def test_broken_redis_baselines_are_caught(tmp_path: Path, redis_url: str, algorithm: str, fault: str) -> None:
    seconds = "5" if fault == "kill" else "4"  # after a kill, 2 * ttl + 1 s must be left to see nobody got in
    code, report, output = check(
        tmp_path, "--seconds", seconds, "--algorithm", algorithm, "--faults", fault, url=redis_url
    )
    assert code == 1, output
    assert report["ok"] is False
    assert report["faults"][fault]["landed"] >= 1
    if fault == "pause":
        # the paused holder resumed beside its successor and nobody told it
        assert report["overlaps"]["silent"] >= 1 and report["safety_violations"], report
        # ...yet its fences came from INCR, so the fenced register still kept the data right
        assert report["fenced"]["stale_accepted"] == 0
    else:
        assert report["liveness_failures"] and not report["safety_violations"], report
        assert report["liveness"]["max_unavailable_after_kill_s"] > report["liveness"]["allowed_s"]


def test_broken_lockfile_baseline_is_caught_without_a_server(tmp_path: Path) -> None:
    code, report, output = check(tmp_path, "--seconds", "4", "--algorithm", "lockfile", "--faults", "pause")
    assert code == 1, output
    assert report["overlaps"]["silent"] >= 1
    assert "silent overlap" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--algorithm", "getset"], "needs a redis:// URL"),
        (["--faults", "meteor"], "unknown fault"),
        (["--faults", "server-restart"], "needs --spawn"),
        (["--spawn", "redis", "--faults", "clock-skew"], "needs --spawn postgres or mysql"),
        (["--spawn", "redlock", "--faults", "leader-kill"], "needs --spawn zookeeper or etcd"),
        (["--spawn", "etcd", "--volatile"], "--volatile applies to"),
        (["--spawn", "nosuch"], "'nosuch' is not one of"),
        (["--api", "async", "--algorithm", "lockfile"], "has no asyncio API"),
        (["--algorithm", "lockfile", "--faults", "fork"], "the lockfile baseline has none"),
        (["--algorithm", "latch", "--api", "async"], "drives the threaded API only"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    code, _, output = check(tmp_path, "--seconds", "1", *args, url=f"sqlite:///{tmp_path}/l.db")
    assert code == 2 and message in output, output


def test_effective_lease_is_the_zookeeper_session_timeout() -> None:
    assert effective_lease("sqlite:///x.db", 1.5) == 1.5
    assert effective_lease("zookeeper://127.0.0.1:2181?session_timeout=4", 1.0) == 4.0
    assert effective_lease("zookeeper://127.0.0.1:2181", 1.0) == 10.0  # the backend's default session timeout
    assert effective_lease("zookeeper://127.0.0.1:2181", 30.0) == 30.0


def test_memory_url_is_refused(tmp_path: Path) -> None:
    code, _, output = check(tmp_path, "--seconds", "1", url="memory://")
    assert code == 2 and "in-process only" in output


# -- the analysis on hand-made histories --------------------------------------------------------------------
def op(
    i: int, t_start: float, t_acq: float, t_rel: float, fence: int | None, told: bool = False, **kw: Any
) -> dict[str, Any]:
    return {"op": f"w.{i}", "worker": i, "fence": fence, "t_start": t_start, "t_acq": t_acq, "t_rel": t_rel,
            "told": told, "fenced": kw.get("fenced", "accepted")}  # fmt: skip


def test_overlaps_are_silent_only_when_nobody_was_told() -> None:
    handover = [op(0, 0, 1, 2, 1), op(1, 0.5, 2.01, 3, 2)]
    assert overlaps(handover) == (0, 0)
    paused_and_told = [op(0, 0, 1, 5, 1, told=True), op(1, 0.5, 2, 3, 2)]
    assert overlaps(paused_and_told) == (1, 0)
    nobody_told = [op(0, 0, 1, 5, 1), op(1, 0.5, 2, 3, 2), op(2, 0.5, 3.5, 4, 3)]
    assert overlaps(nobody_told) == (2, 2)


def test_fence_violations_find_reuse_and_regressions() -> None:
    assert fence_violations([op(0, 0, 1, 2, 5), op(1, 1.5, 2.5, 3, 6)]) == 0
    assert fence_violations([op(0, 0, 1, 2, 5), op(1, 1.5, 2.5, 3, 4)]) == 1  # went backwards
    assert fence_violations([op(0, 0, 1, 2, 5), op(1, 0.5, 2.5, 3, 5)]) == 2  # handed out twice
    # concurrent waiters may be granted in either order: started before the other was granted
    assert fence_violations([op(0, 0, 1, 2, 6), op(1, 0.5, 2.5, 3, 5)]) == 0


def test_analyse_verdicts_and_liveness() -> None:
    ops = [op(0, 0, 1, 2, 1), op(1, 0, 2.5, 3, 2, fenced="stale-accepted")]
    faults = [{"kind": "kill", "t": 3.5, "worker": 7, "landed": True}]
    report = analyse(ops, faults, ["w.0"], ttl=1.0, run_end=10.0)
    assert report["unfenced"]["lost_updates"] == 1
    assert report["fenced"]["stale_accepted"] == 1
    assert any("stale fenced" in v for v in report["safety_violations"])
    assert report["liveness"]["max_unavailable_after_kill_s"] == 6.5
    assert report["liveness_failures"] and report["ok"] is False
    clean = analyse([op(0, 0, 1, 2, 1)], [], ["w.0"], ttl=1.0, run_end=3.0)
    assert clean["ok"] is True and clean["unfenced"]["lost_updates"] == 0
    assert analyse([], [], [], ttl=1.0, run_end=1.0)["ok"] is False
    # a holder's forked child that could not lock through the store it inherited fails the run (liveness)
    forked = analyse([op(0, 0, 1, 2, 1)], [], ["w.0"], ttl=1.0, run_end=3.0, errors=["worker 0: forked child exited with 1"])
    assert forked["liveness_failures"] and forked["ok"] is False


def _report_forever(index: int, conn: Any) -> None:
    """A worker that does nothing but report (spawn target of the test below)."""
    events = Events(conn)
    n = 0
    while True:
        events.put({"kind": "op", "worker": index, "n": n})
        n += 1


def test_a_worker_paused_or_killed_mid_report_holds_up_no_other_worker() -> None:
    """The parent hears the others while one worker is stopped and one is killed in the middle of reporting
    (workers once shared one multiprocessing.Queue, whose lock a killed worker could take with it: every other
    worker then hung, unable to report or exit)."""
    ctx = mp.get_context("spawn")
    reports = Reports(ctx)
    procs = []
    for i in range(3):
        writer = reports.pipe()
        p = ctx.Process(target=_report_forever, args=(i, writer), daemon=True)
        p.start()
        writer.close()
        procs.append(p)
    try:
        last: dict[int, int] = {}

        def listen(seconds: float) -> None:
            stop = time.monotonic() + seconds
            while time.monotonic() < stop:
                for ev in reports.drain(0.05):
                    last[ev["worker"]] = ev["n"]

        deadline = time.monotonic() + 60
        while len(last) < 3 and time.monotonic() < deadline:
            listen(0.1)
        assert set(last) == {0, 1, 2}
        os.kill(procs[1].pid, signal.SIGSTOP)
        for _ in range(20):  # kill lands at a random point of a report (or between two)
            listen(0.01)
        os.kill(procs[0].pid, signal.SIGKILL)
        procs[0].join(10)
        before = last[2]
        listen(0.5)
        assert last[2] > before + 10, "the live worker's reports stopped arriving"
        os.kill(procs[1].pid, signal.SIGCONT)
        paused_at = last[1]
        listen(0.5)
        assert last[1] > paused_at, "the resumed worker's reports did not arrive"
    finally:
        for p in procs:
            p.kill()
            p.join(10)
        reports.close()

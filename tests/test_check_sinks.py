"""``distlock check --sink``: the holders write real data (SQL, a Redis key, a file) and the checker counts the
stale writes each resource accepted, per writer: ``unfenced`` (must be caught), ``fenced`` and ``scoped``
(must be 0); and whether ``at_risk`` came before ``lost``.

The runs are real (worker processes, SIGSTOP past the lease, the servers of the test session) and short; the
analysis is tested on hand-made resource logs, including the run that must fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest

import distlock
from distlock.checker.history import analyse
from distlock.checker.sink_analysis import at_risk_figures, sink_figures, stale_writes
from tests.test_check import check
from tools.servers.redis import redis_binary

needs_redis_server = pytest.mark.skipif(redis_binary() is None, reason="redis-server is not installed")


def assert_fenced_and_scoped_hold_and_unfenced_is_caught(code: int, report: dict[str, Any], output: str) -> None:
    assert report["faults"]["pause"]["landed"] >= 1, output
    for sink in ("sql", "redis", "file"):
        fig = report["sinks"][sink]
        # the paused holder resumed and wrote blindly after newer holders had read: the checker saw it
        assert fig["unfenced"]["stale_accepted"] >= 1, (sink, fig)
        assert fig["unfenced"]["by_fault"]["pause"]["stale_accepted"] >= 1, (sink, fig)
        for writer in ("fenced", "scoped"):
            # ...and the same resumed holder was refused: by the resource's fence check, or by its own lease
            assert fig[writer]["stale_accepted"] == 0, (sink, writer, fig)
            assert fig[writer]["by_fault"]["pause"]["stale_refused"] >= 1, (sink, writer, fig)
            assert fig[writer]["errors"] == 0, (sink, writer, report["error_samples"])
        assert fig["fenced"]["accepted"] >= 2  # the fenced writer did write (a busy machine runs few rounds)
    assert code == 0 and report["ok"], output  # the unfenced stale writes are expected, not a failure


def test_sinks_on_sqlite_under_pause(tmp_path: Path) -> None:
    """SQLite lock; the SQL sink is an SQLite file, the Redis sink a server the checker starts."""
    code, report, output = check(tmp_path, "--seconds", "5", "--faults", "pause", "--sink", "all",
                                 url=f"sqlite:///{tmp_path}/l.db")  # fmt: skip
    assert report["sink_stores"]["sql"].startswith("sqlite:///")
    assert_fenced_and_scoped_hold_and_unfenced_is_caught(code, report, output)
    assert "data sinks" in output and "caught" in output


@needs_redis_server
def test_sinks_on_redis_under_pause_through_the_asyncio_api(tmp_path: Path, redis_url: str, mysql_url: str) -> None:
    """The Redis under test is the Redis sink, MariaDB the SQL sink (``--sql-sink``); the scoped writer is an
    ``async with lock.lease_timeout():`` body, refused on entry once the lease is over (before, the body ran after
    a pause and its write was accepted)."""
    code, report, output = check(tmp_path, "--seconds", "5", "--faults", "pause", "--sink", "sql,redis",
                                 "--sink", "file", "--sql-sink", mysql_url, "--api", "async", url=redis_url)  # fmt: skip
    assert report["sink_stores"]["redis"] == redis_url and report["sink_stores"]["sql"].startswith("mysql://")
    assert_fenced_and_scoped_hold_and_unfenced_is_caught(code, report, output)


def test_sinks_on_postgres_under_pause(tmp_path: Path, postgres_url: str) -> None:
    """The SQL sink is the PostgreSQL server under test: ``fencing.check`` in each write's transaction."""
    code, report, output = check(tmp_path, "--seconds", "5", "--faults", "pause", "--sink", "all", url=postgres_url)
    assert report["sink_stores"]["sql"].startswith("postgres")
    assert_fenced_and_scoped_hold_and_unfenced_is_caught(code, report, output)


@needs_redis_server
def test_freeze_on_redis_tells_at_risk_before_lost_and_no_stale_write_lands(tmp_path: Path) -> None:
    code, report, output = check(tmp_path, "--seconds", "5", "--spawn", "--faults", "freeze", "--sink", "redis,file",
                                 "--writer", "fenced,scoped")  # fmt: skip
    assert report["faults"]["freeze"]["landed"] >= 1, output
    assert report["writers"] == ["fenced", "scoped"] and set(report["sinks"]) == {"redis", "file"}
    risk = report["at_risk"]["freeze"]
    assert risk["lost"] >= 1 and risk["before"] == risk["lost"] and risk["min_ms"] > 0, risk
    for sink in report["sinks"].values():
        assert sink["fenced"]["stale_accepted"] == 0 and sink["scoped"]["stale_accepted"] == 0, sink
        assert sink["scoped"]["by_fault"]["freeze"]["stale_refused"] >= 1, sink  # lost fired: it did not write
    assert code == 0 and report["ok"], output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--sink", "sql,disk"), "unknown --sink 'disk'"),
        (("--sink", "sql", "--writer", "blind"), "unknown --writer 'blind'"),
        (("--sink", "file", "--algorithm", "lockfile"), "--sink writes under distlock's own lock"),
        (("--sink", "file", "--sql-sink", "postgres"), "add --sink sql"),
        (("--sink", "sql", "--sql-sink", "redis://127.0.0.1:1"), "the sql sink writes to SQLite, PostgreSQL or MySQL"),
    ],
)
def test_bad_sink_options_are_one_line_errors(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    code, _, output = check(tmp_path, "--seconds", "1", *args, url=f"sqlite:///{tmp_path}/l.db")
    assert code == 2 and says in output, output


# -- the library: lease_timeout() entered on a holding whose lease has passed ----------------------------------
def test_lease_timeout_entered_after_the_lease_ended_refuses_the_block(tmp_path: Path) -> None:
    """A process that was stopped (or a loop that was blocked) past the lease resumes with the holding lost but
    not yet seen as lost: entering ``lease_timeout()`` raises ``LockLost`` before the block runs. Before, the
    block ran until its first await: a request it sent first was a write made after the lease."""

    async def scenario() -> list[str]:
        ran: list[str] = []
        async with distlock.connect_async(f"sqlite:///{tmp_path}/l.db") as store:
            lock = store.lock("lease-timeout-late", ttl=0.3)
            assert await lock.acquire(timeout=5)
            time.sleep(0.6)  # the loop is blocked past the lease: no timer of the lease clock has run
            with pytest.raises(distlock.LockLost):
                async with lock.lease_timeout():
                    ran.append("body")
            with contextlib.suppress(distlock.LockLost):
                await lock.release()
        return ran

    assert asyncio.run(scenario()) == []


# -- the analysis on hand-made resource logs -------------------------------------------------------------------
def rec(kind: str, op: str, fence: int, t: float, worker: int = 0) -> dict[str, Any]:
    return {"kind": kind, "worker": worker, "op": op, "fence": fence, "t": t}


def op(worker: int, name: str, fence: int, t_acq: float, t_rel: float, sinks: dict[str, str]) -> dict[str, Any]:
    return {"op": name, "worker": worker, "fence": fence, "t_start": t_acq, "t_acq": t_acq, "t_rel": t_rel,
            "t_done": t_rel, "told": False, "fenced": "accepted", "sinks": sinks}  # fmt: skip


def test_a_write_accepted_after_a_higher_fence_is_stale() -> None:
    a_read, b_read, b_write, a_write = (rec("read", "a", 5, 1.0), rec("read", "b", 6, 3.0), rec("write", "b", 6, 3.1),
                                        rec("write", "a", 5, 3.5))  # fmt: skip
    assert stale_writes([a_read, b_read, b_write, a_write]) == [a_write]
    # a newer holder that had only read (started on the resource) is enough
    assert stale_writes([a_read, b_read, a_write]) == [a_write]
    # the same write before any newer holder touched the resource is not stale, nor are equal fences
    assert stale_writes([a_read, a_write, b_read, b_write]) == []
    assert stale_writes([a_read, rec("write", "a", 5, 1.1), rec("write", "a2", 5, 1.2)]) == []


def test_a_fenced_stale_write_fails_the_run_and_an_unfenced_one_is_reported() -> None:
    """The checker can fail: the same log, once as the unfenced writer's (reported, the run passes) and once as
    the fenced writer's (a safety violation)."""
    a = {**op(0, "a", 5, 1.0, 3.6, {"sql/unfenced": "accepted", "sql/fenced": "accepted"}), "told": True}
    b = op(1, "b", 6, 3.0, 3.2, {"sql/unfenced": "accepted", "sql/fenced": "accepted"})
    log = [
        rec("read", "a", 5, 1.0),
        rec("read", "b", 6, 3.0, 1),
        rec("write", "b", 6, 3.1, 1),
        rec("write", "a", 5, 3.5),
    ]
    pause = [{"kind": "pause", "t": 1.5, "worker": 0, "landed": True}]
    told = {"a": 3.55}
    fine = analyse([a, b], pause, ["a", "b"], ttl=1.0, run_end=4.0, lost=told, sink_logs={"sql": {"unfenced": log}})
    assert fine["ok"] is True and fine["sinks"]["sql"]["unfenced"]["stale_accepted"] == 1
    assert fine["sinks"]["sql"]["unfenced"]["by_fault"]["pause"] == {
        "writes": 1,
        "stale_accepted": 1,
        "stale_refused": 0,
    }
    bad = analyse([a, b], pause, ["a", "b"], ttl=1.0, run_end=4.0, lost=told, sink_logs={"sql": {"fenced": log}})
    assert bad["ok"] is False
    assert any("stale write(s) accepted by the sql sink from the fenced writer" in v for v in bad["safety_violations"])
    assert sink_figures({"sql": {"fenced": log}}, [a, b], lost=told)["sql"]["fenced"]["after_lost"] == 0


def test_at_risk_after_lost_or_never_fails_under_freeze_and_half_open_only() -> None:
    a, b = op(0, "a", 5, 1.0, 3.0, {}), op(1, "b", 6, 4.0, 5.0, {})
    freeze = [{"kind": "freeze", "t": 1.2, "worker": 0, "landed": True}]
    good = at_risk_figures([a, b], [], {"a": 2.0}, {"a": [1.1, 1.5]}, freeze)  # at risk, renewed, at risk again
    assert good == {"freeze": {"lost": 1, "before": 1, "after": 0, "never": 0, "in_release": 0, "min_ms": 500.0,
                               "median_ms": 500.0, "judged": True}}  # fmt: skip
    # lost only inside release() (its answer never came): nobody relied on the holding any more, not judged
    late = at_risk_figures([a, b], [], {"a": 3.5}, {}, freeze)["freeze"]
    assert late["in_release"] == 1 and late["lost"] == 0 and late["never"] == 0
    assert at_risk_figures([a, b], [], {"a": 2.0}, {"a": [2.1]}, freeze)["freeze"]["after"] == 1
    report = analyse([a, b], freeze, ["a", "b"], ttl=1.0, run_end=6.0, lost={"a": 2.0}, sink_logs={}, at_risk={})
    assert report["ok"] is False and any("at_risk" in v for v in report["safety_violations"])
    # under pause both timers fire at once when the process resumes: reported, not judged
    pause = [{**freeze[0], "kind": "pause"}]
    report = analyse([a, b], pause, ["a", "b"], ttl=1.0, run_end=6.0, lost={"a": 2.0}, sink_logs={}, at_risk={})
    assert report["at_risk"]["pause"]["never"] == 1 and report["ok"] is True

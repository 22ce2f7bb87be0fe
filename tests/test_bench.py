"""``distlock bench`` on SQLite for a moment: the JSON layout (docs/bench.md) and the chart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_bench_sqlite_json_layout_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    url = f"sqlite:///{tmp_path}/locks.db"
    r = subprocess.run(
        [sys.executable, "-m", "distlock", "bench", "--url", url, "--seconds", "0.5", "--workers", "3", "--tasks", "20",
         "--json", str(out), "--plot", str(png)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(out.read_text())
    assert doc["version"] == 3 and doc["seconds"] == 0.5 and doc["host"]["cpus"] >= 1
    assert all(len(doc["host"]["load_avg"][k]) == 3 for k in ("start", "end"))
    (b,) = doc["backends"]
    assert b["backend"] == "sqlite" and b["url"] == url and b["errors"] == []
    u = b["uncontended"]
    assert u["ops"] > 0 and u["rate_per_s"] > 0
    assert set(u["latency_ms"]) == {"p50", "p90", "p99", "max"}
    assert 0 < u["latency_ms"]["p50"] <= u["latency_ms"]["p99"] <= u["latency_ms"]["max"]
    h = b["handoff"]
    assert h["samples"] > 0 and h["latency_ms"]["p50"] > 0
    c = b["contention"]
    assert c["workers"] == 3 and len(c["per_worker"]) == 3 and sum(c["per_worker"]) == c["acquisitions"]
    assert c["min"] == min(c["per_worker"]) and c["max"] == max(c["per_worker"])
    assert (
        c["fairness"] is None or 0 <= c["fairness"] <= 1
    )  # a worker may get nothing in half a second on a loaded machine
    assert b["raw"]["probe"].startswith("BEGIN IMMEDIATE") and b["raw"]["limit_per_s"] == pytest.approx(
        b["raw"]["round_trips_per_s"] / 2, rel=0.01
    )
    assert b["ratio_to_raw"] == pytest.approx(u["rate_per_s"] / b["raw"]["limit_per_s"], rel=0.01)
    # every figure against the raw limit of the same run: rates as a share of it, the hand-off as round trips
    raw, vs = b["raw"], b["vs_raw"]
    assert raw["round_trip_ms"] == pytest.approx(1000 / raw["round_trips_per_s"], rel=0.01)
    assert vs["uncontended"] == b["ratio_to_raw"]
    assert vs["contention"] == pytest.approx(c["rate_per_s"] / raw["limit_per_s"], rel=0.01)
    assert vs["handoff_p50"] == pytest.approx(h["latency_ms"]["p50"] / raw["round_trip_ms"], rel=0.02)
    # the async API next to the sync one: same loop, hand-off between two async processes, N tasks on one lock
    a = b["async"]
    au = a["uncontended"]
    assert au["ops"] > 0 and au["rate_per_s"] > 0
    assert 0 < au["latency_ms"]["p50"] <= au["latency_ms"]["p99"] <= au["latency_ms"]["max"]
    assert a["handoff"]["samples"] > 0 and a["handoff"]["latency_ms"]["p50"] > 0
    t = a["tasks"]
    assert t["tasks"] == 20 and t["acquisitions"] > 0 and 0 <= t["min"] <= t["max"] <= t["acquisitions"]
    assert t["fairness"] == pytest.approx(t["min"] / t["max"], abs=0.001)
    assert b["async_cost_ratio"] == pytest.approx(u["rate_per_s"] / au["rate_per_s"], rel=0.01)
    assert u["cpu_us_per_op"] > 0 and au["cpu_us_per_op"] > 0
    assert b["async_cpu_ratio"] == pytest.approx(au["cpu_us_per_op"] / u["cpu_us_per_op"], rel=0.01)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "sqlite" in r.stdout and "async API" in r.stdout and "async/sync" in r.stdout and "vs raw" in r.stdout


def test_bench_memory_has_no_probe_and_bad_url_exits_2(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "distlock", "bench", "--url", "nope://x", "--seconds", "0.2"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 2 and "unknown URL scheme" in r.stderr
    from distlock.benchmark.probes import probe

    assert probe("memory://", 0.1) is None


def test_bench_spawn_starts_and_measures_a_local_redis(tmp_path: Path) -> None:
    from tools.servers.redis import redis_binary

    if redis_binary() is None:
        pytest.skip("redis-server is not installed")
    out = tmp_path / "bench.json"
    r = subprocess.run(
        [sys.executable, "-m", "distlock", "bench", "--spawn", "--seconds", "0.2", "--workers", "2", "--json", str(out)],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    (b,) = json.loads(out.read_text())["backends"]  # plain --spawn: one redis-server, and no default URL
    assert b["backend"] == "redis" and b["url"].startswith("redis://127.0.0.1:") and b["errors"] == []
    assert b["uncontended"]["ops"] > 0 and b["raw"]["probe"] == "PING"


def test_peers_script_help() -> None:
    """benchmarks/peers.py (the side-by-side of every peer library) imports, and its usage names the families."""
    r = subprocess.run([sys.executable, "benchmarks/peers.py", "--help"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "--json" in r.stdout and "--plot" in r.stdout and "zookeeper" in r.stdout

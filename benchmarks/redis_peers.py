#!/usr/bin/env python3
"""distlock's Redis and Redlock backends against their peers, on the same loopback servers in one run.

    python benchmarks/redis_peers.py [--seconds 3] [--json FILE] [--held 10000] [--only distlock,redis-py]

Starts one redis-server, five independent masters (tools/servers/redis.py) and a 3-master Redis Cluster
(tools/servers/redis_cluster.py; ``distlock-cluster`` row), persistence off. Peers, each
if importable (``pip install python-redis-lock pottery`` into the venv; they are not test dependencies):
redis-py's ``Lock``, python-redis-lock's ``Lock`` and pottery's ``Redlock`` (5 masters). Measured:

* uncontended: one client, acquire + release of one lock in a loop (locks/s), and as a share of the raw
  limit = redis-py PING rate / 2 (a lock cycle needs at least two round trips); measured in 5 interleaved
  rounds, median reported, so load from elsewhere hits every library alike;
* hand-off: two processes on one lock taking turns; the holder releases while the other is blocked in
  acquire, and does not try again before the other got it; time from just before release() to just after
  the other's acquire() returns (p50 / p99 ms; CLOCK_MONOTONIC is shared by the processes);
* 8 processes: each acquire + release on one lock in a loop (total locks/s, per-worker min / max);
* renewal of many held locks (distlock only): one renew round for ``--held`` locks, and RSS per held lock.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import redis  # noqa: E402

import distlock  # noqa: E402

Pair = tuple[Callable[[], None], Callable[[], None]]


def make_lock(lib: str, urls: list[str], name: str, store: Any = None) -> Pair:
    """(acquire, release) of one lock of library ``lib`` (blocking acquire, 10 s lease)."""
    if lib in ("distlock", "distlock-redlock", "distlock-cluster"):
        lk = store.lock(name, ttl=10)

        def acquire() -> None:
            assert lk.acquire(timeout=60)

        return acquire, lk.release
    if lib == "redis-py":
        rl = redis.Redis.from_url(urls[0]).lock(name, timeout=10)
        return (lambda: rl.acquire(blocking=True)), rl.release  # type: ignore[return-value]
    if lib == "python-redis-lock":
        import redis_lock

        pl = redis_lock.Lock(redis.Redis.from_url(urls[0]), name, expire=10)
        return (lambda: pl.acquire(blocking=True)), pl.release  # type: ignore[return-value]
    if lib == "pottery-redlock":
        from pottery import Redlock

        masters = {redis.Redis.from_url(u) for u in urls}
        po = Redlock(key=name, masters=masters, auto_release_time=10.0)
        return (lambda: po.acquire(blocking=True)), po.release  # type: ignore[return-value]
    raise SystemExit(f"unknown library {lib}")


def open_store(lib: str, url: str) -> Any:
    return distlock.connect(url) if lib.startswith("distlock") else None


# -- worker processes ----------------------------------------------------------------------------------
def worker(mode: str, lib: str, url: str, urls: list[str], name: str, seconds: float, out: Path) -> None:
    store = open_store(lib, url)
    acquire, release = make_lock(lib, urls, name, store)
    events: list[tuple[str, float]] = []
    count = 0
    turn = redis.Redis.from_url(urls[0])  # hand-off bookkeeping on its own connection
    me = out.stem
    out.with_suffix(".ready").write_text("")
    go = out.parent / (name + ".go")
    while not go.exists():  # every process is set up before the clock starts
        time.sleep(0.005)
    start_at = float(go.read_text())
    while time.monotonic() < start_at:
        time.sleep(0.001)
    end = start_at + seconds
    while time.monotonic() < end:
        acquire()
        events.append(("acq", time.monotonic()))
        count += 1
        if mode == "handoff":
            turn.set(name + ":turn", me)
            time.sleep(0.003)  # the other process is blocked in acquire by now
            events.append(("rel", time.monotonic()))
            release()
            # every release is a hand-off: do not barge back in before the other one got it
            waited = time.monotonic() + 5
            while turn.get(name + ":turn") == me.encode() and time.monotonic() < waited and time.monotonic() < end:
                time.sleep(0.0005)
        else:
            release()
    out.write_text(json.dumps({"count": count, "events": events if mode == "handoff" else []}))
    if store is not None:
        store.close()


def run_processes(mode: str, lib: str, url: str, urls: list[str], n: int, seconds: float, tmp: Path) -> list[dict]:
    name = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
    outs = [tmp / f"{name}-{i}.json" for i in range(n)]
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", mode, lib, url, ",".join(urls), name, str(seconds), str(o)]
        )
        for o in outs
    ]
    deadline = time.monotonic() + 120
    while not all(o.with_suffix(".ready").exists() for o in outs) and time.monotonic() < deadline:
        time.sleep(0.01)
    staged = tmp / (name + ".go.tmp")
    staged.write_text(str(time.monotonic() + 0.2))
    staged.rename(tmp / (name + ".go"))  # atomic: a worker never reads a half-written start time
    for p in procs:
        p.wait(seconds + 120)
    return [json.loads(o.read_text()) for o in outs]


def handoff(lib: str, url: str, urls: list[str], seconds: float, tmp: Path) -> tuple[float, float, int]:
    results = run_processes("handoff", lib, url, urls, 2, seconds, tmp)
    merged = sorted((t, kind, i) for i, r in enumerate(results) for kind, t in r["events"])
    lat = [
        (t2 - t1) * 1000
        for (t1, k1, i1), (t2, k2, i2) in itertools.pairwise(merged)
        if k1 == "rel" and k2 == "acq" and i1 != i2
    ]
    if len(lat) < 2:
        return float("nan"), float("nan"), len(lat)
    q = statistics.quantiles(lat, n=100)
    return statistics.median(lat), q[98], len(lat)


def uncontended(lib: str, url: str, urls: list[str], seconds: float) -> float:
    store = open_store(lib, url)
    acquire, release = make_lock(lib, urls, f"bench-u-{uuid.uuid4().hex[:8]}", store)
    for _ in range(50):
        acquire()
        release()
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        acquire()
        release()
        n += 1
    if store is not None:
        store.close()
    return n / seconds


def ping_rate(url: str, seconds: float) -> float:
    r = redis.Redis.from_url(url)
    for _ in range(50):
        r.ping()
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        r.ping()
        n += 1
    r.close()
    return n / seconds


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def many_held(url: str, held: int) -> dict[str, float]:
    with distlock.connect(url) as store:
        base = rss_kb()
        locks = [store.lock(f"bench-held-{i}", ttl=120) for i in range(held)]
        for lk in locks:
            assert lk.acquire(blocking=False)
        per_lock = (rss_kb() - base) * 1024 / held
        claims = [h.claim for h in store._core.holdings()]
        started = time.monotonic()
        ok = store._backend.renew(claims)
        took = time.monotonic() - started
        assert all(ok)
        for lk in locks:
            lk.release()
    return {"held": held, "renew_round_ms": took * 1000, "rss_bytes_per_lock": per_lock}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--held", type=int, default=10000)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--only", default="", help="comma-separated libraries to run (default: all installed)")
    args = ap.parse_args()
    only = {x for x in args.only.split(",") if x}

    from tools.servers.redis import redis_masters, redis_server, redlock_url
    from tools.servers.redis_cluster import redis_cluster

    report: dict[str, Any] = {"python": sys.version.split()[0], "redis-py": redis.__version__, "rows": []}
    with redis_server() as srv, redis_masters(5) as masters, redis_cluster(3) as cluster:
        single = [srv.url]
        five = [m.url for m in masters]
        libs: list[tuple[str, str, list[str]]] = [
            ("distlock", srv.url, single),
            ("redis-py", srv.url, single),
            ("python-redis-lock", srv.url, single),
            ("distlock-cluster", cluster.url, single),  # hand-off bookkeeping stays on the single node
            ("distlock-redlock", redlock_url(masters), five),
            ("pottery-redlock", "", five),
        ]
        tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"distlock-bench-{uuid.uuid4().hex[:6]}"
        tmp.mkdir()
        present = []
        for lib, url, urls in libs:
            if only and lib not in only:
                continue
            try:
                make_lock(lib, urls, "probe", open_store(lib, url) if lib.startswith("distlock") else None)
            except ImportError:
                print(f"{lib}: not installed, skipped", file=sys.stderr)
                continue
            present.append((lib, url, urls))
        # Uncontended rates and the raw limit in interleaved rounds, the median of each: a busy machine
        # then slows every library alike instead of whichever happened to run during a burst.
        rounds = 5
        rates: dict[str, list[float]] = {lib: [] for lib, _, _ in present}
        limits: list[float] = []
        for _ in range(rounds):
            limits.append(ping_rate(srv.url, args.seconds / rounds) / 2)
            for lib, url, urls in present:
                rates[lib].append(uncontended(lib, url, urls, args.seconds / rounds))
        limit = statistics.median(limits)
        report["raw_limit_locks_per_s"] = limit
        for lib, url, urls in present:
            rate = statistics.median(rates[lib])
            p50, p99, n_handoffs = handoff(lib, url, urls, args.seconds, tmp)
            eight = run_processes("throughput", lib, url, urls, 8, args.seconds, tmp)
            counts = [r["count"] for r in eight]
            row = {
                "library": lib,
                "uncontended_per_s": rate,
                "pct_of_raw_limit": 100 * rate / limit,
                "handoff_p50_ms": p50,
                "handoff_p99_ms": p99,
                "handoffs": n_handoffs,
                "eight_proc_per_s": sum(counts) / args.seconds,
                "eight_proc_min": min(counts),
                "eight_proc_max": max(counts),
            }
            report["rows"].append(row)
            print(json.dumps(row), file=sys.stderr)
        report["many_held"] = many_held(srv.url, args.held)
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def print_table(report: dict[str, Any]) -> None:
    print(f"raw limit (redis-py PING rate / 2): {report['raw_limit_locks_per_s']:.0f} locks/s")
    print(
        "| library | uncontended locks/s | % of raw limit | hand-off p50 ms | hand-off p99 ms | 8 procs locks/s | per worker min-max |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in report["rows"]:
        print(
            f"| {r['library']} | {r['uncontended_per_s']:.0f} | {r['pct_of_raw_limit']:.0f}% | {r['handoff_p50_ms']:.2f} "
            f"| {r['handoff_p99_ms']:.2f} | {r['eight_proc_per_s']:.0f} | {r['eight_proc_min']}-{r['eight_proc_max']} |"
        )
    m = report["many_held"]
    print(
        f"renewal of {m['held']} held locks: one pipeline, {m['renew_round_ms']:.0f} ms; "
        f"RSS {m['rss_bytes_per_lock'] / 1024:.2f} KB per held lock"
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        mode, lib, url, urls, name, seconds, out = sys.argv[2:]
        worker(mode, lib, url, urls.split(","), name, float(seconds), Path(out))
    else:
        main()

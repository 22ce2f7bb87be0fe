#!/usr/bin/env python3
"""Cost as waiters grow: the hand-off rate on one name with 10, 100 and 1,000 waiters, backend by backend.

    .venv/bin/python benchmarks/waiters.py [--only sqlite,redis,redlock,zookeeper,etcd,postgres,mysql]
                                           [--waiters 10,100,1000] [--seconds 3] [--procs 4] [--fair] [--json FILE]

For each backend it starts a throwaway deployment (the same starters as ``benchmarks/peers.py``, through
tools/servers/) and, for each N, spreads N asyncio tasks over ``--procs`` processes, each process with its own
``AsyncStore``. Every task loops ``acquire()`` (blocking) -> hold ~1 ms -> ``release()`` on the same name. After a
warm-up (the queue fills: every task is waiting) the acquisitions of the next ``--seconds`` are counted:

* rate: acquisitions per second, i.e. the hand-off rate (the lock is never free while anyone waits);
* vs 10: that rate over the smallest N's rate of the same backend in the same run (target: >= 0.5 at 1,000);
* fairness: per-task acquisitions min / max (0 where some task got none in the window: with 1,000 FIFO waiters
  and a few hundred hand-offs a second, most tasks get one or two turns);
* server: what the server keeps while they wait, read once in the middle of the window, minus what it kept
  before the tasks started (Redis: keys and used_memory of the database; ZooKeeper: the lock's children;
  etcd: keys under the lock's prefix and leases; SQL and SQLite: the waiters ``inspect`` counts), and per waiter;
* CPU: the client processes' CPU time over the window, in cores (seconds per second), and per acquisition.

``--fair`` adds ``fair=True`` rows where the backend has the option (they skip the store's local line, so every
waiter is in the server's queue). Compare runs by their ratios, never their absolute rates (the machine is
shared): the load average is recorded with each row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import queue
import secrets
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from benchmarks import peers  # noqa: E402

#: a lease no measurement outlives (waiters keep theirs alive where the backend needs it)
TTL = 30.0
#: how long each task holds the lock
HOLD = 0.001


@dataclass(frozen=True)
class Variant:
    label: str
    family: str  # a key of peers.FAMILIES: how its servers start
    query: str = ""  # added to the URL (e.g. mode=session)
    fair: bool = False


VARIANTS = [
    Variant("sqlite", "sqlite"),
    Variant("redis", "redis"),
    Variant("redlock", "redlock"),
    Variant("zookeeper", "zookeeper"),
    Variant("etcd", "etcd"),
    Variant("postgres lease", "postgres"),
    Variant("postgres session", "postgres", "mode=session"),
    Variant("mysql lease", "mysql"),
    Variant("mysql session", "mysql", "mode=session"),
]
FAIR = [
    Variant("sqlite fair", "sqlite", fair=True),
    Variant("redis fair", "redis", fair=True),
    Variant("postgres lease fair", "postgres", fair=True),
    Variant("mysql lease fair", "mysql", fair=True),
]


def _with_query(url: str, query: str) -> str:
    if not query:
        return url
    return f"{url}{'&' if '?' in url else '?'}{query}"


# -- the worker processes --------------------------------------------------------------------------------------
@dataclass
class Window:
    """The measured window on the host's monotonic clock (the same in every process on Linux)."""

    start: float
    end: float


async def _tasks(url: str, name: str, n: int, fair: bool, ready: Any, go: Any, when: Any) -> dict[str, Any]:
    from distlock import connect_async

    async with await connect_async(url) as store:
        locks = [store.lock(name, ttl=TTL, fair=fair) if fair else store.lock(name, ttl=TTL) for _ in range(n)]
        warm = store.lock(f"{name}-warm", ttl=TTL)
        assert await warm.acquire(timeout=60)  # connections, scripts, tables, leases: before the clock starts
        await warm.release()
        ready.put(("ready", None))
        await asyncio.to_thread(go.wait)
        w = Window(when[0], when[1])
        counts = [0] * n
        cpu: dict[str, float] = {}

        async def one(i: int) -> None:
            lock = locks[i]
            while (left := w.end - time.monotonic()) > 0:
                if not await lock.acquire(timeout=left):
                    break
                t = time.monotonic()
                await asyncio.sleep(HOLD)
                await lock.release()
                if w.start <= t < w.end:
                    counts[i] += 1

        async def sampler() -> None:
            await asyncio.sleep(max(0.0, w.start - time.monotonic()))
            cpu["start"] = time.process_time()
            await asyncio.sleep(max(0.0, w.end - time.monotonic()))
            cpu["end"] = time.process_time()

        await asyncio.wait_for(asyncio.gather(sampler(), *(one(i) for i in range(n))), w.end - time.monotonic() + 120)
    return {"counts": counts, "cpu_s": cpu["end"] - cpu["start"]}


def _worker(
    url: str, name: str, n: int, fair: bool, ready: Any, go: Any, when: Any, out: Any, profile: str | None = None
) -> None:
    try:
        if profile:  # where a process's time goes (--profile): one cProfile dump per worker process and thread
            import cProfile
            import threading

            profs: list[cProfile.Profile] = []

            def start(*_: Any) -> None:  # runs first in each new thread (the driver's, the offload pool's)
                prof = cProfile.Profile()
                profs.append(prof)
                prof.enable()

            threading.setprofile(start)
            with cProfile.Profile() as prof:
                result = asyncio.run(_tasks(url, name, n, fair, ready, go, when))
            threading.setprofile(None)  # type: ignore[arg-type]
            prof.dump_stats(os.path.join(profile, f"worker-{n}-{os.getpid()}-main.prof"))
            for i, other in enumerate(profs):
                other.dump_stats(os.path.join(profile, f"worker-{n}-{os.getpid()}-thread{i}.prof"))
        else:
            result = asyncio.run(_tasks(url, name, n, fair, ready, go, when))
        out.put(("done", result))
    except BaseException as err:  # noqa: BLE001 - reported to the parent in one line
        ready.put(("error", f"{type(err).__name__}: {err}"))
        out.put(("error", f"{type(err).__name__}: {err}"))


# -- what the server keeps ------------------------------------------------------------------------------------
def _state_probe(family: str, url: str, name: str) -> Callable[[], dict[str, float]] | None:
    """A function reading what the server keeps for ``name`` (and for everything, where that is cheap)."""
    url = url.split("?", 1)[0] if family in ("redis", "redlock", "zookeeper", "etcd") else url
    if family in ("redis", "redlock"):
        import redis

        first = url.split("://", 1)[1].split(",")[0].split("/")[0]
        host, port = first.rsplit(":", 1)
        client = redis.Redis(host=host, port=int(port), db=0)

        def read_redis() -> dict[str, float]:
            info = client.info("memory")
            return {"keys": float(client.dbsize()), "bytes": float(info["used_memory"])}

        return read_redis
    if family == "zookeeper":
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        from distlock._backends.zookeeper import layout

        zk = KazooClient(hosts=url.split("://", 1)[1].split("/")[0])
        zk.start(timeout=10)
        path = layout.lock_path(name)

        def read_zk() -> dict[str, float]:
            try:
                return {"nodes": float(len(zk.get_children(path)))}
            except NoNodeError:
                return {"nodes": 0.0}

        return read_zk
    if family == "etcd":
        from distlock._backends.etcd import keys as etcd_keys
        from tools.servers.etcd import client_ports, post

        port = client_ports(url)[0]
        prefix = etcd_keys.lock_prefix(name)

        def read_etcd() -> dict[str, float]:
            import base64

            b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
            kv = post(port, "/v3/kv/range", {"key": b64(prefix), "range_end": b64(etcd_keys.prefix_end(prefix)),
                                             "count_only": True})  # fmt: skip
            leases = post(port, "/v3/lease/leases", {})
            return {"keys": float(str(kv.get("count") or 0)), "leases": float(len(leases.get("leases") or []))}  # type: ignore[arg-type]

        return read_etcd
    from distlock import connect

    store = connect(url)

    def read_inspect() -> dict[str, float]:
        info = store.inspect(name)
        return {"waiters": float(info.waiters or 0) if info is not None else 0.0}

    return read_inspect


# -- one measurement --------------------------------------------------------------------------------------------
@dataclass
class Row:
    label: str
    waiters: int
    rate: float | None = None
    vs_first: float | None = None
    fairness: float | None = None
    min: int | None = None
    max: int | None = None
    server: dict[str, float] = field(default_factory=dict)
    per_waiter: dict[str, float] = field(default_factory=dict)
    cpu_cores: float | None = None
    cpu_us_per_acq: float | None = None
    load_avg: list[float] = field(default_factory=list)
    error: str | None = None


def measure(
    variant: Variant, url: str, n: int, procs: int, seconds: float, warmup: float, profile: str | None = None
) -> Row:
    row = Row(variant.label, n, load_avg=[round(x, 2) for x in os.getloadavg()])
    name = f"waiters/{secrets.token_hex(5)}"
    try:
        read_state = _state_probe(variant.family, url, name)
    except Exception as err:  # noqa: BLE001 - the rate is still worth having
        print(f"  {variant.label}: no server-state probe ({err})", file=sys.stderr)
        read_state = None
    before = read_state() if read_state else {}
    ctx = mp.get_context("spawn")
    ready, out = ctx.Queue(), ctx.Queue()
    go = ctx.Event()
    when = ctx.Array("d", 2, lock=False)
    shares = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    ps = [
        ctx.Process(target=_worker, args=(url, name, k, variant.fair, ready, go, when, out, profile), daemon=True)
        for k in shares
        if k
    ]
    for p in ps:
        p.start()
    try:
        for _ in ps:
            kind, payload = ready.get(timeout=120)
            if kind == "error":
                raise RuntimeError(payload)
        start = time.monotonic() + warmup
        when[0], when[1] = start, start + seconds
        go.set()
        time.sleep(max(0.0, start + seconds / 2 - time.monotonic()))
        mid = read_state() if read_state else {}
        results = []
        for _ in ps:
            kind, payload = out.get(timeout=warmup + seconds + 180)
            if kind == "error":
                raise RuntimeError(payload)
            results.append(payload)
    except queue.Empty:
        row.error = "workers did not finish in time"
        return row
    except Exception as err:  # noqa: BLE001 - one failing row must not hide the others
        row.error = str(err).splitlines()[0][:200]
        return row
    finally:
        for p in ps:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)
    counts = [c for r in results for c in r["counts"]]
    total = sum(counts)
    row.rate = round(total / seconds, 1)
    row.min, row.max = min(counts), max(counts)
    row.fairness = round(row.min / row.max, 3) if row.max else None
    cpu = sum(r["cpu_s"] for r in results)
    row.cpu_cores = round(cpu / seconds, 2)
    row.cpu_us_per_acq = round(cpu / total * 1e6) if total else None
    row.server = {k: mid[k] - before.get(k, 0.0) for k in mid}
    row.per_waiter = {k: round(v / n, 2) for k, v in row.server.items()}
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    families = args.only.split(",") if args.only else None
    variants = [v for v in VARIANTS + (FAIR if args.fair else []) if families is None or v.family in families]
    ns = [int(x) for x in args.waiters.split(",")]
    doc: dict[str, Any] = {
        "version": 1,
        "seconds": args.seconds,
        "procs": args.procs,
        "hold_ms": HOLD * 1000,
        "load_avg": {"start": [round(x, 2) for x in os.getloadavg()], "end": None},
        "rows": [],
        "skipped": [],
    }
    order = list(dict.fromkeys(v.family for v in variants))
    for fam in order:
        with ExitStack() as stack:
            try:
                base = peers.FAMILIES[fam].start(stack, args)
            except Exception as err:  # noqa: BLE001 - a server that is not installed skips its backend, said so
                doc["skipped"].append(f"{fam}: servers did not start ({type(err).__name__}: {err})")
                print(doc["skipped"][-1], file=sys.stderr)
                continue
            for variant in (v for v in variants if v.family == fam):
                url = _with_query(base, variant.query)
                first: float | None = None
                for n in ns:
                    print(f"{variant.label}: {n} waiters ...", file=sys.stderr, flush=True)
                    row = measure(variant, url, n, args.procs, args.seconds, args.warmup, args.profile)
                    if first is None:
                        first = row.rate
                    if row.rate is not None and first:
                        row.vs_first = round(row.rate / first, 3)
                    doc["rows"].append(row.__dict__)
                    print("  " + _line(row.__dict__), file=sys.stderr, flush=True)
    doc["load_avg"]["end"] = [round(x, 2) for x in os.getloadavg()]
    return doc


# -- output ----------------------------------------------------------------------------------------------------
HEADER = (
    "| backend | waiters | hand-offs/s | vs first N | per task min-max | server state (per waiter) "
    "| client CPU (cores, us/acq) | load |"
)


def _state(row: dict[str, Any]) -> str:
    if not row["server"]:
        return "-"
    parts = []
    for k, v in row["server"].items():
        per = row["per_waiter"].get(k)
        parts.append(f"{k} {v:+,.0f} ({per:+,.2f})" if k != "bytes" else f"{v / 1024:+,.0f} KiB ({per:+,.0f} B)")
    return ", ".join(parts)


def _line(row: dict[str, Any]) -> str:
    if row["error"]:
        return f"| {row['label']} | {row['waiters']:,} | failed: {row['error']} | | | | | |"
    vs = "-" if row["vs_first"] is None else f"{row['vs_first']:.2f}x"
    return (
        f"| {row['label']} | {row['waiters']:,} | {row['rate']:,.0f} | {vs} | {row['min']}-{row['max']} "
        f"| {_state(row)} | {row['cpu_cores']:.2f}, {row['cpu_us_per_acq'] or 0:,} | {row['load_avg'][0]} |"
    )


def markdown(doc: dict[str, Any]) -> str:
    lines = [
        f"{doc['procs']} processes, hold {doc['hold_ms']:g} ms, {doc['seconds']:g} s per row; load average "
        f"{doc['load_avg']['start']} -> {doc['load_avg']['end']}",
        "",
        HEADER,
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [_line(r) for r in doc["rows"]]
    lines += [f"* {s}" for s in doc["skipped"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--only", help="comma-separated families: " + ",".join(dict.fromkeys(v.family for v in VARIANTS)))
    ap.add_argument("--waiters", default="10,100,1000", help="comma-separated N (the first is the reference)")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured window per row")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds between the start and the window")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--fair", action="store_true", help="add fair=True rows where the backend has the option")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--profile", metavar="DIR", help="profile each worker process (cProfile dumps in DIR)")
    args = ap.parse_args(argv)
    for fam in (args.only or "").split(","):
        if fam and fam not in peers.FAMILIES:
            ap.error(f"unknown family {fam!r}")
    if args.procs < 1 or args.seconds <= 0:
        ap.error("--procs must be >= 1 and --seconds > 0")
    doc = run(args)
    print(markdown(doc))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

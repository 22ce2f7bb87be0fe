#!/usr/bin/env python3
"""distlock's ZooKeeper backend against its peers on one loopback ensemble.

    .venv/bin/python benchmarks/zookeeper_peers.py [--hosts h1:p1,h2:p2,h3:p3] [--seconds 5] [--json FILE]

Without ``--hosts`` it starts a 3-node ensemble from Debian's package (tools/servers/zookeeper.py). Peers:
kazoo's ``Lock`` recipe, and tooz's zookeeper driver if tooz is importable. Measured, per library:

* uncontended rate: one client, acquire + release of one lock in a loop (locks/s);
* raw limit: the same round trips made with bare kazoo calls (create ephemeral-sequential, list the
  children, delete): what a ZooKeeper lock costs at least on this machine;
* hand-off latency: two processes on one lock; the holder releases while the other is blocked in acquire;
  time from just before release() to just after acquire() returns, on CLOCK_MONOTONIC (p50 / p99, ms);
* 8-process throughput: 8 OS processes, each acquire + release in a loop on one lock (locks/s in total).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import distlock  # noqa: E402


# -- one "lock factory" per library: make(name) -> (acquire, release, close) ---------------------------
class Lib:
    name = ""

    def __init__(self, hosts: str) -> None:
        self.hosts = hosts

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Distlock(Lib):
    name = "distlock"

    def __init__(self, hosts: str) -> None:
        super().__init__(hosts)
        self.store = distlock.connect(f"zookeeper://{hosts}")

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        lk = self.store.lock(f"/bench/{name}")

        def acquire() -> None:
            assert lk.acquire(timeout=60)

        return acquire, lk.release

    def close(self) -> None:
        self.store.close()


class Kazoo(Lib):
    name = "kazoo Lock"

    def __init__(self, hosts: str) -> None:
        super().__init__(hosts)
        from kazoo.client import KazooClient

        self.client = KazooClient(hosts=hosts, timeout=10)
        self.client.start(20)

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        lk = self.client.Lock(f"/bench/{name}")

        def acquire() -> None:
            assert lk.acquire(timeout=60)

        return acquire, lk.release

    def close(self) -> None:
        self.client.stop()
        self.client.close()


class Tooz(Lib):
    name = "tooz zookeeper"

    def __init__(self, hosts: str) -> None:
        super().__init__(hosts)
        from tooz import coordination

        first = hosts.split(",")[0]
        self.coord = coordination.get_coordinator(f"zookeeper://{first}", uuid.uuid4().hex.encode())
        self.coord.start()

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        lk = self.coord.get_lock(name.encode())

        def acquire() -> None:
            assert lk.acquire(blocking=60)

        return acquire, lk.release

    def close(self) -> None:
        self.coord.stop()


class Raw(Lib):
    """The floor: the round trips of one lock cycle with bare kazoo calls, no recipe."""

    name = "raw kazoo round trips"

    def __init__(self, hosts: str) -> None:
        super().__init__(hosts)
        from kazoo.client import KazooClient

        self.client = KazooClient(hosts=hosts, timeout=10)
        self.client.start(20)

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        path = f"/bench/{name}"
        self.client.ensure_path(path)
        node: list[str] = []

        def acquire() -> None:
            node.append(self.client.create(f"{path}/n-", ephemeral=True, sequence=True))
            self.client.get_children(path)

        def release() -> None:
            self.client.delete(node.pop())

        return acquire, release

    def close(self) -> None:
        self.client.stop()
        self.client.close()


LIBS: dict[str, type[Lib]] = {"distlock": Distlock, "kazoo": Kazoo, "tooz": Tooz, "raw": Raw}


def available(key: str) -> bool:
    if key == "tooz":
        try:
            import tooz.coordination  # noqa: F401
        except ImportError:
            return False
    return True


# -- measurements --------------------------------------------------------------------------------------
def uncontended(lib: Lib, seconds: float) -> float:
    acquire, release = lib.lock(f"u-{uuid.uuid4().hex[:8]}")
    for _ in range(20):  # warm up (paths, JIT of the servers)
        acquire()
        release()
    n = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        acquire()
        release()
        n += 1
    return n / (time.perf_counter() - started)


def now() -> float:
    return time.clock_gettime(time.CLOCK_MONOTONIC)  # one clock for every process on the host


def player(key: str, hosts: str, name: str, rounds: int) -> None:
    """One side of the hand-off: acquire -> hold 10 ms -> release, ``rounds`` times; print the timestamps."""
    lib = LIBS[key](hosts)
    acquire, release = lib.lock(name)
    print("READY", flush=True)
    sys.stdin.readline()
    events = []
    for _ in range(rounds):
        acquire()
        got = now()
        time.sleep(0.01)
        events.append((got, now()))
        release()
    lib.close()
    print(json.dumps(events), flush=True)


def handoff(key: str, hosts: str, rounds: int) -> tuple[float, float]:
    """Two processes (own sessions) pass one lock back and forth; latency from just before one's release()
    to the other's acquire() returning. Each re-queues right after releasing, so with a FIFO lock they
    alternate and the other one is always already waiting."""
    name = f"h-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--player", key, hosts, name, str(rounds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    timeline: list[tuple[float, float, int]] = []
    for who, p in enumerate(procs):
        out, _ = p.communicate(timeout=rounds + 120)
        timeline += [(got, released, who) for got, released in json.loads(out.strip().splitlines()[-1])]
    timeline.sort()
    samples = sorted(b[0] - a[1] for a, b in itertools.pairwise(timeline) if a[2] != b[2])
    return statistics.median(samples) * 1000, samples[max(0, int(len(samples) * 0.99) - 1)] * 1000


def worker(key: str, hosts: str, name: str, seconds: float) -> None:
    lib = LIBS[key](hosts)
    acquire, release = lib.lock(name)
    acquire()
    release()
    print("READY", flush=True)
    sys.stdin.readline()
    n = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        acquire()
        release()
        n += 1
    lib.close()
    print(n, flush=True)


def processes(key: str, hosts: str, seconds: float, n: int = 8) -> float:
    name = f"p-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", key, hosts, name, str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "READY"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    total = 0
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 120)
        total += int(out.strip().splitlines()[-1])
    return total / seconds


@contextmanager
def ensemble(hosts: str | None) -> Iterator[str]:
    if hosts:
        yield hosts
        return
    from tools.servers.zookeeper import zookeeper_ensemble

    with zookeeper_ensemble(3) as ens:
        yield ens.hosts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts")
    ap.add_argument("--seconds", type=float, default=9.0, help="seconds per measurement (split over the turns)")
    ap.add_argument("--rounds", type=int, default=600, help="hand-off rounds in total (split over the turns)")
    ap.add_argument("--repeat", type=int, default=3, help="turns each library takes per measurement")
    ap.add_argument("--any-server", action="store_true", help="let each client pick a server of the ensemble")
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=4, metavar=("LIB", "HOSTS", "NAME", "SECONDS"))
    ap.add_argument("--player", nargs=4, metavar=("LIB", "HOSTS", "NAME", "ROUNDS"))
    args = ap.parse_args()
    if args.player:
        key, hosts, name, rounds = args.player
        player(key, hosts, name, int(rounds))
        return
    if args.worker:
        key, hosts, name, seconds = args.worker
        worker(key, hosts, name, float(seconds))
        return
    results: dict[str, dict[str, Any]] = {}
    keys = [k for k in LIBS if available(k)]
    for k in LIBS:
        if k not in keys:
            print(f"{k}: not installed, skipped", file=sys.stderr)
    samples: dict[str, dict[str, list[float]]] = {k: {} for k in keys}

    def add(key: str, metric: str, value: float) -> None:
        samples[key].setdefault(metric, []).append(value)
        print(f"{LIBS[key].name}: {metric} {value:.2f}", file=sys.stderr)

    # The libraries take turns, several times, and each number is the median of its turns: on a shared
    # machine the load drifts, and this keeps the drift from favouring whoever ran at a quiet moment.
    with ensemble(args.hosts) as all_hosts:
        # Every client of every library talks to the same server (by default the first one listed): the
        # clients pick a server at random otherwise, and leader vs follower changes the numbers more than
        # the libraries do.
        hosts = all_hosts if args.any_server else all_hosts.split(",")[0]
        print(f"clients connect to {hosts}", file=sys.stderr)
        libs = {k: LIBS[k](hosts) for k in keys}
        for _ in range(args.repeat):
            for k in keys:
                add(k, "uncontended", uncontended(libs[k], args.seconds / args.repeat))
        for lib in libs.values():
            lib.close()
        for _ in range(args.repeat):
            for k in keys:
                if k == "raw":
                    continue
                p50, p99 = handoff(k, hosts, args.rounds // args.repeat)
                add(k, "handoff_p50_ms", p50)
                add(k, "handoff_p99_ms", p99)
                add(k, "processes_8", processes(k, hosts, args.seconds / args.repeat))
    for k in keys:
        results[LIBS[k].name] = {m: statistics.median(v) for m, v in samples[k].items()}
    raw = results.get(Raw.name, {}).get("uncontended")
    print(
        "| library | uncontended locks/s | % of raw limit | hand-off p50 ms | hand-off p99 ms | 8 processes locks/s |"
    )
    print("|---|---|---|---|---|---|")
    for lib_name, row in results.items():
        pct = f"{100 * row['uncontended'] / raw:.0f}%" if raw else "-"
        cells = [f"{row['uncontended']:.0f}", pct]
        if "handoff_p50_ms" in row:
            cells += [f"{row['handoff_p50_ms']:.2f}", f"{row['handoff_p99_ms']:.2f}", f"{row['processes_8']:.0f}"]
        else:
            cells += ["-", "-", "-"]
        print(f"| {lib_name} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

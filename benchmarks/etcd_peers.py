#!/usr/bin/env python3
"""distlock's etcd backend against its peers on one loopback etcd cluster.

    python benchmarks/etcd_peers.py [--url etcd://h1:p1,h2:p2,h3:p3] [--seconds 5] [--json FILE]

Without ``--url`` it starts a 3-member cluster from Debian's ``etcd-server`` package (tools/servers/etcd.py),
with fsync on (the test suite turns it off; a benchmark should not). Peers, each if importable (they need
their own environment, see docs/etcd.md): python-etcd3's ``Lock`` (gRPC) and tooz's ``etcd3+http`` driver
(etcd3gw, the same JSON gateway distlock uses). Measured, per library:

* uncontended rate: one client, acquire + release of one lock in a loop (locks/s); the libraries of one
  run are measured in interleaved slices (same load for each);
* raw put limit: one client putting one key in a loop over the JSON gateway (puts/s), with httpx and
  with distlock's own HTTP client: one replicated write per round trip, the floor of any etcd lock (a
  lock cycle needs at least two writes); the percentage column is relative to distlock's client's;
* hand-off latency: two clients on one lock; the holder releases, the waiter was blocked in acquire;
  time from just before release() to just after the other's acquire() returns (p50 / p99, ms);
* 8-process throughput: 8 OS processes, each acquire + release in a loop on one lock (locks/s in total).
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")  # python-etcd3's old generated code

import distlock  # noqa: E402
from benchmarks._interleave import interleaved_rates  # noqa: E402


def first_endpoint(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].split(",")[0].rsplit(":", 1)
    return host, int(port)


# -- one "lock factory" per library: lock(name) -> (acquire, release) ----------------------------------
class Lib:
    name = ""

    def __init__(self, url: str) -> None:
        self.url = url

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Distlock(Lib):
    name = "distlock"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.store = distlock.connect(url)

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        lk = self.store.lock(f"bench/{name}")

        def acquire() -> None:
            assert lk.acquire(timeout=60)

        return acquire, lk.release

    def close(self) -> None:
        self.store.close()


class Etcd3(Lib):
    name = "python-etcd3 Lock"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import etcd3

        host, port = first_endpoint(url)
        self.client = etcd3.client(host=host, port=port)

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        lk = self.client.lock(f"bench/{name}", ttl=30)

        def acquire() -> None:
            assert lk.acquire(timeout=60)

        return acquire, lk.release

    def close(self) -> None:
        self.client.close()


class Tooz(Lib):
    name = "tooz etcd3gw"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        from tooz import coordination

        host, port = first_endpoint(url)
        self.coord = coordination.get_coordinator(f"etcd3+http://{host}:{port}", uuid.uuid4().hex.encode())
        self.coord.start()

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        lk = self.coord.get_lock(f"bench-{name}".encode())

        def acquire() -> None:
            assert lk.acquire(blocking=60)

        return acquire, lk.release

    def close(self) -> None:
        self.coord.stop()


class RawPut(Lib):
    """The floor: one put per round trip over the JSON gateway (httpx, one kept-alive connection)."""

    name = "raw put (httpx, JSON gateway)"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        import httpx

        host, port = first_endpoint(url)
        self.client = httpx.Client(base_url=f"http://{host}:{port}", trust_env=False)

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        body = {"key": base64.b64encode(f"bench/raw/{name}".encode()).decode(), "value": ""}

        def put() -> None:
            self.client.post("/v3/kv/put", json=body).raise_for_status()

        return put, lambda: None

    def close(self) -> None:
        self.client.close()


class RawPutOwn(Lib):
    """The same floor over distlock's own HTTP/1.1 client (what the backend uses): the client's share of
    the round trip is smaller than with httpx, so this is the floor distlock's rate is compared with."""

    name = "raw put (distlock's HTTP client)"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        from distlock._sync.backends.etcd.http import HTTPClient

        self.member = first_endpoint(url)
        self.client = HTTPClient(None)

    def lock(self, name: str) -> tuple[Callable[[], None], Callable[[], None]]:
        body = json.dumps({"key": base64.b64encode(f"bench/rawown/{name}".encode()).decode(), "value": ""}).encode()

        def put() -> None:
            assert self.client.post(self.member, "/v3/kv/put", body, {}, timeout=10, connect_timeout=10).status == 200

        return put, lambda: None

    def close(self) -> None:
        self.client.close()


LIBS: dict[str, type[Lib]] = {
    "distlock": Distlock,
    "etcd3": Etcd3,
    "tooz": Tooz,
    "raw": RawPut,
    "rawown": RawPutOwn,
}


def available(key: str) -> bool:
    try:
        if key == "etcd3":
            import etcd3  # noqa: F401
        elif key == "tooz":
            import etcd3gw  # noqa: F401
            import tooz.coordination  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - python-etcd3 fails with more than ImportError on new protobuf
        print(f"{key}: cannot import ({type(exc).__name__}: {exc})", file=sys.stderr)
        return False
    return True


# -- measurements --------------------------------------------------------------------------------------
def uncontended(libs: list[Lib], seconds: float, slices: int = 10) -> list[float]:
    """Locks/s of each lib, in interleaved slices (see benchmarks/_interleave.py)."""
    return interleaved_rates([lib.lock(f"u-{uuid.uuid4().hex[:8]}") for lib in libs], seconds, slices)


def handoff(cls: type[Lib], url: str, rounds: int) -> tuple[float, float, int]:
    """Two clients pass one lock back and forth; latency from release() to the other's acquire() returning.

    Each player loops acquire -> hold 10 ms -> release; right after releasing it queues again, so with a
    FIFO lock the two alternate and the other player is always already waiting when one releases.
    """
    a, b = cls(url), cls(url)
    name = f"h-{uuid.uuid4().hex[:8]}"
    locks = [a.lock(name), b.lock(name)]
    samples: list[float] = []
    last = {"by": -1, "at": 0.0}

    def player(me: int) -> None:
        acquire, release = locks[me]
        for _ in range(rounds):
            acquire()
            now = time.perf_counter()
            if last["by"] not in (-1, me):
                samples.append(now - last["at"])
            time.sleep(0.01)
            last["by"], last["at"] = me, time.perf_counter()
            release()

    threads = [threading.Thread(target=player, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a.close()
    b.close()
    if not samples:
        return float("nan"), float("nan"), 0
    samples.sort()
    p99 = samples[min(len(samples) - 1, math.ceil(len(samples) * 0.99) - 1)]
    return statistics.median(samples) * 1000, p99 * 1000, len(samples)


def worker(key: str, url: str, name: str, seconds: float) -> None:
    lib = LIBS[key](url)
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


def processes(key: str, url: str, seconds: float, n: int = 8) -> float:
    name = f"p-{uuid.uuid4().hex[:8]}"
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", key, url, name, str(seconds)],
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
def cluster(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    from tools.servers.etcd import etcd_cluster

    with etcd_cluster(3, fsync=True) as c:
        yield c.url


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--only", help="comma-separated subset of: " + ",".join(LIBS))
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=4, metavar=("LIB", "URL", "NAME", "SECONDS"))
    args = ap.parse_args()
    if args.worker:
        key, url, name, seconds = args.worker
        worker(key, url, name, float(seconds))
        return
    chosen = args.only.split(",") if args.only else list(LIBS)
    results: dict[str, dict[str, Any]] = {}
    with cluster(args.url) as url:
        keys = [key for key in LIBS if key in chosen and available(key)]
        libs = [LIBS[key](url) for key in keys]
        rates = uncontended(libs, args.seconds)
        for lib in libs:
            lib.close()
        for key, rate in zip(keys, rates, strict=True):
            cls = LIBS[key]
            row: dict[str, Any] = {"uncontended": rate}
            if not key.startswith("raw"):
                row["handoff_p50_ms"], row["handoff_p99_ms"], row["handoff_samples"] = handoff(cls, url, args.rounds)
                row["processes_8"] = processes(key, url, args.seconds)
            results[cls.name] = row
            print(cls.name, {k: round(v, 2) for k, v in row.items()}, file=sys.stderr)
    raw = results.get(RawPutOwn.name, results.get(RawPut.name, {})).get("uncontended")
    print(
        "| library | uncontended locks/s | % of raw put limit | hand-off p50 ms | hand-off p99 ms | 8 processes locks/s |"
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

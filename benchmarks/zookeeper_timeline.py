#!/usr/bin/env python3
"""Where a contended ZooKeeper hand-off goes: distlock and kazoo's ``Lock``, request by request.

    .venv/bin/python benchmarks/zookeeper_timeline.py [--hosts h1:p1,...] [--processes 8] [--seconds 3]
                                                      [--rounds 2] [--size 3] [--warmup 2]

``--processes`` processes loop acquire + release on one lock, one library at a time, the libraries alternating
round by round. Each process stamps (``time.monotonic``, one clock for every process on the host) every request
kazoo's connection thread sends, every answer and watch event it reads, and each acquire and release call. From
those, each hand-off (holder H, next holder W): H's release called -> H's delete sent -> its answer, W's deletion
event read -> the requests W sends before its acquire returns. Also: requests per acquisition by kind, the client
CPU per acquisition (all processes) and, for an ensemble this script started, each server's CPU per acquisition
(every client on the first server, as in ``zookeeper_peers.py``; its role is printed). Each library runs once,
unmeasured, before the rounds (``--warmup``): on a fresh ensemble the first one measured would otherwise pay for
the servers' JVMs compiling the contended paths.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

Event = tuple[Any, ...]  # (time, kind, ...)


def _stamp(log: list[Event]) -> None:
    """Stamp kazoo's requests, answers and watch events into ``log`` (this process only)."""
    from kazoo.protocol import connection as c
    from kazoo.protocol.serialization import Watch

    now = time.monotonic
    submit, response, watch = (
        c.ConnectionHandler._submit,
        c.ConnectionHandler._read_response,
        c.ConnectionHandler._read_watch_event,
    )

    def _submit(self: Any, request: Any, timeout: Any, xid: Any = None) -> Any:
        log.append((now(), "send", type(request).__name__))
        return submit(self, request, timeout, xid)

    def _read_response(self: Any, header: Any, buffer: Any, offset: Any) -> Any:
        pending = self.client._pending
        log.append((now(), "reply", type(pending[0][0]).__name__ if pending else "?"))
        return response(self, header, buffer, offset)

    def _read_watch_event(self: Any, buffer: Any, offset: Any) -> Any:
        log.append((now(), "event", Watch.deserialize(buffer, offset)[0].type))
        return watch(self, buffer, offset)

    c.ConnectionHandler._submit = _submit
    c.ConnectionHandler._read_response = _read_response
    c.ConnectionHandler._read_watch_event = _read_watch_event


def _worker(lib: str, hosts: str, name: str, seconds: float, go: Any, out: Any) -> None:
    log: list[Event] = []
    _stamp(log)
    if lib == "distlock":
        import distlock

        store = distlock.connect(f"zookeeper://{hosts}")
        lock = store.lock(f"timeline/{name}", ttl=30)
        acquire, release, close = (lambda: lock.acquire(timeout=60)), lock.release, store.close
    else:
        from kazoo.client import KazooClient

        client = KazooClient(hosts=hosts, timeout=10)
        client.start(20)
        klock = client.Lock(f"/timeline/{name}")
        acquire, release = (lambda: klock.acquire(timeout=60)), klock.release

        def close() -> None:
            client.stop()
            client.close()

    acquire()
    release()
    go.wait()
    log.clear()
    now = time.monotonic
    end = now() + seconds
    cpu = time.process_time()
    while now() < end:
        assert acquire()
        log.append((now(), "G"))
        log.append((now(), "R"))
        release()
    cpu = time.process_time() - cpu
    close()
    out.put((log, cpu))


def _server_cpu(pids: list[int]) -> list[float]:
    tick = os.sysconf("SC_CLK_TCK")
    cpu = []
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu.append((int(fields[11]) + int(fields[12])) / tick)
    return cpu


def run(lib: str, hosts: str, processes: int, seconds: float, pids: list[int]) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    name = uuid.uuid4().hex[:8]
    procs = [ctx.Process(target=_worker, args=(lib, hosts, name, seconds, go, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    time.sleep(3.0 + processes * 0.5)  # every process connected and warmed up (one cycle each)
    before = _server_cpu(pids)
    go.set()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    after = _server_cpu(pids)
    for p in procs:
        p.join(10)
    return analyse(
        [r[0] for r in results], sum(r[1] for r in results), [b - a for a, b in zip(before, after, strict=True)]
    )


def _after(log: list[Event], t: float, kind: str, what: Any = None) -> Event | None:
    return next((e for e in log if e[0] >= t and e[1] == kind and (what is None or e[2] == what)), None)


def _last_before(log: list[Event], start: float, end: float, kind: str) -> Event | None:
    return next((e for e in reversed(log) if start <= e[0] <= end and e[1] == kind), None)


def analyse(logs: list[list[Event]], client_cpu: float, server_cpu: list[float]) -> dict[str, Any]:
    grants = sorted((e[0], i) for i, log in enumerate(logs) for e in log if e[1] == "G")
    n = len(grants)
    spans: dict[str, list[float]] = collections.defaultdict(list)
    wake_requests: collections.Counter[tuple[str, ...]] = collections.Counter()
    for (t_grant, h), (t_next, w) in itertools.pairwise(grants):
        if h == w:
            continue
        rel = _after(logs[h], t_grant, "R")
        sent = rel and _after(logs[h], rel[0], "send", "Delete")
        answer = rel and _after(logs[h], rel[0], "reply", "Delete")
        event = rel and _after(logs[w], rel[0], "event", 2)  # 2: the deletion of a node
        if not (rel and sent and answer and event) or event[0] > t_next:
            continue
        spans["hand-off (grant to next grant)"].append(t_next - t_grant)
        spans["holder: release called -> delete sent"].append(sent[0] - rel[0])
        spans["server: delete sent -> its answer"].append(answer[0] - sent[0])
        spans["server: delete sent -> next's deletion event"].append(event[0] - sent[0])
        spans["next: deletion event -> acquire returns"].append(t_next - event[0])
        # the one listing of most hand-offs, split: the waiter's wake-up, the server's read, the client's grant
        listing = _last_before(logs[w], event[0], t_next, "send")
        listed = _last_before(logs[w], event[0], t_next, "reply")
        if listing and listed and listing[2] == listed[2] == "GetChildren" and listing[0] <= listed[0]:
            spans["next: event -> its last request sent"].append(listing[0] - event[0])
            spans["next: ... sent -> answered (a listing)"].append(listed[0] - listing[0])
            spans["next: ... answered -> acquire returns"].append(t_next - listed[0])
        wake_requests[tuple(e[2] for e in logs[w] if event[0] <= e[0] <= t_next and e[1] == "send")] += 1
    kinds = collections.Counter(e[2] for log in logs for e in log if e[1] == "send")
    return {
        "acquisitions": n,
        "rate_per_s": round(n / (grants[-1][0] - grants[0][0]), 1) if n > 1 else 0.0,
        "per_worker": sorted(sum(1 for e in log if e[1] == "G") for log in logs),
        "requests_per_acquisition": {k: round(v / n, 2) for k, v in kinds.most_common()} if n else {},
        "p50_ms": {k: round(statistics.median(v) * 1000, 3) for k, v in spans.items()},
        "p90_ms": {k: round(sorted(v)[int(0.9 * len(v))] * 1000, 3) for k, v in spans.items()},
        "next_sends_before_grant": [(list(k), v) for k, v in wake_requests.most_common(4)],
        "client_cpu_us": round(client_cpu / n * 1e6) if n else None,
        "server_cpu_us": [round(c / n * 1e6) for c in server_cpu] if n else [],
    }


def show(lib: str, r: dict[str, Any]) -> None:
    print(f"{lib}: {r['rate_per_s']}/s, {r['acquisitions']} acquisitions, per worker {r['per_worker']}")
    print(f"  requests per acquisition: {r['requests_per_acquisition']}")
    for k, v in r["p50_ms"].items():
        print(f"  {k:45s} p50 {v:7.3f} ms  p90 {r['p90_ms'][k]:7.3f} ms")
    print(f"  requests the next holder sends between the event and its grant: {r['next_sends_before_grant']}")
    servers = f", servers {r['server_cpu_us']} us" if r["server_cpu_us"] else ""
    print(f"  CPU per acquisition: clients {r['client_cpu_us']} us{servers}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", help="an ensemble to use instead of starting one (its first server is used)")
    ap.add_argument("--size", type=int, default=3, help="servers of the ensemble started (default 3)")
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=2, help="alternated rounds: distlock, kazoo; kazoo, distlock; ...")
    ap.add_argument("--warmup", type=float, default=2.0, help="an unmeasured run of each library first (seconds)")
    args = ap.parse_args()
    from tools.servers.zookeeper import server_mode, zookeeper_ensemble

    with zookeeper_ensemble(args.size) if not args.hosts else contextlib.nullcontext() as ens:
        first = args.hosts.split(",")[0] if args.hosts else ens.nodes[0].address
        pids = [n.proc.proc.pid for n in ens.nodes if n.proc and n.proc.proc] if ens else []
        host, _, port = first.rpartition(":")
        print(f"every client on {first} ({server_mode(int(port), host)}); load average {os.getloadavg()[0]:.2f}")
        for lib in ("distlock", "kazoo") if args.warmup > 0 else ():  # a fresh JVM compiles as it serves
            run(lib, first, args.processes, args.warmup, pids)
        for i in range(args.rounds):
            for lib in ("distlock", "kazoo") if i % 2 == 0 else ("kazoo", "distlock"):
                show(lib, run(lib, first, args.processes, args.seconds, pids))
            print(f"(round {i + 1} done, load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()

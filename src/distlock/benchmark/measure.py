"""The measurements of ``distlock bench`` for one store URL.

* **uncontended**: one process, one lock, ``acquire(); release()`` in a loop; pairs per second and the latency of
  one pair (p50/p90/p99/max).
* **hand-off**: two processes take strict turns on one lock (a shared counter says whose turn is next, so the
  releaser never barges back in): the next one starts ``acquire`` as soon as the holder has the lock, the holder
  keeps it 3 ms so the other is blocked in ``acquire`` by then, and releases. Hand-off latency = the waiter's
  ``acquire`` returning minus the holder's ``release`` starting, on the host's one monotonic clock: the cost of a
  wake-up plus a grant. Every acquisition after the first is a hand-off.
* **contention**: 8 processes loop ``acquire(); release()`` on one lock with no hold time: total acquisitions per
  second and per-worker counts (fairness = min / max).
* **raw**: the backend's round-trip limit (:mod:`.probes`) and the ratio of the uncontended rate to it.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import queue
import secrets
import time
from typing import Any

from .._sync.store import connect
from .._url import parse_url, redact
from ..checker.history import percentiles
from .probes import probe


def _pct(values: list[float]) -> dict[str, float | None]:
    out = percentiles(values)
    if values:
        s = sorted(values)
        out["p90"] = round(s[min(len(s) - 1, int(0.9 * len(s)))] * 1000.0, 3)
    else:
        out["p90"] = None
    return out


def uncontended(url: str | None, seconds: float, ttl: float) -> dict[str, Any]:
    name = f"distlock-bench/{secrets.token_hex(6)}"
    lat: list[float] = []
    with connect(url) as store:
        lock = store.lock(name, ttl=ttl)
        for _ in range(5):  # warm up: connection, scripts, tables
            lock.acquire()
            lock.release()
        start = time.perf_counter()
        deadline = start + seconds
        now = start
        while now < deadline:
            t0 = time.perf_counter()
            lock.acquire()
            lock.release()
            now = time.perf_counter()
            lat.append(now - t0)
        elapsed = now - start
    return {"ops": len(lat), "rate_per_s": round(len(lat) / elapsed, 1), "latency_ms": _pct(lat)}


def _worker(
    index: int, url: str | None, name: str, ttl: float, hold: float, turns: Any, go: Any, end: Any, out: Any
) -> None:
    """Loop acquire/hold/release until ``end``. With ``turns`` (a shared counter), take strict turns with the
    other worker: acquisition number k belongs to worker ``k % 2``."""
    spans: list[tuple[float, float]] = []
    error = None
    try:
        with connect(url) as store:
            lock = store.lock(name, ttl=ttl)
            out.put(("ready", index, None))
            go.wait()
            while time.monotonic() < end.value:
                if turns is not None:
                    while turns.value % 2 != index and time.monotonic() < end.value:
                        time.sleep(0.0001)
                    if time.monotonic() >= end.value:
                        break
                if not lock.acquire(timeout=max(0.0, end.value - time.monotonic())):
                    break
                t_acq = time.monotonic()
                if turns is not None:
                    turns.value += 1  # the other worker's turn: it starts waiting while we hold the lock
                if hold:
                    time.sleep(hold)
                t_rel = time.monotonic()
                lock.release()
                spans.append((t_acq, t_rel))
    except Exception as err:  # noqa: BLE001 - reported to the parent in one line
        error = f"{type(err).__name__}: {err}"
    out.put(("done", index, (spans, error)))


def _run_workers(
    url: str | None, n: int, seconds: float, ttl: float, hold: float, take_turns: bool = False
) -> list[list[tuple[float, float]]]:
    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    go = ctx.Event()
    end: Any = ctx.Value("d", 0.0, lock=False)
    turns: Any = ctx.Value("q", 0, lock=False) if take_turns else None
    name = f"distlock-bench/{secrets.token_hex(6)}"
    procs = [
        ctx.Process(target=_worker, args=(i, url, name, ttl, hold, turns, go, end, out), daemon=True) for i in range(n)
    ]
    for p in procs:
        p.start()
    results: dict[int, list[tuple[float, float]]] = {}
    ready = 0
    try:
        deadline = time.monotonic() + 120
        while ready < n:
            kind, index, payload = out.get(timeout=max(0.1, deadline - time.monotonic()))
            if kind == "ready":
                ready += 1
            else:
                raise RuntimeError(f"bench worker {index} failed to start: {payload[1]}")
        end.value = time.monotonic() + seconds
        go.set()
        while len(results) < n:
            kind, index, payload = out.get(timeout=seconds + 60)
            if kind == "done":
                spans, error = payload
                if error:
                    raise RuntimeError(f"bench worker {index}: {error}")
                results[index] = spans
    except queue.Empty:
        raise RuntimeError("bench workers did not finish in time") from None
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join(5)
    return [results[i] for i in range(n)]


def handoff(url: str | None, seconds: float, ttl: float) -> dict[str, Any]:
    spans = _run_workers(url, 2, seconds, ttl, hold=0.003, take_turns=True)
    events = sorted((t_acq, t_rel, w) for w, ss in enumerate(spans) for t_acq, t_rel in ss)
    lat = [b[0] - a[1] for a, b in itertools.pairwise(events) if a[2] != b[2]]
    return {"samples": len(lat), "latency_ms": _pct(lat)}


def contention(url: str | None, seconds: float, ttl: float, workers: int = 8) -> dict[str, Any]:
    spans = _run_workers(url, workers, seconds, ttl, hold=0.0)
    counts = [len(s) for s in spans]
    total = sum(counts)
    return {
        "workers": workers,
        "acquisitions": total,
        "rate_per_s": round(total / seconds, 1),
        "per_worker": counts,
        "min": min(counts),
        "max": max(counts),
        "fairness": round(min(counts) / max(counts), 3) if max(counts) else None,
    }


def bench_url(url: str | None, seconds: float, ttl: float = 10.0, workers: int = 8) -> dict[str, Any]:
    """Every measurement for one URL; a failing step is reported in ``errors`` and the others still run."""
    config = parse_url(url)
    result: dict[str, Any] = {
        "url": redact(config.url),
        "backend": config.backend,
        "uncontended": None,
        "handoff": None,
        "contention": None,
        "raw": None,
        "ratio_to_raw": None,
        "errors": [],
    }
    steps: list[tuple[str, Any]] = [
        ("uncontended", lambda: uncontended(url, seconds, ttl)),
        ("handoff", lambda: handoff(url, seconds, ttl)),
        ("contention", lambda: contention(url, seconds, ttl, workers)),
    ]
    for key, fn in steps:
        try:
            result[key] = fn()
        except Exception as err:  # noqa: BLE001 - one step failing must not hide the others
            result["errors"].append(f"{key}: {type(err).__name__}: {err}")
    try:
        raw = probe(url, min(seconds, 2.0))
    except Exception as err:  # noqa: BLE001
        result["errors"].append(f"raw: {type(err).__name__}: {err}")
        raw = None
    if raw is not None:
        result["raw"] = {
            "probe": raw.probe,
            "round_trips_per_s": round(raw.round_trips_per_s, 1),
            "limit_per_s": round(raw.limit_per_s, 1),
        }
        if result["uncontended"]:
            result["ratio_to_raw"] = round(result["uncontended"]["rate_per_s"] / raw.limit_per_s, 3)
    return result

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
* **raw**: the backend's round-trip limit (``probes``), and every figure as a ratio to it (``vs_raw``): the
  two rates as a share of the pair limit (round trips / 2), the hand-off p50 as a multiple of one round trip (a
  hand-off needs at least one round trip plus a push, so the round trip is its floor).
* **async**: the same uncontended loop with ``AsyncStore`` (interleaved with the sync one, round by
  round, so both see the same machine load), the hand-off with two processes using the async API, and ``tasks``
  asyncio tasks in one process looping on one shared lock object (throughput, per-task fairness). The cost ratio
  is the async time per acquire+release over the sync one (target: at most 1.3).

The hand-off and contention workers take their locks from a ``LockSource`` (a distlock store by default), so
``benchmarks/peers.py`` runs other libraries' locks through the very same measurement.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing as mp
import queue
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .._async.store import connect_async
from .._sync.store import connect
from .._url import parse_url, redact
from ..checker.history import percentiles
from .probes import ProbeResult, probe


def _pct(values: list[float]) -> dict[str, float | None]:
    out = percentiles(values)
    if values:
        s = sorted(values)
        out["p90"] = round(s[min(len(s) - 1, int(0.9 * len(s)))] * 1000.0, 3)
    else:
        out["p90"] = None
    return out


def _summary(lat: list[float], elapsed: float, cpu: float | None = None) -> dict[str, Any]:
    out = {"ops": len(lat), "rate_per_s": round(len(lat) / elapsed, 1) if elapsed else 0.0, "latency_ms": _pct(lat)}
    if cpu is not None:  # this process's CPU time per pair: the client's own cost, whatever the machine's load
        out["cpu_us_per_op"] = round(cpu / len(lat) * 1e6, 1) if lat else None
    return out


def sync_pairs(lock: Any, seconds: float, lat: list[float]) -> float:
    """acquire(); release() for ``seconds``; appends each pair's latency, returns the time spent."""
    start = now = time.perf_counter()
    deadline = start + seconds
    while now < deadline:
        t0 = time.perf_counter()
        lock.acquire()
        lock.release()
        now = time.perf_counter()
        lat.append(now - t0)
    return now - start


async def async_pairs(lock: Any, seconds: float, lat: list[float]) -> float:
    """The same loop with the async API (kept line for line like ``sync_pairs``: same work, same timer)."""
    start = now = time.perf_counter()
    deadline = start + seconds
    while now < deadline:
        t0 = time.perf_counter()
        await lock.acquire()
        await lock.release()
        now = time.perf_counter()
        lat.append(now - t0)
    return now - start


async def _warm_up(lock: Any) -> None:
    for _ in range(5):
        await lock.acquire()
        await lock.release()


#: one side of an interleaved measurement: loop acquire + release for ``seconds``, append each pair's latency to the
#: list, return the time spent
Side = Callable[[float, list[float]], float]


def interleave(sides: Sequence[Side], seconds: float) -> list[dict[str, Any]]:
    """Summaries of each side, run in alternating slices (a quarter of a second, at least 4 per side, so every side
    sees the same machine load and their ratios hold when the absolute rates drift), ``seconds`` per side in total."""
    rounds = max(4, round(seconds * 4))
    lats: list[list[float]] = [[] for _ in sides]
    spent = [0.0] * len(sides)
    cpu = [0.0] * len(sides)
    for _ in range(rounds):
        for i, side in enumerate(sides):
            cpu0 = time.process_time()
            spent[i] += side(seconds / rounds, lats[i])
            cpu[i] += time.process_time() - cpu0
    return [_summary(lat, t, c) for lat, t, c in zip(lats, spent, cpu, strict=True)]


def uncontended(url: str | None, seconds: float, ttl: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(sync, async) uncontended pairs, interleaved (``interleave``)."""
    with connect(url) as store, asyncio.Runner() as runner:
        astore = runner.run(connect_async(url))
        try:
            lock = store.lock(f"distlock-bench/{secrets.token_hex(6)}", ttl=ttl)
            alock = astore.lock(f"distlock-bench/{secrets.token_hex(6)}", ttl=ttl)
            for _ in range(5):  # warm up: connections, scripts, tables
                lock.acquire()
                lock.release()
            runner.run(_warm_up(alock))
            sync, async_ = interleave(
                [
                    lambda s, lat: sync_pairs(lock, s, lat),
                    lambda s, lat: runner.run(async_pairs(alock, s, lat)),
                ],
                seconds,
            )
        finally:
            runner.run(astore.aclose())
    return sync, async_


class LockSource(Protocol):
    """Where a worker process gets its lock: ``source(name, ttl)`` is a context manager giving an object with
    ``acquire(timeout=...) -> bool`` and ``release()``. It is pickled into spawned processes, so it must be a
    module-level class's instance."""

    def __call__(self, name: str, ttl: float) -> contextlib.AbstractContextManager[Any]: ...


@dataclass(frozen=True)
class StoreLocks:
    """Locks of a distlock store (what ``distlock bench`` measures); ``url`` also opens the async store."""

    url: str | None

    @contextlib.contextmanager
    def __call__(self, name: str, ttl: float) -> Iterator[Any]:
        with connect(self.url) as store:
            yield store.lock(name, ttl=ttl)


def _step(index: int, turns: Any, end: Any) -> str:
    """What a worker does next: "stop" (time is up), "wait" (the other worker's turn) or "go"."""
    if time.monotonic() >= end.value:
        return "stop"
    return "wait" if turns is not None and turns.value % 2 != index else "go"


def _acquired(turns: Any) -> float:
    if turns is not None:
        turns.value += 1  # the other worker's turn: it starts waiting while we hold the lock
    return time.monotonic()


def _sync_loop(index: int, source: LockSource, name: str, ttl: float, hold: float, turns: Any, go: Any, end: Any,
               out: Any, spans: list[tuple[float, float]]) -> None:  # fmt: skip
    with source(name, ttl) as lock:
        out.put(("ready", index, None))
        go.wait()
        while (step := _step(index, turns, end)) != "stop":
            if step == "wait":
                time.sleep(0.0001)
            elif lock.acquire(timeout=max(0.0, end.value - time.monotonic())):
                t_acq = _acquired(turns)
                if hold:
                    time.sleep(hold)
                t_rel = time.monotonic()
                lock.release()
                spans.append((t_acq, t_rel))


async def _async_loop(index: int, source: StoreLocks, name: str, ttl: float, hold: float, turns: Any, go: Any,
                      end: Any, out: Any, spans: list[tuple[float, float]]) -> None:  # fmt: skip
    """``_sync_loop`` with the async API, in this worker's own event loop."""
    async with await connect_async(source.url) as store:
        lock = store.lock(name, ttl=ttl)
        out.put(("ready", index, None))
        go.wait()  # blocks the loop, but before any lock is held
        while (step := _step(index, turns, end)) != "stop":
            if step == "wait":
                await asyncio.sleep(0.0001)
            elif await lock.acquire(timeout=max(0.0, end.value - time.monotonic())):
                t_acq = _acquired(turns)
                if hold:
                    await asyncio.sleep(hold)
                t_rel = time.monotonic()
                await lock.release()
                spans.append((t_acq, t_rel))


def _worker(
    index: int,
    source: LockSource,
    name: str,
    ttl: float,
    hold: float,
    turns: Any,
    go: Any,
    end: Any,
    out: Any,
    use_async: bool = False,
) -> None:
    """Loop acquire/hold/release until ``end``. With ``turns`` (a shared counter), take strict turns with the
    other worker: acquisition number k belongs to worker ``k % 2``."""
    spans: list[tuple[float, float]] = []
    error = None
    try:
        if use_async:
            if not isinstance(source, StoreLocks):
                raise TypeError("the async workers measure distlock stores only")
            asyncio.run(_async_loop(index, source, name, ttl, hold, turns, go, end, out, spans))
        else:
            _sync_loop(index, source, name, ttl, hold, turns, go, end, out, spans)
    except Exception as err:  # noqa: BLE001 - reported to the parent in one line
        error = f"{type(err).__name__}: {err}"
    out.put(("done", index, (spans, error)))


def _source(target: str | LockSource | None) -> LockSource:
    return target if callable(target) else StoreLocks(target)


def _run_workers(
    source: LockSource,
    n: int,
    seconds: float,
    ttl: float,
    hold: float,
    take_turns: bool = False,
    use_async: bool = False,
) -> list[list[tuple[float, float]]]:
    ctx = mp.get_context("spawn")
    out: Any = ctx.Queue()
    go = ctx.Event()
    end: Any = ctx.Value("d", 0.0, lock=False)
    turns: Any = ctx.Value("q", 0, lock=False) if take_turns else None
    name = f"distlock-bench/{secrets.token_hex(6)}"
    procs = [
        ctx.Process(target=_worker, args=(i, source, name, ttl, hold, turns, go, end, out, use_async), daemon=True)
        for i in range(n)
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


def handoff(target: str | LockSource | None, seconds: float, ttl: float, use_async: bool = False) -> dict[str, Any]:
    """Two processes taking strict turns on one lock (a store URL, or any ``LockSource``)."""
    spans = _run_workers(_source(target), 2, seconds, ttl, hold=0.003, take_turns=True, use_async=use_async)
    events = sorted((t_acq, t_rel, w) for w, ss in enumerate(spans) for t_acq, t_rel in ss)
    lat = [b[0] - a[1] for a, b in itertools.pairwise(events) if a[2] != b[2]]
    return {"samples": len(lat), "latency_ms": _pct(lat)}


def contention(target: str | LockSource | None, seconds: float, ttl: float, workers: int = 8) -> dict[str, Any]:
    """``workers`` processes looping acquire + release on one lock (a store URL, or any ``LockSource``)."""
    spans = _run_workers(_source(target), workers, seconds, ttl, hold=0.0)
    counts = [len(s) for s in spans]
    return {"workers": workers, "per_worker": counts, **_counts(counts, seconds)}


def _counts(counts: list[int], seconds: float) -> dict[str, Any]:
    total = sum(counts)
    return {
        "acquisitions": total,
        "rate_per_s": round(total / seconds, 1),
        "min": min(counts),
        "max": max(counts),
        "fairness": round(min(counts) / max(counts), 3) if max(counts) else None,
    }


async def _tasks(url: str | None, seconds: float, ttl: float, tasks: int) -> dict[str, Any]:
    async with await connect_async(url) as store:
        lock = store.lock(f"distlock-bench/{secrets.token_hex(6)}", ttl=ttl)  # one object, a holding per task
        await _warm_up(lock)
        counts = [0] * tasks
        end = time.monotonic() + seconds

        async def one(i: int) -> None:
            while (left := end - time.monotonic()) > 0 and await lock.acquire(timeout=left):
                counts[i] += 1
                await lock.release()

        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(tasks))), seconds + 60)
    return {"tasks": tasks, **_counts(counts, seconds)}


def tasks(url: str | None, seconds: float, ttl: float, n: int = 100) -> dict[str, Any]:
    """``n`` asyncio tasks in one process loop ``acquire(); release()`` on one lock: throughput, per-task fairness."""
    return asyncio.run(_tasks(url, seconds, ttl, n))


#: the async per-operation cost the async path aims to stay within, relative to the sync path (docs/bench.md,
#: "Performance targets")
ASYNC_COST_TARGET = 1.3


def bench_url(
    url: str | None, seconds: float, ttl: float = 10.0, workers: int = 8, n_tasks: int = 100
) -> dict[str, Any]:
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
        "vs_raw": None,
        "async": {"uncontended": None, "handoff": None, "tasks": None},
        "async_cost_ratio": None,
        "async_cpu_ratio": None,
        "errors": [],
    }
    aresult = result["async"]

    def both_uncontended() -> None:
        result["uncontended"], aresult["uncontended"] = uncontended(url, seconds, ttl)

    steps: list[tuple[str, Any]] = [
        ("uncontended", both_uncontended),
        ("handoff", lambda: result.__setitem__("handoff", handoff(url, seconds, ttl))),
        ("async.handoff", lambda: aresult.__setitem__("handoff", handoff(url, seconds, ttl, use_async=True))),
        ("contention", lambda: result.__setitem__("contention", contention(url, seconds, ttl, workers))),
        ("async.tasks", lambda: aresult.__setitem__("tasks", tasks(url, seconds, ttl, n_tasks))),
    ]
    for key, fn in steps:
        try:
            fn()
        except Exception as err:  # noqa: BLE001 - one step failing must not hide the others
            result["errors"].append(f"{key}: {type(err).__name__}: {err}")
    sync_u, async_u = result["uncontended"], aresult["uncontended"]
    if sync_u and async_u and async_u["rate_per_s"]:
        result["async_cost_ratio"] = round(sync_u["rate_per_s"] / async_u["rate_per_s"], 3)
        if sync_u["cpu_us_per_op"] and async_u["cpu_us_per_op"]:
            result["async_cpu_ratio"] = round(async_u["cpu_us_per_op"] / sync_u["cpu_us_per_op"], 3)
    try:
        raw = probe(url, min(seconds, 2.0))
    except Exception as err:  # noqa: BLE001
        result["errors"].append(f"raw: {type(err).__name__}: {err}")
        raw = None
    result["raw"] = raw_entry(raw)
    result["vs_raw"] = vs_raw(result, result["raw"])
    result["ratio_to_raw"] = result["vs_raw"]["uncontended"]  # version 2's name for the first of them
    return result


def raw_entry(raw: ProbeResult | None) -> dict[str, Any] | None:
    """A probe's result as the JSON reports it."""
    if raw is None:
        return None
    return {
        "probe": raw.probe,
        "round_trips_per_s": round(raw.round_trips_per_s, 1),
        "round_trip_ms": float(f"{1000.0 / raw.round_trips_per_s:.4g}"),
        "limit_per_s": round(raw.limit_per_s, 1),
    }


def vs_raw(row: dict[str, Any], raw: dict[str, Any] | None) -> dict[str, float | None]:
    """Each figure of ``row`` against the raw limit measured in the same run: the uncontended and the contention
    rates as a share of the pair limit (1.0 = as fast as two bare round trips per acquire + release), the hand-off
    p50 as a multiple of one round trip (its floor: the release's round trip, then a push; 1.0 = at the floor)."""
    out: dict[str, float | None] = {"uncontended": None, "handoff_p50": None, "contention": None}
    if raw is None:
        return out
    for key in ("uncontended", "contention"):
        if row.get(key):
            out[key] = round(row[key]["rate_per_s"] / raw["limit_per_s"], 3)
    p50 = (row.get("handoff") or {}).get("latency_ms", {}).get("p50")
    if p50 is not None:
        out["handoff_p50"] = round(p50 / (1000.0 / raw["round_trips_per_s"]), 2)
    return out

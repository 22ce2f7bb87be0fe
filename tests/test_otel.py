"""OpenTelemetry metrics and spans (``distlock.otel``) read back through the real SDK's InMemoryMetricReader and
InMemorySpanExporter, on SQLite and a real Redis: counts and durations match what the test did, a real loss is
counted by its reason, the lock name is an attribute only when asked for; the Prometheus snippet of
docs/operations.md is run and scraped once; nothing imports OpenTelemetry unless asked to."""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import distlock
import distlock.otel
from tools.servers.proc import free_port

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Telemetry:
    reader: InMemoryMetricReader
    meters: MeterProvider
    spans: InMemorySpanExporter
    tracers: TracerProvider

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, data point) of every series of ``metric`` (cumulative since the start)."""
        found = []
        data = self.reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        found += [(dict(p.attributes or {}), p) for p in m.data.data_points]
        return found

    def value(self, metric: str, **attributes: Any) -> float:
        """The sum over the series of ``metric`` whose attributes include ``attributes`` (counter values, or
        histogram sums with ``.sum`` below)."""
        return sum(p.value for a, p in self.points(metric) if _has(a, attributes))

    def histogram(self, metric: str, **attributes: Any) -> tuple[int, float]:
        """(count, sum) over the matching series of a histogram."""
        pts = [p for a, p in self.points(metric) if _has(a, attributes)]
        return sum(p.count for p in pts), sum(p.sum for p in pts)

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())


def _has(attributes: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(attributes.get(k.replace("__", ".")) == v for k, v in wanted.items())


# attribute keys as keyword arguments of Telemetry.value/histogram: dots spelled as double underscores
BACKEND, KIND, OUTCOME, REASON = (
    "distlock__backend",
    "distlock__lock__kind",
    "distlock__outcome",
    "distlock__loss__reason",
)


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    spans = InMemorySpanExporter()
    tracers = TracerProvider()
    tracers.add_span_processor(SimpleSpanProcessor(spans))
    yield Telemetry(reader, meters, spans, tracers)
    meters.shutdown()
    tracers.shutdown()


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest) -> str:
    value: str = request.getfixturevalue(f"{request.param}_url")
    return value


def _wait_for(condition: Callable[[], bool], what: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"not within {within}s: {what}"
        time.sleep(0.02)


def test_counts_durations_and_spans_match_what_was_done(url: str, name: str, telemetry: Telemetry) -> None:
    scheme = url.split(":", 1)[0]
    with distlock.connect(url) as store:
        distlock.otel.instrument(store, meter_provider=telemetry.meters, tracer_provider=telemetry.tracers)
        lock = store.lock(name, ttl=0.6)  # renewed every 0.2 s while held
        began = time.monotonic()
        assert lock.acquire(timeout=5)
        fence = lock.fence
        permit = store.semaphore(name + "-sem", permits=2, ttl=5)
        assert permit.acquire(timeout=5)
        assert telemetry.value("distlock.lock.held", **{BACKEND: scheme, KIND: "lock"}) == 1
        assert telemetry.value("distlock.lock.held", **{BACKEND: scheme, KIND: "semaphore"}) == 1
        contender = store.lock(name, ttl=5)
        t0 = time.monotonic()
        assert not contender.acquire(timeout=0.2)  # timed out: the lock is held
        waited = time.monotonic() - t0
        _wait_for(lambda: telemetry.value("distlock.lock.renewals", **{OUTCOME: "ok"}) >= 1, "a renewal round trip")
        time.sleep(0.1)
        lock.release()
        held_for = time.monotonic() - began
        permit.release()
        renewals = telemetry.value("distlock.lock.renewals", **{BACKEND: scheme, OUTCOME: "ok"})

    acquired = {BACKEND: scheme, KIND: "lock", OUTCOME: "acquired"}
    assert telemetry.value("distlock.lock.acquires", **acquired) == 1
    assert telemetry.value("distlock.lock.acquires", **{BACKEND: scheme, KIND: "lock", OUTCOME: "timeout"}) == 1
    assert telemetry.value("distlock.lock.acquires", **{BACKEND: scheme, KIND: "semaphore", OUTCOME: "acquired"}) == 1
    count, total = telemetry.histogram("distlock.lock.acquire.duration", **{KIND: "lock", OUTCOME: "timeout"})
    # the timeout counts from just before the acquire's events begin (the claim is made in between)
    assert count == 1 and 0.2 - 0.002 <= total <= waited, (total, waited)
    count, total = telemetry.histogram("distlock.lock.hold.duration", **{KIND: "lock", OUTCOME: "released"})
    assert count == 1 and 0.3 <= total <= held_for, (total, held_for)  # it spanned the 0.2 s wait and the renewal
    assert telemetry.histogram("distlock.lock.hold.duration", **{KIND: "semaphore", OUTCOME: "released"})[0] == 1
    assert telemetry.value("distlock.lock.held") == 0  # every holding counted down once
    assert telemetry.value("distlock.lock.losses") == 0
    assert renewals >= 1 and telemetry.histogram("distlock.lock.renew.duration", **{OUTCOME: "ok"})[0] >= renewals
    for attributes, _ in telemetry.points("distlock.lock.acquires") + telemetry.points("distlock.lock.held"):
        assert "distlock.lock.name" not in attributes  # not asked for

    spans = telemetry.finished()
    assert [s.name for s in spans] == ["distlock.acquire"] * 3
    outcomes = [(s.attributes["distlock.lock.kind"], s.attributes["distlock.outcome"]) for s in spans]  # type: ignore[index]
    assert outcomes == [("lock", "acquired"), ("semaphore", "acquired"), ("lock", "timeout")]
    assert spans[0].attributes["distlock.lock.fence"] == fence  # type: ignore[index]
    assert "distlock.lock.fence" not in spans[2].attributes  # type: ignore[operator]
    # the span covers the 0.2 s wait. Its times are OpenTelemetry's, from the wall clock, which NTP may slew
    # against the monotonic one the timeout runs on (chrony: by up to 8.3%): a span ended early is ~0
    assert spans[2].end_time - spans[2].start_time >= 0.15e9  # type: ignore[operator]


def test_losses_are_counted_by_reason(url: str, name: str, telemetry: Telemetry) -> None:
    scheme = url.split(":", 1)[0]
    with distlock.connect(url) as store, distlock.connect(url) as admin:
        distlock.otel.instrument(store, meter_provider=telemetry.meters, spans=False)
        broken = store.lock(name, ttl=0.6)
        assert broken.acquire(timeout=5)
        assert admin.break_lock(name)  # its next renewal (within 0.2 s) is refused
        assert broken.lost.wait(10)
        unrenewed = store.lock(name + "-b", ttl=0.3, auto_renew=False)
        assert unrenewed.acquire(timeout=5)
        assert unrenewed.lost.wait(10)  # its lease ran out
        with pytest.raises(distlock.LockLost):
            broken.release()  # already lost: no second count
        _wait_for(lambda: telemetry.value("distlock.lock.losses") >= 2, "two losses")

    assert telemetry.value("distlock.lock.losses", **{BACKEND: scheme, KIND: "lock", REASON: "refused"}) == 1
    assert telemetry.value("distlock.lock.losses", **{BACKEND: scheme, KIND: "lock", REASON: "expired"}) == 1
    assert telemetry.value("distlock.lock.losses") == 2
    count, total = telemetry.histogram("distlock.lock.hold.duration", **{OUTCOME: "lost"})
    assert count == 2 and total > 0.25  # the unrenewed one was held for most of its 0.3 s lease
    assert telemetry.histogram("distlock.lock.hold.duration", **{OUTCOME: "released"})[0] == 0
    assert telemetry.value("distlock.lock.held") == 0


def test_release_requests_are_counted_once_each_and_logged(
    url: str, name: str, telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    scheme = url.split(":", 1)[0]
    caplog.set_level(logging.INFO, logger="distlock")
    with distlock.connect(url) as store:
        distlock.otel.instrument(store, meter_provider=telemetry.meters, spans=False)
        lock = store.lock(name, ttl=0.6)
        assert lock.acquire(timeout=5)
        assert store.request_release(name, "drain")
        assert lock.revoke_requested.wait(10)
        time.sleep(0.5)  # more renewals carry the same request: still one
        lock.release()
    assert telemetry.value("distlock.lock.revoke_requests", **{BACKEND: scheme, KIND: "lock"}) == 1
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "revoke-requested"]
    assert record.levelno == logging.INFO and record.reason == "drain" and record.lock == name  # type: ignore[attr-defined]


def test_the_lock_name_is_an_attribute_only_when_asked_for(sqlite_url: str, name: str, telemetry: Telemetry) -> None:
    with distlock.connect(sqlite_url) as store:
        distlock.otel.instrument(
            store, meter_provider=telemetry.meters, tracer_provider=telemetry.tracers, lock_names=True
        )
        with store.lock(name, ttl=5):
            pass
    named = {"distlock.lock.name": name, "distlock.lock.kind": "lock"}
    for metric in ("distlock.lock.acquires", "distlock.lock.acquire.duration", "distlock.lock.hold.duration"):
        assert [a for a, _ in telemetry.points(metric) if named.items() <= a.items()], metric
    (span,) = telemetry.finished()
    assert span.attributes["distlock.lock.name"] == name  # type: ignore[index]


def test_the_client_name_is_an_attribute_of_a_named_store(sqlite_url: str, name: str, telemetry: Telemetry) -> None:
    with distlock.connect(sqlite_url, client_name="web-1") as store:
        distlock.otel.instrument(store, meter_provider=telemetry.meters, tracer_provider=telemetry.tracers)
        with store.lock(name, ttl=5):
            pass
    for metric in ("distlock.lock.acquires", "distlock.lock.hold.duration", "distlock.lock.held"):
        assert [a for a, _ in telemetry.points(metric) if a.get("distlock.client.name") == "web-1"], metric
    (span,) = telemetry.finished()
    assert span.attributes["distlock.client.name"] == "web-1"  # type: ignore[index]


async def test_every_store_of_the_process_when_none_is_given(sqlite_url: str, name: str, telemetry: Telemetry) -> None:
    """``instrument()`` with no store: stores opened later are counted too (here an asyncio one), until
    ``uninstrument()``; a cancelled acquire is an error outcome with its error type, and its span says so."""
    handle = distlock.otel.instrument(meter_provider=telemetry.meters, tracer_provider=telemetry.tracers)
    try:
        async with await distlock.connect_async(sqlite_url) as store:
            async with store.rwlock(name, ttl=5).write:
                waiter = asyncio.create_task(store.rwlock(name, ttl=5).read.acquire(timeout=30))
                await asyncio.sleep(0.2)  # it waits: the write lock is held
                waiter.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiter
    finally:
        handle.uninstrument()
    assert telemetry.value("distlock.lock.acquires", **{KIND: "write", OUTCOME: "acquired"}) == 1
    cancelled = {KIND: "read", OUTCOME: "error", "error__type": "CancelledError"}
    assert telemetry.value("distlock.lock.acquires", **cancelled) == 1
    (span,) = [s for s in telemetry.finished() if s.attributes["distlock.lock.kind"] == "read"]  # type: ignore[index]
    assert span.attributes["distlock.outcome"] == "error" and not span.status.is_ok  # type: ignore[index]

    def later() -> None:  # after uninstrument(): not counted
        with distlock.connect(sqlite_url) as store, store.lock(name, ttl=5):
            pass

    await asyncio.to_thread(later)  # a sync store, off the event loop's thread (on it, it would block the loop)
    assert telemetry.value("distlock.lock.acquires", **{KIND: "lock"}) == 0


def test_a_failing_sink_never_breaks_a_lock(name: str, caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def record(self, event: str, fields: object) -> None:
            raise RuntimeError("metrics pipeline down")

        def acquiring(self, fields: object) -> None:
            raise RuntimeError("tracing down")

    with distlock.connect("memory://") as store:
        store._acquirer.events.add(Broken())
        with store.lock(name, ttl=5) as lock:
            assert lock.fence is not None
    assert any("sink failed" in r.getMessage() for r in caplog.records)


def _docs_snippet() -> str:
    """The Prometheus example of docs/operations.md (the Python block that starts the exporter)."""
    text = (ROOT / "docs" / "operations.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    (snippet,) = [b for b in blocks if "PrometheusMetricReader" in b]
    return snippet


def test_the_prometheus_snippet_of_the_docs_is_scraped(tmp_path: Path, name: str) -> None:
    port = free_port()
    snippet = _docs_snippet()
    assert "9464" in snippet and 'distlock.connect("redis://127.0.0.1:6379/0")' in snippet
    code = snippet.replace("9464", str(port)).replace("redis://127.0.0.1:6379/0", f"sqlite:///{tmp_path}/l.db")
    code += f"""
import urllib.request
with store.lock({name!r}, ttl=5):
    pass
print(urllib.request.urlopen("http://127.0.0.1:{port}/metrics", timeout=10).read().decode())
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    series = {line.split("{")[0]: line for line in r.stdout.splitlines() if line.startswith("distlock_")}
    acquires = series["distlock_lock_acquires_total"]
    assert 'distlock_backend="sqlite"' in acquires and 'distlock_outcome="acquired"' in acquires
    assert acquires.endswith(" 1.0"), acquires
    assert series["distlock_lock_hold_duration_seconds_count"].endswith(" 1.0")
    assert series["distlock_lock_held"].endswith(" 0.0")
    assert "distlock_lock_acquire_duration_seconds_bucket" in series


def test_nothing_imports_opentelemetry_unless_asked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/l.db"
    bare = f"""
import sys, distlock
with distlock.connect({url!r}) as store:
    with store.lock("x", ttl=5):
        pass
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
"""
    r = subprocess.run([sys.executable, "-c", bare], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stdout + r.stderr
    # the [otel] extra is the API alone: instrument() works without the SDK (OpenTelemetry's no-op providers)
    api_only = f"""
import sys
sys.modules["opentelemetry.sdk"] = None  # as if not installed
import distlock, distlock.otel
with distlock.connect({url!r}) as store:
    distlock.otel.instrument(store)
    with store.lock("y", ttl=5) as lock:
        print(lock.fence)
"""
    r = subprocess.run([sys.executable, "-c", api_only], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip().isdigit(), r.stdout + r.stderr
    # without the extra: a one-line error that names it
    missing = "import sys; sys.modules['opentelemetry'] = None; import distlock.otel"
    r = subprocess.run([sys.executable, "-c", missing], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last == "ModuleNotFoundError: distlock.otel needs OpenTelemetry: pip install 'python-distlock[otel]'", last


def test_latch_count_downs_and_barrier_trips_are_counted(sqlite_url: str, name: str, telemetry: Telemetry) -> None:
    with distlock.connect(sqlite_url) as store:
        distlock.otel.instrument(store, meter_provider=telemetry.meters, tracer_provider=telemetry.tracers)
        latch = store.latch(name, 2)
        assert latch.count_down() == 1 and latch.count_down() == 0
        assert latch.count_down() == 0  # at zero: counted as such again
        gate = store.barrier(name, 2)
        got: list[bool] = []
        other = threading.Thread(target=lambda: got.append(gate.wait(timeout=10)))
        other.start()
        assert gate.wait(timeout=10)
        other.join(10)
        assert got == [True]
        assert not store.barrier(name + "-alone", 2).wait(timeout=0.3)  # withdrawn: no trip
    latch_kind = {BACKEND: "sqlite", KIND: "latch"}
    assert telemetry.value("distlock.latch.count_downs", **latch_kind, **{OUTCOME: "counted"}) == 1
    assert telemetry.value("distlock.latch.count_downs", **latch_kind, **{OUTCOME: "zero"}) == 2
    assert telemetry.value("distlock.barrier.trips", **{BACKEND: "sqlite", KIND: "barrier"}) == 1

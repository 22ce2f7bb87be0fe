"""OpenTelemetry metrics and spans for distlock's locks (install the ``[otel]`` extra).

>>> import distlock, distlock.otel
>>> store = distlock.connect("memory://")
>>> handle = distlock.otel.instrument(store)          # the global MeterProvider and TracerProvider
>>> handle.uninstrument()

The instruments listen to the store's event stream (``distlock._events``), the same events the ``distlock``
logger logs, so the metrics, the spans and the log can never tell different stories. docs/operations.md lists
the instruments and their attributes; the lock name is an attribute only with ``lock_names=True`` (one time
series per name otherwise would be a cardinality bomb for most metric stores).

Only the OpenTelemetry *API* is needed here: what the numbers become (Prometheus, OTLP, ...) is the
application's choice of SDK and exporter, as the OpenTelemetry project recommends for libraries.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple

from . import __version__, _events
from ._async.store import AsyncStore
from ._dist import install_hint
from ._errors import ConfigError
from ._sync.store import Store

try:
    from opentelemetry import metrics, trace
except ModuleNotFoundError as exc:  # pragma: no cover - the bare install's case (tests/test_package.py)
    if not (exc.name or "").startswith("opentelemetry"):
        raise
    raise ModuleNotFoundError(f"distlock.otel needs OpenTelemetry: {install_hint('otel')}", name=exc.name) from None

__all__ = ["Instrumentation", "instrument"]

#: histogram buckets (seconds) for waiting for and holding a lock: a millisecond to ten minutes
LOCK_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: histogram buckets (seconds) for one renewal round trip to the backend: sub-millisecond to ten seconds
ROUND_TRIP_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

BACKEND = "distlock.backend"
KIND = "distlock.lock.kind"
NAME = "distlock.lock.name"
OUTCOME = "distlock.outcome"
LOSS_REASON = "distlock.loss.reason"
FENCE = "distlock.lock.fence"
ERROR_TYPE = "error.type"  # OpenTelemetry's general attribute for what failed
CLIENT_NAME = "distlock.client.name"  # the store's client_name (connect(..., client_name=...)), when it has one


class _Instrument(NamedTuple):
    """One instrument of the sink, as ``meter.create_<kind>`` gets it (docs/operations.md lists them)."""

    kind: Literal["counter", "up_down_counter", "histogram"]
    name: str
    unit: str
    description: str
    buckets: tuple[float, ...] | None = None  # a histogram's advised bucket boundaries (seconds)

    def create(self, meter: metrics.Meter) -> Any:
        if self.kind == "histogram":
            return meter.create_histogram(
                self.name,
                unit=self.unit,
                description=self.description,
                explicit_bucket_boundaries_advisory=self.buckets,
            )
        if self.kind == "up_down_counter":
            return meter.create_up_down_counter(self.name, unit=self.unit, description=self.description)
        return meter.create_counter(self.name, unit=self.unit, description=self.description)


#: the sink's instruments by attribute name, in the order they are registered
_INSTRUMENTS: dict[str, _Instrument] = {
    "acquire_duration": _Instrument(
        "histogram", "distlock.lock.acquire.duration", "s",
        "How long acquire() waited, by outcome (acquired, timeout, error)", LOCK_SECONDS,
    ),
    "acquires": _Instrument(
        "counter", "distlock.lock.acquires", "{acquire}",
        "acquire() calls by outcome (acquired, timeout, error); a reentrant re-entry is not one",
    ),
    "hold_duration": _Instrument(
        "histogram", "distlock.lock.hold.duration", "s",
        "How long a lock was held, from its grant to its release or loss (outcome released or lost)", LOCK_SECONDS,
    ),
    "held": _Instrument("up_down_counter", "distlock.lock.held", "{lock}", "Locks (holdings) this process holds now"),
    "losses": _Instrument("counter", "distlock.lock.losses", "{loss}", "Holdings lost before their release, by reason"),
    "at_risk": _Instrument(
        "counter", "distlock.lock.at_risk", "{warning}",
        "Holdings found at risk: half their lease left with no renewal confirmed (lost comes next unless one is)",
    ),
    "revoke_requests": _Instrument(
        "counter", "distlock.lock.revoke_requests", "{request}",
        "Release requests (request_release, or Curator's Revoker) the holders of this process got",
    ),
    "renewals": _Instrument(
        "counter", "distlock.lock.renewals", "{round_trip}",
        "Renewal round trips (each renews every lease due, in one batch), by outcome (ok, error)",
    ),
    "count_downs": _Instrument(
        "counter", "distlock.latch.count_downs", "{count_down}",
        "Latch count-downs by outcome (zero: the count is at zero after it, counted: above)",
    ),
    "trips": _Instrument(
        "counter", "distlock.barrier.trips", "{trip}",
        "Barrier generations tripped, each counted once, by the process whose arrival made the parties",
    ),
    "renew_duration": _Instrument(
        "histogram", "distlock.lock.renew.duration", "s",
        "How long a renewal round trip took, by outcome (ok, error)", ROUND_TRIP_SECONDS,
    ),
}  # fmt: skip


class _Instruments:
    """The sink (``_events.Sink``) that turns a store's events into metrics and acquire spans."""

    # one attribute per row of ``_INSTRUMENTS``
    acquire_duration: metrics.Histogram
    acquires: metrics.Counter
    hold_duration: metrics.Histogram
    held: metrics.UpDownCounter
    losses: metrics.Counter
    at_risk: metrics.Counter
    revoke_requests: metrics.Counter
    renewals: metrics.Counter
    count_downs: metrics.Counter
    trips: metrics.Counter
    renew_duration: metrics.Histogram

    def __init__(self, meter: metrics.Meter, tracer: trace.Tracer | None, lock_names: bool) -> None:
        self._tracer = tracer
        self._lock_names = lock_names
        for attribute, instrument in _INSTRUMENTS.items():
            setattr(self, attribute, instrument.create(meter))

    def _lock(self, f: Mapping[str, Any]) -> dict[str, Any]:
        attributes = {BACKEND: f["backend"], KIND: f["kind"]}
        if self._lock_names:
            attributes[NAME] = f["lock"]
        if "client_name" in f:  # one value per store: no cardinality to fear
            attributes[CLIENT_NAME] = f["client_name"]
        return attributes

    def record(self, event: str, f: Mapping[str, Any]) -> None:
        if event in ("grant", "timeout", "error"):
            attributes = {**self._lock(f), OUTCOME: f["outcome"]}
            if "error" in f:
                attributes[ERROR_TYPE] = f["error"]
            self.acquires.add(1, attributes)
            self.acquire_duration.record(f["wait_ms"] / 1000.0, attributes)
            if event == "grant":
                self.held.add(1, self._lock(f))
        elif event in ("release", "lost"):
            lock = self._lock(f)
            if event == "lost":
                self.losses.add(1, {**lock, LOSS_REASON: f["cause"]})
            if f.get("held_ms") is not None:  # the holding's end (once, whichever of release and loss came first)
                outcome = "released" if event == "release" else "lost"
                self.hold_duration.record(f["held_ms"] / 1000.0, {**lock, OUTCOME: outcome})
                self.held.add(-1, lock)
        elif event == "at-risk":
            self.at_risk.add(1, self._lock(f))
        elif event == "revoke-requested":
            self.revoke_requests.add(1, self._lock(f))
        elif event == "count-down":
            self.count_downs.add(1, {**self._lock(f), OUTCOME: "zero" if f["count"] == 0 else "counted"})
        elif event == "trip":
            self.trips.add(1, self._lock(f))
        elif event in ("renew", "renew-failed"):
            attributes = {BACKEND: f["backend"], OUTCOME: "ok" if event == "renew" else "error"}
            if "client_name" in f:
                attributes[CLIENT_NAME] = f["client_name"]
            if "error" in f:
                attributes[ERROR_TYPE] = f["error"]
            self.renewals.add(1, attributes)
            self.renew_duration.record(f["ms"] / 1000.0, attributes)

    def acquiring(self, fields: Mapping[str, Any]) -> Any:
        return None if self._tracer is None else self._span(self._tracer, fields)

    @contextmanager
    def _span(self, tracer: trace.Tracer, fields: Mapping[str, Any]) -> Iterator[None]:
        # Current while the acquire runs, so that a driver's own spans (redis, psycopg instrumentation) nest in it.
        with tracer.start_as_current_span("distlock.acquire", attributes=self._lock(fields)) as span:
            try:
                yield
            finally:  # the acquire filled in its outcome before this runs (an exception is recorded by the span)
                span.set_attribute(OUTCOME, fields.get("outcome", "error"))
                if fields.get("fence") is not None:
                    span.set_attribute(FENCE, fields["fence"])
                if "error" in fields:
                    span.set_attribute(ERROR_TYPE, fields["error"])
                    # also for a cancellation, which the span itself does not mark (it is no Exception)
                    span.set_status(trace.Status(trace.StatusCode.ERROR, fields["error"]))


class Instrumentation:
    """What ``instrument`` attached; ``uninstrument`` detaches it (the instruments stay registered
    with the MeterProvider, and simply stop changing)."""

    def __init__(self, sink: _Instruments, stream: _events.Events | None) -> None:
        self._sink = sink
        self._stream = stream

    def uninstrument(self) -> None:
        if self._stream is None:
            _events.remove_global(self._sink)
        else:
            self._stream.remove(self._sink)


def instrument(
    store: Store | AsyncStore | None = None,
    *,
    meter_provider: metrics.MeterProvider | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    spans: bool = True,
    lock_names: bool = False,
) -> Instrumentation:
    """Report ``store``'s locks (``None``: every store of this process, open now or later) as OpenTelemetry
    metrics, and each acquire as a span.

    ``meter_provider`` / ``tracer_provider``: ``None`` uses OpenTelemetry's global providers (a no-op until
    the application sets them up). ``spans=False``: metrics only. ``lock_names=True`` adds the lock name as an
    attribute (``distlock.lock.name``) to every lock metric and span: one time series per name, so only
    with few, fixed names. Instrumenting one store twice counts everything twice.
    """
    if store is not None and not isinstance(store, (Store, AsyncStore)):
        raise ConfigError(f"instrument() takes a distlock store or None, not {type(store).__name__}")
    meter = metrics.get_meter("distlock", __version__, meter_provider=meter_provider)
    tracer = trace.get_tracer("distlock", __version__, tracer_provider=tracer_provider) if spans else None
    sink = _Instruments(meter, tracer, bool(lock_names))
    if store is None:
        _events.add_global(sink)
        return Instrumentation(sink, None)
    stream = store._acquirer.events
    stream.add(sink)
    return Instrumentation(sink, stream)

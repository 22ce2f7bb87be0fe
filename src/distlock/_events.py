"""The events of a lock's life: the one place they are emitted, to the log and to any sinks (``distlock.otel``).

Log records go to the ``distlock`` logger: DEBUG for each step (``wait``, ``grant``, ``timeout``, ``error``,
``renew``, ``release``, ``safe``; a latch's ``count-down``, a barrier's ``trip``), INFO for a release request a holder got (``revoke-requested``), WARNING for
a loss (``lost``), a holding at risk of one (``at-risk``) and a
failed renewal round trip (``renew-failed``). Every
record carries structured fields in ``extra`` for handlers and formatters that read them: ``event``, ``lock``
(the name), ``backend`` (the URL scheme: never the URL, so never a credential), ``client_name`` (the store's,
when it has one), and where they apply ``kind``,
``fence``, ``wait_ms``, ``held_ms``, ``left_s``, ``count``, ``ms``, ``reason``, ``cause``, ``error``. The messages say the
same in words (``distlock --debug`` shows them). A DEBUG event costs one level check when DEBUG is off and no
sink listens.

A *sink* (``Sink``) receives the same events with the same fields, whatever the log level: the
OpenTelemetry instruments of ``distlock.otel`` are one. Sinks are per store (``Events`` is one store's
stream) or process-wide (``add_global``). This module imports nothing beyond the standard library, so a
bare install never loads OpenTelemetry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager, ExitStack
from types import TracebackType
from typing import Any, Protocol

from ._core.timing import monotonic
from ._core.types import Claim

log = logging.getLogger("distlock")

#: why a holding was lost, as a short code (a metric attribute must have few values; the reason text has many)
EXPIRED = "expired"  # the local lease (or session) ran out before a renewal confirmed it
REFUSED = "refused"  # a renewal or extend() was refused: the lease was gone or taken on the server
REPORTED = "reported"  # the backend reported it: a watch saw it deleted, a session expired, a connection failed
CAPPED = "max_hold"  # held for the lock's max_hold: given up however renewals went
GONE = "gone"  # release(), resign(), proclaim() or owned() found it no longer held


class Sink(Protocol):
    """What receives the events besides the log. Called on the thread or task where the event happens, so
    it must be quick and must not block; an exception it raises is logged and otherwise ignored (a broken
    metrics pipeline must never break a lock)."""

    def record(self, event: str, fields: Mapping[str, Any]) -> None: ...

    def acquiring(self, fields: Mapping[str, Any]) -> AbstractContextManager[object] | None:
        """A context around one acquire (a span), or None. ``fields`` is filled in with the outcome
        (``outcome``, and ``fence`` or ``error``) before the context exits."""
        ...


_global: tuple[Sink, ...] = ()
_global_mutex = threading.Lock()


def add_global(sink: Sink) -> None:
    """Let ``sink`` receive the events of every store of this process, existing and future."""
    global _global
    with _global_mutex:
        _global = (*_global, sink)


def remove_global(sink: Sink) -> None:
    global _global
    with _global_mutex:
        _global = tuple(s for s in _global if s is not sink)


def metric_kind(claim: Claim) -> str:
    """The kind a metric reports: the claim's mode (``lock``, ``read``, ``write``, ``semaphore``), or
    ``election`` for a candidate."""
    return "election" if claim.value is not None else claim.mode.value


class Events:
    """One store's event stream: each event is logged, then given to the store's sinks and the global ones."""

    def __init__(self, backend: str, client_name: str | None = None) -> None:
        self.backend = backend
        #: the store's client name: a field of every event when set (``client_name``)
        self.client_name = client_name
        self._sinks: tuple[Sink, ...] = ()
        self._mutex = threading.Lock()

    def add(self, sink: Sink) -> None:
        with self._mutex:
            self._sinks = (*self._sinks, sink)

    def remove(self, sink: Sink) -> None:
        with self._mutex:
            self._sinks = tuple(s for s in self._sinks if s is not sink)

    def sinks(self) -> tuple[Sink, ...]:
        return self._sinks + _global if _global else self._sinks

    def quiet(self) -> bool:
        """Nobody would see a DEBUG event now (no sink, DEBUG off): the hot path then builds no fields."""
        return not self._sinks and not _global and not log.isEnabledFor(logging.DEBUG)

    def debug(self, event: str, message: str, *args: object, **fields: Any) -> None:
        """A DEBUG step of a lock's life with its fields (nothing is formatted unless DEBUG is on)."""
        self._common(fields)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(message, *args, extra={"event": event, **fields})
        self._tell(event, fields)

    def info(self, event: str, message: str, *args: object, **fields: Any) -> None:
        self._common(fields)
        log.info(message, *args, extra={"event": event, **fields})
        self._tell(event, fields)

    def warning(self, event: str, message: str, *args: object, exc_info: bool = False, **fields: Any) -> None:
        self._common(fields)
        log.warning(message, *args, exc_info=exc_info, extra={"event": event, **fields})
        self._tell(event, fields)

    def _common(self, fields: dict[str, Any]) -> None:
        fields["backend"] = self.backend
        if self.client_name is not None:
            fields["client_name"] = self.client_name

    def _tell(self, event: str, fields: Mapping[str, Any]) -> None:
        for sink in self.sinks():
            try:
                sink.record(event, fields)
            except Exception:  # see Sink
                log.exception("a distlock event sink failed on %r", event)

    def acquiring(self, claim: Claim) -> Acquiring:
        """The context of one acquire: ``with events.acquiring(claim) as a: ... a.granted(fence)``."""
        return Acquiring(self, claim)


class Acquiring:
    """One acquire from its start to its outcome: emits ``grant``, ``timeout`` or (on an exception) ``error``
    with the time waited, inside the sinks' contexts (their spans), which then see the outcome.

    Its fields are built only when something will see them (a sink at the start, or an event to emit): most
    acquires have neither, and this runs on every acquire."""

    __slots__ = ("_began", "_claim", "_events", "_f", "_stack")

    def __init__(self, events: Events, claim: Claim) -> None:
        self._events = events
        self._claim = claim
        self._f: dict[str, Any] | None = None
        self._stack: ExitStack | None = None
        self._began = 0.0

    @property
    def _fields(self) -> dict[str, Any]:
        f = self._f
        if f is None:
            claim = self._claim
            f = self._f = {"lock": claim.name, "backend": self._events.backend, "kind": metric_kind(claim)}
            if self._events.client_name is not None:
                f["client_name"] = self._events.client_name
        return f

    def __enter__(self) -> Acquiring:
        # from before the sinks' contexts (a span to start): the caller's timeout runs from before them too
        self._began = monotonic()
        sinks = self._events.sinks()
        if sinks:
            stack = ExitStack()
            for sink in sinks:
                try:
                    context = sink.acquiring(self._fields)
                    if context is not None:
                        stack.enter_context(context)
                except Exception:  # see Sink
                    log.exception("a distlock event sink failed on an acquire")
            self._stack = stack
        return self

    def _waited_ms(self) -> float:
        return round((monotonic() - self._began) * 1000.0, 3)

    def granted(self, fence: int | None) -> None:
        if self._stack is None and self._events.quiet():  # no sink's span to fill in, nobody listening
            return
        f = self._fields
        f.update(outcome="acquired", fence=fence, wait_ms=self._waited_ms())
        self._events.debug("grant", "acquired %r, fence %s, after %.1f ms", f["lock"], fence, f["wait_ms"], **f)

    def timed_out(self) -> None:
        f = self._fields
        f.update(outcome="timeout", wait_ms=self._waited_ms())
        self._events.debug("timeout", "not acquired %r within %.1f ms", f["lock"], f["wait_ms"], **f)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        if exc is not None and "outcome" not in self._fields:
            f = self._fields
            f.update(outcome="error", error=type(exc).__qualname__, wait_ms=self._waited_ms())
            self._events.debug("error", "acquire of %r failed: %s", f["lock"], f["error"], **f)
        if self._stack is not None:
            try:  # the acquire's own outcome stands: a sink can neither hide its exception nor add one
                self._stack.__exit__(exc_type, exc, tb)
            except Exception:  # see Sink
                log.exception("a distlock event sink failed after an acquire")
        return None

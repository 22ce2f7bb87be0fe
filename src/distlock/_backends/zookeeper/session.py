"""The ZooKeeper session behind a store: until when it is surely alive, and what kazoo says of its connection.

Liveness is the session, not a per-lock lease. It is judged from the last *answer* (``Wire.confirmed``), not
from kazoo's connection state: kazoo counts every request it sends as a heartbeat, so a process that keeps
sending into a dead link never goes SUSPENDED while the server expires its session (F17 in docs/safety.md).
``lease_end`` = the moment the last answered request was queued + the granted session timeout - the drift
margin. The liveness thread (one per store) sends a cheap request whenever nothing was answered for a
quarter of the session, and reports every holding lost once ``lease_end`` passed.

kazoo's connection listener (``on_state``) turns SUSPENDED / LOST / CONNECTED into the few events of
``SessionEvents``, which the backend hands on to its holdings, clean-up and waiting attempts; the
``suspend_grace`` timer and the ``lost_on=suspended`` policy live here too. ``SessionLog`` is the
logger kazoo writes through, which is how the session timeout the server granted is learned.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

from kazoo.exceptions import KazooException
from kazoo.loggingsupport import BLATHER
from kazoo.protocol.states import KazooState

from ..._core.text import seconds
from ..._core.timing import drift_margin, monotonic
from .wire import Wire

log = logging.getLogger("distlock")

#: the liveness thread makes sure some request was answered at least every session timeout / this
HEARTBEAT_DIVISOR = 4.0
#: the ``lost_on`` URL option: when holders are told ``lost``
LOST_ON = ("session", "suspended")


class SessionLog(logging.LoggerAdapter[logging.Logger]):
    """kazoo's own logger, passed through unchanged, that also notes the session timeout the server granted.

    kazoo keeps the negotiated timeout to itself and only logs it when a session starts; the server may have
    clamped the requested one (``min/maxSessionTimeout``), and ``suspend_grace`` must follow the real one.
    """

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.negotiated: float | None = None  # seconds

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level == BLATHER and isinstance(msg, str) and "negotiated session timeout" in msg and len(args) >= 3:
            try:
                self.negotiated = float(args[2]) / 1000.0
            except (TypeError, ValueError):
                pass
        super().log(level, msg, *args, **kwargs)


class SessionEvents(Protocol):
    """What the session tells the backend (from kazoo's threads or the liveness thread; must not block)."""

    def lose_all(self, reason: str) -> list[str]:
        """Report every holding lost; the paths of those not lost before."""

    def holding(self) -> bool:
        """Is something held and not yet reported lost?"""

    def replaced(self) -> None:
        """A new session: the old one's nodes are gone with it."""

    def reconnected(self) -> None:
        """The connection is back (same session or a new one)."""

    def answering_again(self) -> None:
        """The server answers again without a reconnection (a healed silent link)."""

    def changed(self) -> None:
        """Any change of the connection: waiting attempts look again."""


class Session:
    """The liveness and connection state of one kazoo client's session."""

    def __init__(
        self,
        wire: Wire,
        events: SessionEvents,
        session_timeout: float,
        session_log: SessionLog,
        suspend_grace: float | None,
        lost_on: str,
        owned: bool,
        started: float,
    ) -> None:
        self._wire = wire
        self._client = wire.client
        self._events = events
        self.session_timeout = session_timeout  # requested
        self._log = session_log
        self.suspend_grace = suspend_grace  # None: the session's own end decides
        self._lost_on = lost_on
        self.owned = owned  # False: the caller's client (connect(client=...)), never stopped or closed here
        self._closing = False
        self._suspend_timer: threading.Timer | None = None
        self._id = wire.session_id()
        self._beat_sent = started
        self._beat: Any = None  # the heartbeat request in flight (a kazoo async result)
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._liveness, name="distlock-zk-liveness", daemon=True)

    def start(self) -> None:
        """Listen to kazoo's connection states and start the liveness thread."""
        self._client.add_listener(self.on_state)
        self._thread.start()

    @property
    def granted_timeout(self) -> float:
        """The session timeout the server granted (it may clamp the requested one), in seconds."""
        return self._log.negotiated or self.session_timeout

    def lease_end(self) -> float:
        """When the session may have expired on the server: the moment the last request the server answered
        was queued (so sent no earlier), plus the granted session timeout, minus the drift margin.

        The server restarts a session's timeout on every request it receives, so an answered request sent
        at ``t`` keeps the session alive until at least ``t`` + timeout.
        """
        timeout = self.granted_timeout
        return self._wire.confirmed + timeout - drift_margin(timeout)

    # -- the liveness thread ---------------------------------------------------------------------------
    def _liveness(self) -> None:
        """Asks something cheap (``exists /``) whenever nothing else was answered for a quarter of the session
        timeout, and reports every holding lost once ``lease_end`` passed (the store's lease clock does the
        same; whichever is first). Requests only, never a wait for an answer: a silent server does not hold
        this thread up."""
        w, client, wake = self._wire, self._client, self._wake
        while not self._closing:
            timeout = self.granted_timeout
            beat = timeout / HEARTBEAT_DIVISOR
            now = monotonic()
            end = w.confirmed + timeout - drift_margin(timeout)
            if now >= end:
                lost = self._events.lose_all(
                    f"no answer from ZooKeeper for {seconds(now - w.confirmed)} of a {seconds(timeout)} session: "
                    "the server may have expired it"
                )
                for path in lost:  # if the server answers again with this session, the nodes go (no wait)
                    try:
                        w.send(client.delete_async, path).rawlink(w.on_reply)
                    except KazooException:
                        pass
            elif now - w.confirmed < beat:
                self._events.answering_again()
            # One heartbeat in flight at most: a request sent while the last one is unanswered would make kazoo
            # count the link as alive (it suspends a connection only after a silence in *both* directions),
            # and so keep it from moving to another member before the session ends.
            idle = self._beat is None or self._beat.ready()
            if idle and now - w.confirmed >= beat and now - self._beat_sent >= beat and client.connected:
                self._beat_sent = now
                try:
                    self._beat = w.send(client.exists_async, "/")
                    self._beat.rawlink(self._on_beat)
                except KazooException:
                    pass
            holding = self._events.holding()
            if self._beat is not None and not self._beat.ready():
                nxt = now + beat  # its answer wakes this thread (_on_beat)
            else:
                nxt = max(w.confirmed, self._beat_sent) + beat
            if holding:
                nxt = min(nxt, end)
            wake.wait(min(max(0.005, nxt - monotonic()), beat))
            wake.clear()

    def _on_beat(self, result: Any) -> None:
        """The heartbeat's answer (kazoo's completion thread): record it and let the liveness thread go on."""
        self._wire.on_reply(result)
        self._wake.set()

    # -- kazoo's connection states ---------------------------------------------------------------------
    def on_state(self, state: str) -> None:
        """kazoo's connection listener (its own thread; must not block)."""
        if self._closing:
            return
        events = self._events
        if state == KazooState.SUSPENDED:
            if self._lost_on == "suspended":  # Curator's standard policy: a suspended connection is a lost lock
                events.lose_all("ZooKeeper connection suspended (lost_on=suspended)")
            elif self.suspend_grace is not None:
                log.warning(
                    "ZooKeeper connection suspended: holders may lose their locks; lost in %.1fs unless it returns",
                    self.suspend_grace,
                )
                self._cancel_timer()
                timer = threading.Timer(self.suspend_grace, self._suspended_too_long)
                timer.daemon = True
                self._suspend_timer = timer
                timer.start()
            else:
                log.warning("ZooKeeper connection suspended: holders may lose their locks if it does not return")
        elif state == KazooState.LOST:
            self._cancel_timer()
            events.lose_all("ZooKeeper session expired or closed")
        elif state == KazooState.CONNECTED:
            self._cancel_timer()
            session = self._wire.session_id()
            if session != self._id:
                events.lose_all("ZooKeeper session replaced by a new one")
                self._id = session
                events.replaced()
            events.reconnected()
            self._wake.set()  # a heartbeat now: the reconnection itself is not seen as an answer
        events.changed()

    def _cancel_timer(self) -> None:
        timer, self._suspend_timer = self._suspend_timer, None
        if timer is not None:
            timer.cancel()

    def _suspended_too_long(self) -> None:
        if self._client.state != KazooState.CONNECTED and not self._closing:
            self._events.lose_all(
                f"ZooKeeper connection down for {self.suspend_grace:.1f}s: the session may be expired"
            )

    # -- closing ---------------------------------------------------------------------------------------
    def stop(self) -> None:
        """The store closes: no more events, the liveness thread ends."""
        self._closing = True
        self._wake.set()
        self._cancel_timer()

    def release_client(self) -> None:
        """Blocking: stop and close our own client; from the caller's client only our listener goes."""
        if not self.owned:
            self._client.remove_listener(self.on_state)
            return
        try:
            self._client.stop()
        finally:
            self._client.close()

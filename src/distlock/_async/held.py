"""What a holder can know about its holding without asking the server.

* ``Lost``: the ``lost`` signal (a flag, and an event true to the lease clock: ``Clocked``).
* ``Risk``: the ``at_risk`` warning that comes before a loss: set by the lease clock when less than
  ``AT_RISK_SHARE`` of a holding's lease is left (a renewal failed or is still unanswered; on a session
  backend, the server has not answered for half its timeout), cleared when a renewal moves the end again.
* ``LeaseView``: the part of a lock's and an election's API that reads them: ``deadline``, ``ttl_left``,
  ``check(margin)``, ``at_risk`` and ``on_at_risk``, and the revocation requests (``revoke_requested``,
  ``revoke_reason``, ``on_revoke``: someone asked the holder to let go, ``Store.request_release``). Written
  once for both.

None of it does I/O: each reads the lease clock's figures (``clock.py``), so a holder may call them right
before each side effect.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _idiom_async as idiom
from .. import _rt_async as rt
from .._core.text import seconds
from .._errors import ConfigError, LockLost, NotHeld

if TYPE_CHECKING:
    from .acquirer import AsyncAcquirer
    from .clock import Holding

#: ``at_risk`` is set once less than this share of a holding's lease is left: the renewal sent with two
#: thirds left has failed or is still unanswered (or a session's server has not answered for half its
#: timeout), so the holder hears of the trouble half a lease before ``lost``
AT_RISK_SHARE = 0.5

LostCallback = Callable[[Any], object]
RiskCallback = Callable[[Any], object]
#: ``on_revoke`` callbacks get the request's reason ("" when none was given, e.g. Curator's ``Revoker``)
RevokeCallback = Callable[[str], object]


class Flag:
    """A flag, and the event a caller waits on, made only when someone asks for it (``_event_of``): most
    holdings are released without anyone waiting on their loss or risk, and an event is the dearest part of
    a new holding (a lock and a condition, about 1.6 us of the 18 us an uncontended acquire + release costs
    the lock layer on the project's VM).

    ``set`` (the clock's thread, the renewer's, a driver's) may race ``_event_of`` (the caller's): ``set``
    writes the flag before it reads the event, ``_event_of`` publishes the event before it reads the flag, so
    whichever of the two comes second sets the event. Two callers making the event at once take a mutex."""

    __slots__ = ("_event", "_set")
    _making = threading.Lock()

    def __init__(self) -> None:
        self._set = False
        self._event: rt.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        event = self._event
        if event is not None:
            event.set()

    def _event_of(self, make: Callable[[], rt.Event]) -> rt.Event:
        event = self._event
        if event is None:
            with Flag._making:
                event = self._event
                if event is None:
                    event = self._event = make()
            if self._set:
                event.set()
        return event


class Lost(Flag):
    """A holding's ``lost`` signal; its event is true to the lease clock (``Clocked``)."""

    __slots__ = ()

    def event(self, expire: Callable[[], object]) -> rt.Event:
        """The event that is set when the holding is lost (already set if it was); ``expire`` loses the
        holding now if its lease end has passed (``LeaseClock.expire``), for the event's ``is_set()``."""
        return self._event_of(lambda: Clocked(expire))


class Clocked(rt.Event):
    """The ``lost`` event a caller holds, true to the clock: ``is_set()`` is True once the local lease end has
    passed, even before the clock's worker has run. That worker needs the GIL (a thread) or a turn of the
    event loop (a task) to set the event, and a process resumed after a pause, a thread that held the CPU or a
    handler that blocked the loop past the lease would otherwise read False after the lease was over -- and
    write. A reader that finds the lease over loses the holding there and then, as the worker would (the
    callbacks still run off the reader's path); ``wait()`` is woken by the worker as before."""

    def __init__(self, expire: Callable[[], object]) -> None:
        super().__init__()
        self._expire = expire

    def is_set(self) -> bool:
        if not super().is_set():
            self._expire()
        return super().is_set()


class Risk(Flag):
    """A holding's ``at_risk`` flag and its event. Set and cleared by the lease clock's worker only."""

    __slots__ = ()

    def clear(self) -> None:
        self._set = False
        event = self._event
        if event is not None:
            event.clear()

    def event(self) -> rt.Event:
        return self._event_of(rt.Event)


class Revoke(Risk):
    """A holding's revocation flag (someone asked its holder to release it: ``Store.request_release``), its
    event (made only when asked for, as ``Risk``'s), and the last request's reason and identity. Set only, never
    cleared: a new holding has a new one. ``seen`` is the backend's identity of the last request told (a
    request a renewal carries back again and again is told once)."""

    __slots__ = ("reason", "seen")

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None
        self.seen = ""


class LeaseView:
    """The lease, known locally: what a lock or an election tells its holder with no I/O. The class that
    mixes it in gives ``_acquirer`` (the store's acquirer), ``name``, ``_callbacks`` and ``_risk_callbacks``
    (for ``on_lost`` and ``on_at_risk``) and ``_viewed()`` (the calling owner's current holding, or None)."""

    _acquirer: AsyncAcquirer
    name: str
    _callbacks: list[LostCallback]
    _risk_callbacks: list[RiskCallback]
    _revoke_callbacks: list[RevokeCallback]
    _idle: rt.Event | None = None

    def _idle_event(self) -> rt.Event:
        """What ``lost``, ``at_risk`` and ``revoke_requested`` give with nothing held: an event of this object
        that nothing sets."""
        if self._idle is None:
            self._idle = rt.Event()
        return self._idle

    def _lost_event(self, holding: Holding | None) -> rt.Event:
        return self._idle_event() if holding is None else self._acquirer.lost_event(holding)

    def on_lost(self, callback: LostCallback) -> LostCallback:
        """Register ``callback(lock)`` (``callback(election)`` on an election), called once per lost holding,
        off the critical path."""
        self._callbacks.append(callback)
        return callback

    def _viewed(self) -> Holding | None:
        raise NotImplementedError

    @property
    def deadline(self) -> float | None:
        """When the current holding's lease ends on this process's clock (``time.monotonic()`` seconds): the
        moment ``lost`` fires unless a renewal moves it first (on ZooKeeper: the session's). None when not
        held."""
        holding = self._viewed()
        return None if holding is None else self._acquirer.clock.deadline(holding)

    @property
    def ttl_left(self) -> float | None:
        """Seconds until ``deadline`` (0.0 once lost); None when not held."""
        holding = self._viewed()
        return None if holding is None else self._acquirer.lease_left(holding)

    def check(self, margin: float = 0.0) -> float:
        """The seconds the current holding's lease has left, if more than ``margin``; else ``LockLost`` (and
        ``NotHeld`` when nothing is held). No I/O: call it right before each side effect, with a margin that
        covers the effect (``lock.check(2.0)`` before a call that takes up to 2 s)."""
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < math.inf:
            raise ConfigError(
                f"check(margin) takes the seconds an effect needs (>= 0, finite), not {margin!r}",
                name=self.name,
                backend=self._acquirer.scheme,
            )
        holding = self._viewed()
        if holding is None:
            raise NotHeld("not held by this owner", name=self.name, backend=self._acquirer.scheme)
        left = self._acquirer.lease_left(holding)
        if holding.lost.is_set():
            raise LockLost(f"lost: {holding.lost_reason}", name=self.name, backend=self._acquirer.scheme)
        if left <= margin:
            raise LockLost(
                f"{seconds(left)} of the lease left, not more than the margin of {seconds(margin)}",
                name=self.name,
                backend=self._acquirer.scheme,
            )
        return left

    def lease_timeout(self) -> idiom.LeaseTimeout:
        """asyncio: ``async with lock.lease_timeout():`` runs the block as ``asyncio.timeout()`` does, with the
        current holding's local lease end as its moment: when the holding is lost (the lease ran out before a
        renewal, a renewal was refused, the backend reported it) the block is cancelled at its next ``await``
        and raises ``LockLost``. Renewals move the end, so the block runs as long as the lease lives. (Sync
        code: ``TypeError``; call ``check()`` before each effect instead.)"""
        holding = self._viewed()
        if holding is None:
            raise NotHeld(
                "lease_timeout() needs the lock held by this owner", name=self.name, backend=self._acquirer.scheme
            )
        core = self._acquirer

        def lost() -> Exception:
            return LockLost(
                f"lost inside lease_timeout(): {holding.lost_reason or 'the lease ran out'}",
                name=self.name,
                backend=core.scheme,
            )

        return idiom.LeaseTimeout(holding, lambda: core.lease_left(holding), core.lost_event(holding), lost)

    @property
    def at_risk(self) -> rt.Event:
        """Set while the current holding is at risk (less than ``AT_RISK_SHARE`` of its lease left with no
        renewal confirmed: ``lost`` comes next unless one is); cleared when a renewal succeeds."""
        holding = self._viewed()
        return self._idle_event() if holding is None else holding.risk.event()

    def on_at_risk(self, callback: RiskCallback) -> RiskCallback:
        """Register ``callback(lock)``, called (off the critical path) each time a holding becomes at risk."""
        self._risk_callbacks.append(callback)
        return callback

    @property
    def revoke_requested(self) -> rt.Event:
        """Set once someone asked the current holding's holder to release it (``Store.request_release``, or
        Curator's ``Revoker`` on ZooKeeper): a request, not a loss -- the lock is still held until the holder
        releases it. A new holding starts with it clear. How soon a request arrives: docs/getting-started.md,
        "Revocation"."""
        holding = self._viewed()
        return self._idle_event() if holding is None else holding.revoke.event()

    @property
    def revoke_reason(self) -> str | None:
        """The reason of the last release request the current holding got ("" if none was given), else None."""
        holding = self._viewed()
        return None if holding is None else holding.revoke.reason

    def on_revoke(self, callback: RevokeCallback) -> RevokeCallback:
        """Register ``callback(reason)``, called (off the critical path, as ``on_at_risk``'s) once per release
        request a holding of this object gets. The holder decides what to do: nothing is released for it."""
        self._revoke_callbacks.append(callback)
        return callback

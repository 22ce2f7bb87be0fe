"""Who waits on which wake-up channel of a Redis store, and which message wakes whom (no I/O, no locking).

The store's pub/sub ``Listener`` (``_async/listener.py``) reads the messages; this registry decides whom each
one wakes. It exists apart so that the routing rule (a waiter takes its own token or ``*``, an observer takes
every message, a hand-over is kept for its waiter's next try) is plain data and functions, the same for both
sides and testable without a server. The listener holds its mutex around every call: its reader and the
waiters' threads share these maps on the threaded side.
"""

from __future__ import annotations

from collections.abc import Callable

from . import calls as rc

#: what wakes one waiter (or observer): its waker's ``notify``
Notify = Callable[[], None]


class Waiters:
    """The waiters and observers of each channel (by the name's channel: a reply channel's messages are its
    name's), the hand-overs pushed to waiters and not taken yet, and since when each channel has nobody.

    A waiter is registered under its token and woken by a message carrying that token or ``*``; an election's
    observer is registered under a key of its own and woken by EVERY message on the channel (a release's
    waiter token, ``*``, and the ``NOTICE`` of a new leader or value, which wakes no waiter: it is nobody's
    token)."""

    def __init__(self) -> None:
        self.waiters: dict[str, dict[str, Notify]] = {}
        self.observers: dict[str, dict[str, Notify]] = {}
        #: hand-overs pushed to registered waiters and not taken yet, by token (``take_grant``)
        self.grants: dict[str, rc.HandOver] = {}
        #: channels nobody waits on, with the time the last one left (their subscriptions linger)
        self.idle: dict[str, float] = {}

    def add(self, channel: str, token: str, notify: Notify, observer: bool) -> None:
        (self.observers if observer else self.waiters).setdefault(channel, {})[token] = notify
        self.idle.pop(channel, None)

    def remove(self, channel: str, token: str, observer: bool, now: float) -> None:
        """Forget a waiter (and a hand-over it did not take) or an observer; a channel left with nobody is
        idle from ``now``."""
        if not observer:
            self.grants.pop(token, None)
        groups = self.observers if observer else self.waiters
        group = groups.get(channel)
        if group is not None:
            group.pop(token, None)
            if not group:
                del groups[channel]
                if not self.watched(channel):
                    self.idle[channel] = now

    def watched(self, channel: str) -> bool:
        """Whether a waiter or an observer is registered on ``channel``."""
        return channel in self.waiters or channel in self.observers

    def take_grant(self, token: str) -> rc.HandOver | None:
        """The hand-over a release pushed to the waiter ``token``, once; else None."""
        return self.grants.pop(token, None)

    def idle_past(self, now: float, linger: float) -> list[str]:
        """The channels nobody waited on for more than ``linger`` seconds, forgotten here (to unsubscribe)."""
        stale = [c for c, t in self.idle.items() if now - t > linger and not self.watched(c)]
        for c in stale:
            del self.idle[c]
        return stale

    def everyone(self) -> list[Notify]:
        """Every waiter and observer of every channel (messages may have been missed: all re-check)."""
        return [n for groups in (self.waiters, self.observers) for g in groups.values() for n in g.values()]

    def of(self, name: str) -> list[Notify]:
        """Every waiter and observer of the name's channel ``name``."""
        return [*self.waiters.get(name, {}).values(), *self.observers.get(name, {}).values()]

    def message(self, name: str, token: str) -> list[Notify]:
        """Whom a message carrying ``token`` on the name's channel ``name`` wakes: a waiter only its token
        or ``*`` (never an observers' ``NOTICE``), observers every message. A hand-over
        (``token|fence|stamp``) to a registered waiter is kept for its next try, which takes it without a
        round trip."""
        group = self.waiters.get(name, {})
        watching = list(self.observers.get(name, {}).values())
        handed = rc.handed_over(token) if "|" in token else None
        if handed is not None:
            token = handed[0]
            if token in group:
                self.grants[token] = handed[1]
        if token == "*":
            return [*group.values(), *watching]
        if token in group:
            return [group[token], *watching]
        return watching

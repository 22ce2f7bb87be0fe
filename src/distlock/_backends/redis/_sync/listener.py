# GENERATED from src/distlock/_backends/redis/_async/listener.py by scripts/gen_sync.py: edit that file, not this one.
"""The pub/sub ``Listener`` that turns Redis wake-up messages into local wake-ups (one pub/sub connection
per server and store; the waiters of ``attempt.py`` register on it). It reads the connection that
``subscriptions.py`` keeps subscribed: who reads it when (the read role, handed from waiter to waiter, and the
background reader while nobody waits), what a failed read does, and the move of the connection after a
failover. Written once for both sides (generated for the sync side: there the reader is a daemon thread,
here an asyncio task)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .... import _rt_sync as rt
from .. import _driver_sync as drv
from .subscriptions import Subscriptions

log = logging.getLogger("distlock")

#: the background reader's read while no waiter has come for a while, and while one came lately: a waiter that
#: comes while it reads waits at most that long for the read role (a read in progress cannot be cut short)
COLD_SLICE = 0.5
HOT_SLICE = 0.02
#: how long after a waiter came the background reader reads in short slices; and how long it leaves the
#: connection to the waiters at most before it looks again (it is kicked sooner when an observer or a pending
#: subscription needs a reader)
HOT = 1.0
NAP = 1.0
#: after a read failed (the connection dropped), nobody reads for this long (redis-py reconnects on the next
#: read): a dead server costs a reconnect attempt per pause, not a busy loop
PAUSE = 0.2
#: the background reader's place in the read role (the waiters' is their Waker)
_BACKGROUND = object()
#: who may read a connection now, for a waiter (``Listener._take_role``)
MINE, THEIRS, LATER = "mine", "theirs", "later"


class Listener(Subscriptions):
    """One pub/sub connection per server and store, read by its waiters: routes wake-up messages to them.

    What is subscribed, the generations and the routing are ``Subscriptions``'s; an election's observer
    registers with ``observer=True`` under a key of its own. ``watch`` registers and subscribes, and returns
    only once the server has confirmed the subscription; ``wait`` waits for a waiter's wake-up and reads the
    connection meanwhile.

    One hop from the push to the waiter: the thread (task) that reads the connection is, whenever one waits,
    a waiter itself (``wait``; leader/followers): the first waiter takes the *read role*, reads and
    dispatches every message (its own wakes it without a switch to another thread; the others' wake them),
    and when it returns it hands the role to the next waiter (a ``kick``). The background reader reads only
    while no waiter waits: subscription confirmations and pushes for observers, reconnects, the cluster and
    Sentinel moves. When the last waiter leaves, the background reader is not woken (a thread switch per
    acquire): it looks again within ``NAP`` (at once when an observer or a pending subscription needs a
    reader); meanwhile messages wait in the socket for the next reader, and a waiter that reads first learns
    of a drop at its first read, before it sleeps. The role's state is under ``Subscriptions``'s ``_state``
    guard too.
    """

    def __init__(self, client: drv.AnyClient) -> None:
        super().__init__(client)
        self._fresh_reading()

    def after_fork(self) -> None:
        """The parent's connection is forgotten (``Subscriptions.after_fork``), and so are its readers: none
        of its threads is in the child, and one left holding the read role would keep the child's waiters
        from reading."""
        super().after_fork()
        self._fresh_reading()

    def _fresh_reading(self) -> None:
        self._reader: rt.Background | None = None
        #: who reads the connection now (a waiter's Waker, _BACKGROUND or None) and the waiters inside
        #: ``wait`` in arrival order (see the class docstring)
        self._role: object | None = None
        self._contenders: list[rt.Waker] = []
        self._nap: rt.Waker | None = None  # the background reader's, while it leaves reading to the waiters
        self._hot_until = 0.0
        self._pause_until = 0.0

    def watch(
        self, channel: str, token: str, notify: Callable[[], None], timeout: float, observer: bool = False
    ) -> bool:
        """Register a waiter (or observer) and subscribe; True once the subscription is confirmed (False:
        rely on hints)."""
        self.add(channel, token, notify, observer)
        if self.live(channel) is not None:
            return True
        with self._io:
            event, subscribed = self._subscribe(channel)
            if event is None:
                return False
            if self._reader is None or not self._reader.alive():
                self._nap = rt.Waker()
                self._reader = rt.Background(self._run, "distlock-redis-listener")
            elif subscribed and self._nap is not None:
                self._nap.kick()  # the confirmation needs a reader; the waiters may all be gone
        return rt.wait_event(event, timeout)

    def wait(self, waker: rt.Waker, timeout: float) -> bool:
        """Wait until ``waker`` is notified (True) or ``timeout`` passes (False), reading the connection
        meanwhile whenever nobody else does (the read role, see the class docstring). A waiter registered
        with ``add`` or ``watch`` under ``waker.notify`` waits here; leaving (also cancelled) passes
        the role on."""
        end = time.monotonic() + timeout
        self._contend(waker)
        try:
            while not waker.take():
                now = time.monotonic()
                if now >= end:
                    return False
                if self._take_role(waker, now) is not MINE:
                    left = end - now if now >= self._pause_until else min(end - now, self._pause_until - now)
                    if waker.wait(left):
                        return True
                    continue
                self._read(end - now)
            return True
        finally:
            self._leave(waker)

    def _contend(self, waker: rt.Waker) -> None:
        """``waker``'s thread (task) waits here: it takes the read role when that is free (``_leave``
        kicks the first waiter in line), and the background reader leaves the role to it."""
        with self._state:
            self._contenders.append(waker)
            self._hot_until = time.monotonic() + HOT

    def _take_role(self, waker: rt.Waker, now: float) -> str:
        """Take the read role for ``waker`` if it is free and the connection can be read now: ``MINE`` if
        ``waker`` holds it, ``THEIRS`` if another reader does (it notifies ``waker``), ``LATER`` if nobody
        may read now (paused after a failure, moving, closed)."""
        with self._state:
            can = self._pubsub is not None and not self._closed and not self._stale and now >= self._pause_until
            if can and self._role is None:
                self._role = waker
            if not can and self._role is waker:
                self._role = None  # paused or moving: the role waits for a reader that can read
            if can and self._role is waker:
                return MINE
            return THEIRS if can else LATER

    def _leave(self, who: object) -> None:
        """``who`` stops reading (a waiter also stops waiting): the role goes to the first waiter, else it
        stays free for the background reader (kicked only when an observer or a subscription needs it)."""
        wake: rt.Waker | None = None
        with self._state:
            if isinstance(who, rt.Waker) and who in self._contenders:
                self._contenders.remove(who)
            if self._role is who:
                self._role = None
            if self._role is None:
                if self._contenders:
                    wake = self._contenders[0]
                elif who is not _BACKGROUND and self._needs_reader():
                    wake = self._nap
        if wake is not None:
            wake.kick()

    def _read(self, timeout: float) -> None:
        """One read of the connection by whoever holds the read role, and its message dispatched. A broken
        connection: everyone re-checks, nobody reads for ``PAUSE``, and a cluster's connection moves."""
        pubsub = self._pubsub
        # small socket reads (``drv.tune``), looked at before each read: redis-py reconnects a pub/sub on its own
        drv.tune(pubsub.connection)
        try:
            msg = pubsub.get_message(ignore_subscribe_messages=False, timeout=timeout)
        except drv.BROKEN as err:
            if self._closed or pubsub is not self._pubsub:
                # closed, or ``_move`` replaced it under us (a failover): it already made everyone re-check
                return
            log.debug("wake-up listener: %s (reconnecting)", err)
            with self._state:
                self._pause_until = time.monotonic() + PAUSE
            if isinstance(self._client, drv.ClusterClient):
                self._stale = True  # the background reader moves it, after the pause
            self._lost_messages()
            if self._nap is not None:
                self._nap.kick()
            return
        if msg is not None:
            self._dispatch(msg)

    def _run(self) -> None:
        """The background reader: reads while no waiter waits (see the class docstring)."""
        nap = self._nap
        assert nap is not None
        while not self._closed:
            if self._stale:
                rt.sleep(PAUSE)
                self._move()
                continue
            now = time.monotonic()
            with self._state:
                mine = self._role is None and not self._contenders and now >= self._pause_until
                if mine:
                    self._role = _BACKGROUND
                hot = now < self._hot_until
            if not mine:
                nap.wait(NAP if now >= self._pause_until else self._pause_until - now)
                continue
            try:
                self._read(HOT_SLICE if hot else COLD_SLICE)
            finally:
                self._leave(_BACKGROUND)

    def _wake_reader(self) -> None:
        """The connection can be read again (a move subscribed everything anew): if nobody holds the read role,
        the first waiter takes it. A waiter that came while the move kept failing waits without reading and
        the background reader leaves the connection to waiters: without this, the new subscription's
        confirmation and any push behind it waited for a waiter's slice to end (up to 2 s)."""
        with self._state:
            first = self._contenders[0] if self._role is None and self._contenders else None
        if first is not None:
            first.kick()

    def moved(self) -> None:
        """The server moved (a Sentinel failover): the pub/sub connection is made again where the client now
        points and every channel re-subscribed (now: closing the old one also ends the reader's wait on it);
        everyone re-checks meanwhile (messages may be lost)."""
        self._lost_messages()
        if self._pubsub is not None:
            self._move()

    def _move(self) -> None:
        """A new connection where the server now is (``_resubscribe``); once it has every subscription, a
        waiter reads it (``_wake_reader``)."""
        if self._resubscribe():
            self._wake_reader()

    def close(self) -> None:
        self._closed = True
        if self._nap is not None:
            self._nap.kick()
        if self._reader is not None:
            self._reader.cancel()  # asyncio: now; a thread sees ``_closed`` within its 0.5 s read
        self._close_connection()
        if self._reader is not None:
            self._reader.join(2.0)

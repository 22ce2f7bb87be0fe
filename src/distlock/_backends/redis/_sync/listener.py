# GENERATED from src/distlock/_backends/redis/_async/listener.py by scripts/gen_sync.py: edit that file, not this one.
"""The pub/sub ``Listener`` that turns Redis wake-up messages into local wake-ups (one pub/sub connection
per server and store; the waiters of ``attempt.py`` register on it). Written once for both sides (generated
for the sync side: there the reader is a daemon thread, here an asyncio task)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from .... import _rt_sync as rt
from ...._core import forks, ids
from .. import _driver_sync as drv
from .. import calls as rc
from .. import keys as rk

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


class Listener:
    """One pub/sub connection per server and store: routes wake-up messages to the local waiters.

    A waiter registers ``(channel, token, notify)``; a message carrying its token (or ``*``) calls
    ``notify``. An election's observer registers with ``observer=True`` under a key of its own: EVERY message
    on the channel calls it (a release's waiter token, ``*``, and the ``NOTICE``
    of a new leader or value, which in turn wakes no waiter: it is nobody's token). ``watch`` returns
    only once the server has confirmed the subscription. ``live`` tells whether a channel's subscription
    is confirmed, and in which *generation*: the generation changes whenever messages may have been missed
    (the connection dropped), and every waiter (and observer) is then notified to re-check. A caller that registered (``add``) while the channel was live, and finds the same
    generation after its re-check, cannot have missed a release in between. Channels stay subscribed for
    ``LINGER`` seconds after their last waiter left, so a busy lock is not re-subscribed per acquire.

    One hop from the push to the waiter: the thread (task) that reads the connection is, whenever one waits,
    a waiter itself (``wait``; leader/followers): the first waiter takes the *read role*, reads and
    dispatches every message (its own wakes it without a switch to another thread; the others' wake them),
    and when it returns it hands the role to the next waiter (a ``kick``). The background reader reads only
    while no waiter waits: subscription confirmations and pushes for observers, reconnects, the cluster and
    Sentinel moves. When the last waiter leaves, the background reader is not woken (a thread switch per
    acquire): it looks again within ``NAP`` (at once when an observer or a pending subscription needs a
    reader); meanwhile messages wait in the socket for the next reader, and a waiter that reads first learns
    of a drop at its first read, before it sleeps.

    Each name's channel comes with this connection's *reply channel* for the name (``reply``), subscribed
    with it: a waiter's try names it, and the release then pushes that waiter's wake-up or hand-over there, to
    this store alone; the name's channel carries what every store takes (``*``, an election's notices, and
    the wake-ups of waiters that gave no reply channel). A channel is live when both are.

    Two guards: ``_state`` for the maps, taken for a few dict operations and never across I/O (the reader
    and the waiters' threads share them on the sync side; on asyncio it is a no-op), and ``_io`` that puts
    the subscription changes in one order (held across their round trips).
    """

    LINGER = 10.0

    def __init__(self, client: drv.AnyClient) -> None:
        self._client = client
        self._fresh()
        forks.track(self)

    def after_fork(self) -> None:
        """A forked child reads no message of the parent's: the pub/sub connection (its socket, its
        subscriptions) and the reply channels' names are the parent's, and a child that read them would take
        the parent's waiters' wake-ups and hand-overs. Forgotten, never closed (an unsubscribe or a close
        would speak on the parent's socket); the child subscribes on a connection of its own, with reply
        channels of its own, when one of its waiters first waits."""
        forks.abandon(self._pubsub)
        self._fresh()

    def _fresh(self) -> None:
        self._pubsub: Any = None
        self._id = ids.new_token()[:16]  # names this connection's reply channels
        self._replies: dict[str, str] = {}  # reply channel -> the name's channel
        self._waiters: dict[str, dict[str, Callable[[], None]]] = {}
        #: hand-overs pushed to registered waiters and not taken yet, by token (``take_grant``)
        self._grants: dict[str, rc.HandOver] = {}
        self._observers: dict[str, dict[str, Callable[[], None]]] = {}
        self._confirmed: dict[str, rt.Event] = {}
        self._live: dict[str, int] = {}
        self._idle: dict[str, float] = {}
        self._gen = 0
        self._last_sweep = 0.0
        self._reader: rt.Background | None = None
        self._state = rt.StateGuard()
        self._io = rt.Mutex()
        self._closed = False
        self._stale = False  # cluster: the pub/sub connection must move (see _move)
        #: who reads the connection now (a waiter's Waker, _BACKGROUND or None) and the waiters inside
        #: ``wait`` in arrival order (see the class docstring)
        self._role: object | None = None
        self._contenders: list[rt.Waker] = []
        self._nap: rt.Waker | None = None  # the background reader's, while it leaves reading to the waiters
        self._hot_until = 0.0
        self._pause_until = 0.0

    def reply(self, channel: str) -> str:
        """This connection's reply channel for the name whose channel is ``channel`` (a try names it once
        ``live`` says the pair is subscribed)."""
        return rk.reply_channel(channel, self._id)

    def live(self, channel: str) -> int | None:
        """The generation of the confirmed subscriptions of the channel and its reply channel, or None if
        either is not subscribed now. Each confirmation takes the generation of its moment, so after a
        reconnect the larger one is what a caller compares."""
        with self._state:
            mine, replies = self._live.get(channel), self._live.get(self.reply(channel))
        return None if mine is None or replies is None else max(mine, replies)

    def add(self, channel: str, token: str, notify: Callable[[], None], observer: bool = False) -> None:
        """Register a waiter locally (no I/O): messages for ``token`` on ``channel`` call ``notify`` (an
        observer: every message does)."""
        with self._state:
            (self._observers if observer else self._waiters).setdefault(channel, {})[token] = notify
            self._idle.pop(channel, None)

    def watch(
        self, channel: str, token: str, notify: Callable[[], None], timeout: float, observer: bool = False
    ) -> bool:
        """Register a waiter (or observer) and subscribe; True once the subscription is confirmed (False:
        rely on hints)."""
        self.add(channel, token, notify, observer)
        if self.live(channel) is not None:
            return True
        with self._io:
            with self._state:
                if self._pubsub is None:
                    make: Any = self._client.pubsub
                    self._pubsub = make()
                event = self._confirmed.get(channel)
                subscribe = event is None
                reply = self.reply(channel)
                if event is None:
                    # the reply channel first (here and in every re-subscription, which keeps this order): its
                    # confirmation comes before the channel's, which is the one callers wait for
                    self._replies[reply] = channel
                    self._confirmed[reply] = rt.Event()
                    event = self._confirmed[channel] = rt.Event()
            if subscribe:
                try:
                    self._pubsub.subscribe(reply, channel)
                except RedisError as err:
                    log.debug("subscribe to %s failed: %s", channel, err)
                    with self._state:
                        self._confirmed.pop(channel, None)
                        self._confirmed.pop(reply, None)
                        self._replies.pop(reply, None)
                    return False
            if self._reader is None or not self._reader.alive():
                self._nap = rt.Waker()
                self._reader = rt.Background(self._run, "distlock-redis-listener")
            elif subscribe and self._nap is not None:
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
                elif who is not _BACKGROUND and (
                    self._observers or any(not e.is_set() for e in self._confirmed.values())
                ):
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

    def take_grant(self, token: str) -> rc.HandOver | None:
        """The hand-over a release pushed to the waiter ``token`` (it holds the name), once; else None."""
        with self._state:
            return self._grants.pop(token, None)

    def unwatch(self, channel: str, token: str, observer: bool = False) -> None:
        with self._state:
            if not observer:
                self._grants.pop(token, None)
            groups = self._observers if observer else self._waiters
            group = groups.get(channel)
            if group is not None:
                group.pop(token, None)
                if not group:
                    del groups[channel]
                    if channel not in self._waiters and channel not in self._observers:
                        self._idle[channel] = time.monotonic()
        self._sweep()

    def _sweep(self) -> None:
        """Unsubscribe channels nobody waited on for ``LINGER`` seconds (checked at most once a second)."""
        now = time.monotonic()
        if now - self._last_sweep < 1.0 or self._pubsub is None:
            return
        self._last_sweep = now
        with self._io:
            with self._state:
                stale = [
                    c
                    for c, t in self._idle.items()
                    if now - t > self.LINGER and c not in self._waiters and c not in self._observers
                ]
                replies = [self.reply(c) for c in stale]
                for c in stale + replies:
                    self._idle.pop(c, None)
                    self._confirmed.pop(c, None)
                    self._live.pop(c, None)
                    self._replies.pop(c, None)
            if stale:
                with contextlib.suppress(RedisError, OSError):
                    self._pubsub.unsubscribe(*stale, *replies)

    def moved(self) -> None:
        """The server moved (a Sentinel failover): the pub/sub connection is made again where the client now
        points and every channel re-subscribed (now: closing the old one also ends the reader's wait on it);
        everyone re-checks meanwhile (messages may be lost)."""
        self._lost_messages()
        if self._pubsub is not None:
            self._move()

    def _lost_messages(self) -> None:
        """The connection dropped: subscriptions are not confirmed until re-subscribed; everyone re-checks.

        A waiter inside ``watch`` waits on the confirmation it found there: the replaced one is set, so it
        returns now (to a re-check and a new watch on the new confirmation) instead of waiting out its
        subscribe timeout on an event nobody will set (after a failover, that cost the first hand-over on the
        new master up to a second)."""
        with self._state:
            self._gen += 1
            self._live.clear()
            stale = list(self._confirmed.values())
            for c in list(self._confirmed):
                self._confirmed[c] = rt.Event()
            everyone = [n for groups in (self._waiters, self._observers) for g in groups.values() for n in g.values()]
        for event in stale:
            event.set()
        for notify in everyone:
            notify()

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

    def _move(self) -> None:
        """Redis Cluster: the node under the pub/sub connection may be gone for good (its replica took
        over); Sentinel: the master changed (``moved``). Start a new pub/sub connection where the slot
        map (the sentinels) now points and subscribe every channel again; while that fails, refresh the
        slot map and try again on the next round."""
        with self._io:
            make: Any = self._client.pubsub
            new = make()
            with self._state:
                channels = list(self._confirmed)
            self._stale = False
            try:
                if channels:
                    # before the reader sees it: a read on a pub/sub that has not subscribed yet fails
                    # (redis.asyncio), which would count as one more lost connection and a pause
                    new.subscribe(*channels)
            except (RedisError, OSError, RuntimeError, RedisClusterException) as err:
                self._stale = True
                log.debug("wake-up listener: re-subscribe failed: %s (finding the server again)", err)
            old, self._pubsub = self._pubsub, new
            if old is not None:
                # the reader may be waiting on the old connection: end its read now (it then reads the new
                # one), not when its read times out (asyncio's close does not wake it)
                drv.interrupt(getattr(old, "connection", None))
                with contextlib.suppress(Exception):
                    old.close()
            if self._stale and isinstance(self._client, drv.ClusterClient):
                with contextlib.suppress(Exception):
                    cluster: Any = self._client
                    cluster.nodes_manager.initialize()
        if not self._stale:
            self._wake_reader()

    def _wake_reader(self) -> None:
        """The connection can be read again (a move subscribed everything anew): if nobody holds the read role,
        the first waiter takes it. A waiter that came while the move kept failing waits without reading and
        the background reader leaves the connection to waiters: without this, the new subscription's
        confirmation and any push behind it waited for a waiter's slice to end (up to 2 s)."""
        with self._state:
            first = self._contenders[0] if self._role is None and self._contenders else None
        if first is not None:
            first.kick()

    def _dispatch(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        channel = msg.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode()
        if not isinstance(channel, str):
            return
        wake: list[Callable[[], None]] = []
        with self._state:
            name = self._replies.get(channel, channel)  # a reply channel's messages are its name's
            group = self._waiters.get(name, {})
            watching = list(self._observers.get(name, {}).values())
            if kind == "subscribe":
                event = self._confirmed.get(channel)
                if event is not None:
                    if event.is_set():  # re-subscribed after a reconnect we did not see: messages may be lost
                        self._gen += 1
                    event.set()
                    self._live[channel] = self._gen
                    # Everyone re-checks under the live subscription: a waiter whose wait for it timed out
                    # (SUBSCRIBE_TIMEOUT; after a failover, while no sentinel named the new master yet) sleeps
                    # on hints, and a release made before the server had the subscription pushed to nobody
                    # (its next re-check came up to 2 s after the release).
                    wake = list(group.values()) + watching
            elif kind == "message":
                data = msg.get("data")
                token = data.decode() if isinstance(data, bytes) else str(data)
                handed = rc.handed_over(token) if "|" in token else None
                if handed is not None:
                    token = handed[0]
                    if token in group:  # kept for the waiter's next try, which takes it without a round trip
                        self._grants[token] = handed[1]
                # observers take every message; a waiter only its token or "*" (never an observers' NOTICE)
                if token == "*":
                    wake = list(group.values()) + watching
                elif token in group:
                    wake = [group[token], *watching]
                else:
                    wake = watching
        for notify in wake:
            notify()

    def close(self) -> None:
        self._closed = True
        if self._nap is not None:
            self._nap.kick()
        if self._reader is not None:
            self._reader.cancel()  # asyncio: now; a thread sees ``_closed`` within its 0.5 s read
        if self._pubsub is not None:
            # redis-py closes a pub/sub connection without waiting: over TLS that needs an abort to close now
            drv.abort_tls(getattr(self._pubsub, "connection", None))
            with contextlib.suppress(RedisError, OSError):
                self._pubsub.close()
        if self._reader is not None:
            self._reader.join(2.0)


class Group:
    """The listeners of a Redlock store, one per master, which its waiting threads read together.

    ``wait`` is ``Listener.wait`` over all of them. Where one thread can wait on several
    connections (``drv.READS_MANY``: the threaded side), ONE waiting thread at a time, the group's reader,
    takes the read role of every master's connection it can and reads them itself, with one ``poll`` over
    their sockets: a master's push then wakes it where it is read, not on that master's reader thread and
    then again here (one thread hop per push, not two; five masters push each hand-over). The store's other
    waiting threads wait on their wakers: the reader notifies them of their messages as any reader does, and
    when it leaves it kicks the first of them, which reads next. A role still held by a master's background
    reader (in the middle of a read) comes free within that read (``HOT_SLICE`` once a waiter came); until
    then that reader notifies the group's reader, which a wait on sockets does not see, so its waits are kept
    that short. On asyncio every reader is a task of the same event loop, with no hop to save: each waiter
    waits on its waker alone."""

    def __init__(self, listeners: Sequence[Listener]) -> None:
        self.listeners = list(listeners)
        self._state = rt.StateGuard()
        self._reader: rt.Waker | None = None  # the waiting thread that reads the masters now
        self._waiting: list[rt.Waker] = []  # every waiting thread, in arrival order
        forks.track(self)

    def after_fork(self) -> None:
        """None of the parent's waiting threads is in a forked child: one of them left as the reader would
        keep the child's waiters from reading until their deadlines."""
        self._state = rt.StateGuard()
        self._reader = None
        self._waiting = []

    def wait(self, waker: rt.Waker, timeout: float) -> bool:
        """Wait until ``waker`` is notified (True) or ``timeout`` passes (False)."""
        if not drv.READS_MANY:
            return waker.wait(timeout)
        end = time.monotonic() + timeout
        with self._state:
            self._waiting.append(waker)
        reading = False
        try:
            while not waker.take():
                now = time.monotonic()
                if now >= end:
                    return False
                if not reading:
                    with self._state:
                        if self._reader is None:
                            self._reader = waker
                        reading = self._reader is waker
                    if not reading:  # the reader tells us what is ours, and kicks us when it leaves
                        if waker.wait(end - now):
                            return True
                        continue
                    for one in self.listeners:
                        one._contend(waker)
                if self._read(waker, end, now):
                    return True
            return True
        finally:
            self._leave(waker, reading)

    def _read(self, waker: rt.Waker, end: float, now: float) -> bool:
        """One read, as the group's reader: of every connection whose role is ours (taken if free), for as
        long as nothing comes, the wait ends, a background reader may still notify us or a paused connection
        may be read again. True if ``waker`` was notified meanwhile (and that is consumed)."""
        states = [one._take_role(waker, now) for one in self.listeners]
        held = [one for one, st in zip(self.listeners, states, strict=True) if st is MINE]
        soon = end - now
        if THEIRS in states:
            soon = min(soon, HOT_SLICE)
        for one, st in zip(self.listeners, states, strict=True):
            if st is LATER and one._pause_until > now:  # a paused one is read again once its pause ends
                soon = min(soon, one._pause_until - now)
        if not held:
            return waker.wait(soon)
        for i in drv.readable([getattr(one._pubsub, "connection", None) for one in held], soon):
            held[i]._read(0.0)
        return False

    def _leave(self, waker: rt.Waker, reading: bool) -> None:
        if reading:
            for one in self.listeners:
                one._leave(waker)
        nxt: rt.Waker | None = None
        with self._state:
            self._waiting.remove(waker)
            if self._reader is waker:
                self._reader = None
                nxt = self._waiting[0] if self._waiting else None
        if nxt is not None:
            nxt.kick()

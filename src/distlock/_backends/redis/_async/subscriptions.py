"""The pub/sub connection of a Redis store's wake-up listener and what is subscribed on it, apart from who reads
it: connecting, subscribing a name's channels, lingering and unsubscribing, the generations that tell a waiter
whether it may have missed a message, re-subscribing everything where the server now is (a failover), and the
dispatch of a message to the waiters it wakes (``waiters.py``). The reading (the read role, the background
reader) is ``listener.py``'s ``Listener``, built on this; nothing here calls it. Written once for both sides
(generated for the sync side)."""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from .... import _rt_async as rt
from ...._core import forks, ids
from .. import _driver_async as drv
from .. import calls as rc
from .. import keys as rk
from ..waiters import Notify, Waiters

log = logging.getLogger("distlock")


class Subscriptions:
    """One pub/sub connection per server and store, and the wake-up channels subscribed on it.

    A waiter registers ``(channel, token, notify)`` (``add``; ``waiters.Waiters`` says which message wakes
    whom). ``live`` tells whether a channel's subscription is confirmed, and in which *generation*: the
    generation changes whenever messages may have been missed (the connection dropped), and every waiter (and
    observer) is then notified to re-check. A caller that registered (``add``) while the channel was live, and
    finds the same generation after its re-check, cannot have missed a release in between. Channels stay
    subscribed for ``LINGER`` seconds after their last waiter left, so a busy lock is not re-subscribed per
    acquire.

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
        self._fresh_connection()
        forks.track(self)

    def after_fork(self) -> None:
        """A forked child reads no message of the parent's: the pub/sub connection (its socket, its
        subscriptions) and the reply channels' names are the parent's, and a child that read them would take
        the parent's waiters' wake-ups and hand-overs. Forgotten, never closed (an unsubscribe or a close
        would speak on the parent's socket); the child subscribes on a connection of its own, with reply
        channels of its own, when one of its waiters first waits."""
        forks.abandon(self._pubsub)
        self._fresh_connection()

    def _fresh_connection(self) -> None:
        self._pubsub: Any = None
        self._id = ids.new_token()[:16]  # names this connection's reply channels
        self._replies: dict[str, str] = {}  # reply channel -> the name's channel
        self._waiters = Waiters()
        self._confirmed: dict[str, rt.Event] = {}
        self._live: dict[str, int] = {}
        self._gen = 0
        self._last_sweep = 0.0
        self._state = rt.StateGuard()
        self._io = rt.Mutex()
        self._closed = False
        self._stale = False  # cluster: the pub/sub connection must move (see _resubscribe)

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

    def add(self, channel: str, token: str, notify: Notify, observer: bool = False) -> None:
        """Register a waiter locally (no I/O): messages for ``token`` on ``channel`` call ``notify`` (an
        observer: every message does)."""
        with self._state:
            self._waiters.add(channel, token, notify, observer)

    def take_grant(self, token: str) -> rc.HandOver | None:
        """The hand-over a release pushed to the waiter ``token`` (it holds the name), once; else None."""
        with self._state:
            return self._waiters.take_grant(token)

    async def _subscribe(self, channel: str) -> tuple[rt.Event | None, bool]:
        """Subscribe the channel and its reply channel unless that is under way already; the caller holds
        ``_io``. Returns the confirmation to wait for (None: the subscribe failed) and whether a subscribe
        was sent now."""
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
                await self._pubsub.subscribe(reply, channel)
            except RedisError as err:
                log.debug("subscribe to %s failed: %s", channel, err)
                with self._state:
                    self._confirmed.pop(channel, None)
                    self._confirmed.pop(reply, None)
                    self._replies.pop(reply, None)
                return None, False
        return event, subscribe

    def _needs_reader(self) -> bool:
        """Whether somebody must read the connection although no waiter waits: an observer (its pushes), or
        a subscription not confirmed yet. The caller holds ``_state``."""
        return bool(self._waiters.observers) or any(not e.is_set() for e in self._confirmed.values())

    async def unwatch(self, channel: str, token: str, observer: bool = False) -> None:
        with self._state:
            self._waiters.remove(channel, token, observer, time.monotonic())
        await self._sweep()

    async def _sweep(self) -> None:
        """Unsubscribe channels nobody waited on for ``LINGER`` seconds (checked at most once a second)."""
        now = time.monotonic()
        if now - self._last_sweep < 1.0 or self._pubsub is None:
            return
        self._last_sweep = now
        async with self._io:
            with self._state:
                stale = self._waiters.idle_past(now, self.LINGER)
                replies = [self.reply(c) for c in stale]
                for c in stale + replies:
                    self._confirmed.pop(c, None)
                    self._live.pop(c, None)
                    self._replies.pop(c, None)
            if stale:
                with contextlib.suppress(RedisError, OSError):
                    await self._pubsub.unsubscribe(*stale, *replies)

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
            everyone = self._waiters.everyone()
        for event in stale:
            event.set()
        for notify in everyone:
            notify()

    async def _resubscribe(self) -> bool:
        """Redis Cluster: the node under the pub/sub connection may be gone for good (its replica took
        over); Sentinel: the master changed. Start a new pub/sub connection where the slot map (the
        sentinels) now points and subscribe every channel again; while that fails, refresh the slot map (the
        connection stays ``_stale``: try again on the next round). True if the new connection subscribed
        everything."""
        async with self._io:
            make: Any = self._client.pubsub
            new = make()
            with self._state:
                channels = list(self._confirmed)
            self._stale = False
            try:
                if channels:
                    # before the reader sees it: a read on a pub/sub that has not subscribed yet fails
                    # (redis.asyncio), which would count as one more lost connection and a pause
                    await new.subscribe(*channels)
            except (RedisError, OSError, RuntimeError, RedisClusterException) as err:
                self._stale = True
                log.debug("wake-up listener: re-subscribe failed: %s (finding the server again)", err)
            old, self._pubsub = self._pubsub, new
            if old is not None:
                # the reader may be waiting on the old connection: end its read now (it then reads the new
                # one), not when its read times out (asyncio's close does not wake it)
                drv.interrupt(getattr(old, "connection", None))
                with contextlib.suppress(Exception):
                    await old.aclose()
            if self._stale and isinstance(self._client, drv.ClusterClient):
                with contextlib.suppress(Exception):
                    cluster: Any = self._client
                    await cluster.nodes_manager.initialize()
        return not self._stale

    def _dispatch(self, msg: dict[str, Any]) -> None:
        """One message read from the connection: a subscription's confirmation makes its channel live (and
        every waiter of the name re-checks), a push wakes whom ``Waiters.message`` says."""
        kind = msg.get("type")
        channel = msg.get("channel")
        if isinstance(channel, bytes):
            channel = channel.decode()
        if not isinstance(channel, str):
            return
        wake: list[Notify] = []
        with self._state:
            name = self._replies.get(channel, channel)  # a reply channel's messages are its name's
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
                    wake = self._waiters.of(name)
            elif kind == "message":
                data = msg.get("data")
                wake = self._waiters.message(name, data.decode() if isinstance(data, bytes) else str(data))
        for notify in wake:
            notify()

    async def _close_connection(self) -> None:
        if self._pubsub is not None:
            # redis-py closes a pub/sub connection without waiting: over TLS that needs an abort to close now
            drv.abort_tls(getattr(self._pubsub, "connection", None))
            with contextlib.suppress(RedisError, OSError):
                await self._pubsub.aclose()

"""An election observer's wake-up (``RedisWatch``): the name's wake-up channel, on the one server or
cluster of a Redis store or on every Redlock master, through the store's pub/sub ``Listener``.

What is published there that an observer needs: every release of a leader and every grant of a candidate
(the election ``NOTICE``, from the scripts, when the holder's record carries a
value), every proclaim (the same NOTICE), a break (``*``) and the wake-ups of waiters (their tokens). The
observer takes them all; a waiter's listener takes only its own token or ``*``, so a NOTICE wakes no waiter.
What is never published is a lease that ran out (a crashed leader with nobody queued behind it): the wait
is therefore cut at ``SLICE``, after which the observer reads the name again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .... import _rt_async as rt
from ...._async.backend import AsyncWatch
from ...._core import ids
from .. import keys as rk
from .listener import Listener

#: how long an observer may wait for its subscription to be confirmed before it relies on polling
SUBSCRIBE_TIMEOUT = 1.0

#: runs one call per listener in parallel, bounded by a timeout (Redlock: the masters' fan-out)
Fan = Callable[[Sequence[Callable[[], Any]], float], Any]


class RedisWatch(AsyncWatch):
    """Armed once the name's channel is subscribed (confirmed) on ``quorum`` of the listeners: one for a
    server or cluster, a majority of Redlock masters (a grant, a release and a proclaim each reach a majority,
    so their NOTICE reaches an observer armed on any majority). While not armed it polls every
    ``POLL`` seconds and subscribes again before each wait; a wait that armed it returns at once, so
    the observer reads under the new subscription (nothing can fall between)."""

    #: the longest wait while armed: a lease that runs out publishes nothing (see the module docstring)
    SLICE = 1.0

    def __init__(
        self, listeners: Sequence[Listener], quorum: int, name: str, fan: Fan | None = None, *, channel: str = ""
    ) -> None:
        self._listeners = list(listeners)
        self._quorum = quorum
        self._channel = channel or rk.channel(name)  # ``channel``: another than the name's (a latch's)
        self._key = "observer-" + ids.new_token()  # a key of its own among the channel's observers
        self._fan = fan
        self._waker: rt.Waker | None = None
        #: whether the last ``wait`` returned on a message (False: timeout, slice or a fresh subscription)
        self.pushed = False

    async def arm(self, timeout: float = SUBSCRIBE_TIMEOUT) -> bool:
        """Subscribe wherever the channel is not live yet; True once armed."""
        if self._waker is None:
            self._waker = rt.Waker()
        waker = self._waker
        todo = [lis for lis in self._listeners if lis.live(self._channel) is None]
        for lis in self._listeners:  # local only: also the live ones take our notices from now on
            lis.add(self._channel, self._key, waker.notify, observer=True)
        if todo:
            calls = [self._subscriber(lis, waker, timeout) for lis in todo]
            if self._fan is not None and len(calls) > 1:
                await self._fan(calls, timeout + 0.5)
            else:
                for call in calls:
                    await call()
        return self.armed()

    def _subscriber(self, lis: Listener, waker: rt.Waker, timeout: float) -> Callable[[], Any]:
        async def call() -> bool:
            return await lis.watch(self._channel, self._key, waker.notify, timeout, observer=True)

        return call

    def armed(self) -> bool:
        return sum(1 for lis in self._listeners if lis.live(self._channel) is not None) >= self._quorum

    async def wait(self, timeout: float) -> None:
        timeout = max(0.0, timeout)
        if self._waker is None or not self.armed():
            if await self.arm(min(SUBSCRIBE_TIMEOUT, timeout)):
                self.pushed = False  # armed anew: the observer reads under it at once
                return
            assert self._waker is not None
            self.pushed = await self._waker.wait(min(timeout, self.POLL))
            return
        self.pushed = await self._waker.wait(min(timeout, self.SLICE))

    async def aclose(self) -> None:
        if self._waker is None:
            return
        self._waker = None
        for lis in self._listeners:
            await lis.unwatch(self._channel, self._key, observer=True)

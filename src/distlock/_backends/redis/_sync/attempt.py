# GENERATED from src/distlock/_backends/redis/_async/attempt.py by scripts/gen_sync.py: edit that file, not this one.
"""Waiting for a Redis lock: one try, then a sleep on the name's wake-up channel until a release signals us
(or the holders' lease ends), for a single node or cluster (``Attempt``) and for Redlock on every master
(``RedlockAttempt``).

The rule both keep: no release may fall between a failed try and the wait. The waiter is registered on the
store's ``Listener`` and its channel subscribed BEFORE the try whose failure it waits on; a
try that ran without a confirmed subscription is followed by a subscribe and a re-check instead of a sleep.
A failed try also queues the waiter on the server with a short deadline (``WAITER_TTL``) that every re-check
refreshes, so a waiter that went away drops out of the queue by itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .... import _rt_sync as rt
from ...._sync.backend import SyncAttempt
from ...._core.timing import monotonic, wait_slice
from ...._core.types import Claim, Grant
from ...._errors import BackendError
from .. import calls as rc
from .. import keys as rk
from .. import lua

if TYPE_CHECKING:
    from . import Backend
    from .node import Node
    from .redlock import Backend as RedlockBackend

#: the longest a waiter sleeps between re-checks when no hint says otherwise (refreshes its entry)
MAX_WAIT_SLICE = 2.0
#: how long a waiter waits for the server to confirm its subscription before relying on hints
SUBSCRIBE_TIMEOUT = 1.0
#: Sentinel: how long a waiting acquire keeps trying while the master cannot be reached (a failover takes
#: the sentinels' down-after-milliseconds plus an election and a promotion: seconds), and how often
FAILOVER_GRACE = 15.0
FAILOVER_POLL = 0.2
#: Redlock: how long a waiter that was pushed a hand-over waits for the other masters' pushes before it tries
GATHER = 0.003
#: Redlock: consecutive tries in which fewer than a majority of masters answered in time before QuorumError
#: (a master that refuses connections counts at once; one that is slow may just be overloaded)
MAX_SILENT_TRIES = 5
#: the shortest a cut mark lasts (``cut_mark_ms``), seconds
CUT_MARK = 2.0


def cut_mark_ms(node: Node) -> int:
    """How long the abandon of a claim whose try was let go of mid-call keeps it marked on ``node`` (``ABANDON``):
    as long as the client waits for any answer (a try that reaches the server later than that is not
    refused), at least CUT_MARK seconds."""
    return int(1000 * max(CUT_MARK, node.socket_timeout))


class Attempt(SyncAttempt):
    """Try, and between tries wait on the name's wake-up channel.

    No release may fall between a failed try and the wait: the waiter must be registered and the channel
    subscribed BEFORE the try whose failure it waits on. When the channel is already subscribed (another
    waiter, or a recent one: subscriptions linger), registering is local and the first wait blocks at once;
    otherwise the first wait subscribes and returns, so the caller re-checks under the live subscription.
    """

    backend: Backend

    def __init__(self, backend: Backend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self._waker: rt.Waker | None = None
        self._channel = rk.channel(claim.name)
        # a try may have written (a queue entry, a grant whose reply was lost): the abandon must look. Not so
        # while every try was refused up front for a key of another type (nothing written, and the abandon
        # would be refused the same way)
        self._wrote = False
        #: the last try was let go of before its answer (cancelled, its link lost): it may still reach the
        #: server, and the abandon marks the claim for that (``cut_mark_ms``)
        self._cut = False
        self._gen: int | None = None  # the subscription generation our last try ran under
        self._down_since: float | None = None  # Sentinel: when tries began to find no master

    def try_acquire(self) -> Grant:
        listener = self.backend.node.listener
        if self._waker is not None:
            handed = listener.take_grant(self.claim.token)
            grant = None if handed is None else self.backend.handed_over(self.claim, handed)
            if grant is not None:  # a release granted us the name (direct hand-over): no round trip
                self._unwatch()
                return grant
        self._gen = listener.live(self._channel)
        if self._gen is not None and self._waker is None:
            self._waker = rt.Waker()
            listener.add(self._channel, self.claim.token, self._waker.notify)
        # registered under a live subscription: a release may push our wake-up to this store alone
        reply = "" if self._gen is None else listener.reply(self._channel)
        wrote, self._wrote = self._wrote, True
        self._cut = True
        try:
            grant = self.backend.try_once(self.claim, reply)
        except BackendError as err:
            if lua.WRONGTYPE in str(err):
                self._wrote, self._cut = wrote, False
            if not self._through_failover(err):
                raise
            return Grant(False, retry_after=FAILOVER_POLL)
        self._cut = False
        self._down_since = None
        if grant.acquired:
            self._unwatch()
        return grant

    def _through_failover(self, err: BackendError) -> bool:
        """Sentinel: a try that could not reach the master (it died, no master is known yet) counts as a
        failed try for ``FAILOVER_GRACE`` seconds: the acquire waits, within its own timeout, for the
        sentinels to promote a replica instead of failing. An error the server sent is raised at once."""
        if not self.backend.node.sentinel or not isinstance(err.__cause__, (RedisConnectionError, RedisTimeoutError)):
            return False
        now = monotonic()
        if self._down_since is None:
            self._down_since = now
        return now - self._down_since < FAILOVER_GRACE

    def wait(self, grant: Grant, timeout: float | None) -> None:
        listener = self.backend.node.listener
        if self._waker is None or self._gen is None or listener.live(self._channel) != self._gen:
            # not registered and subscribed during the last try: subscribe, then let the caller re-check
            if self._waker is None:
                self._waker = rt.Waker()
            listener.watch(self._channel, self.claim.token, self._waker.notify, SUBSCRIBE_TIMEOUT)
            if listener.live(self._channel) is not None:
                # the confirmation woke us too (see ``Subscriptions._dispatch``): the caller's re-check covers it
                self._waker.take()
                return
        # through the listener: this thread (task) reads the pub/sub connection itself while it waits, so the
        # push that wakes it is read here, not handed over from the listener's thread (one hop, not two)
        listener.wait(self._waker, wait_slice(grant.retry_after, None, timeout, MAX_WAIT_SLICE))

    def abandon(self) -> None:
        self._unwatch()
        self.backend.forget(self.claim.token)
        if self._wrote:
            c, node = self.claim, self.backend.node
            node.script("abandon", c.name, c.token, c.mode.value, cut_mark_ms(node) if self._cut else 0)

    def _unwatch(self) -> None:
        if self._waker is not None:
            self._waker = None
            self.backend.node.listener.unwatch(self._channel, self.claim.token)


class Handed:
    """The direct hand-overs pushed to one Redlock waiter that it still holds, per master (index).

    A failed try takes the claim back from every master that granted it or did not answer, and a hand-over
    made there before that release may be pushed after it (pushes come on another connection): such a grant
    is void. It was made from a queue entry of that try or an earlier one, so it echoes that try's stamp or
    an earlier one: each master keeps the stamp of the last try that released there, and a push stamped no
    later is dropped."""

    def __init__(self, n: int) -> None:
        self.grants: dict[int, rc.HandOver] = {}
        self._released = [float("-inf")] * n

    def add(self, i: int, handed: rc.HandOver) -> None:
        if handed.since > self._released[i]:
            self.grants[i] = handed

    def released(self, masters: list[int], stamp: float) -> None:
        for i in masters:
            self._released[i] = stamp
            self.grants.pop(i, None)


class RedlockAttempt(SyncAttempt):
    """As the single-node attempt (register and subscribe before the try whose failure we wait on), on every
    master: it blocks once a majority of masters had a live subscription during the last try (a release
    reaches a majority, so its wake-up reaches us from one of them). A release on a master where we head
    the queue may hand us the name there (``Handed``); hand-overs from a majority whose fences agree
    are a grant with no round trip (``RedlockBackend.handed_over``)."""

    backend: RedlockBackend

    def __init__(self, backend: RedlockBackend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self._waker: rt.Waker | None = None
        self._channel = rk.channel(claim.name)
        self._gens: list[int | None] = []
        self._silent = 0
        self._handed = Handed(len(backend.masters.nodes))
        self._cut = False  # as the single-node attempt's: a try may still reach a master that did not answer

    def try_acquire(self) -> Grant:
        nodes = self.backend.masters.nodes
        if self._waker is not None:
            handed = self._gather_handovers(self._waker)
            if handed is not None:
                self._unwatch()
                return handed
        self._gens = [n.listener.live(self._channel) for n in nodes]
        if self._waker is None and self._covered(self._gens):
            waker = self._waker = rt.Waker()
            for n in nodes:
                n.listener.add(self._channel, self.claim.token, waker.notify)
        # registered, and live on a master: its release may push our wake-up to this store alone
        replies = [
            "" if self._waker is None or g is None else n.listener.reply(self._channel)
            for n, g in zip(nodes, self._gens, strict=True)
        ]
        self._cut = True
        grant, errors = self.backend.try_once(self.claim, self._handed, replies)
        self._cut = errors is not None
        self._silent = 0 if errors is None else self._silent + 1
        if errors is not None and self._silent >= MAX_SILENT_TRIES:
            raise self.backend.masters.quorum_error(self.claim.name, "acquire", errors)
        if grant.acquired:
            self._unwatch()
        return grant

    def _gather_handovers(self, waker: rt.Waker) -> Grant | None:
        """The grant the hand-overs pushed so far make, or None. A release reaches every master at about the
        same time, so once one push came the others are on their way: wait for them up to ``GATHER`` (no
        longer than a try would take) instead of a try that would only confirm them."""
        nodes = self.backend.masters.nodes
        until = monotonic() + GATHER
        while True:
            for i, n in enumerate(nodes):
                h = n.listener.take_grant(self.claim.token)
                if h is not None:
                    self._handed.add(i, h)
            got = len(self._handed.grants)
            if got >= self.backend.masters.quorum:
                return self.backend.handed_over(self.claim, self._handed)
            left = until - monotonic()
            if got == 0 or left <= 0:
                return None
            self.backend.masters.listeners.wait(waker, left)

    def _covered(self, gens: list[int | None]) -> bool:
        return sum(1 for g in gens if g is not None) >= self.backend.masters.quorum

    def wait(self, grant: Grant, timeout: float | None) -> None:
        nodes = self.backend.masters.nodes
        now = [n.listener.live(self._channel) for n in nodes]
        steady = [g for g, h in zip(self._gens, now, strict=True) if g is not None and g == h]
        if self._waker is None or len(steady) < self.backend.masters.quorum:
            # subscribe on every master, then let the caller re-check (no release can slip in between)
            waker = self._waker = self._waker or rt.Waker()
            token = self.claim.token
            self.backend.masters.each(
                lambda n: n.listener.watch(self._channel, token, waker.notify, SUBSCRIBE_TIMEOUT),
                SUBSCRIBE_TIMEOUT + 0.5,
            )
            if self._covered([n.listener.live(self._channel) for n in nodes]):
                waker.take()  # the confirmations woke us too: the caller's re-check covers them
                return
        # a waiting thread reads the masters' pushes itself where it can (``group.Group``)
        self.backend.masters.listeners.wait(
            self._waker, wait_slice(grant.retry_after, None, timeout, MAX_WAIT_SLICE)
        )

    def abandon(self) -> None:
        self._unwatch()
        c = self.claim
        self.backend.releases.forget(c.token)
        cut = self._cut
        self.backend.masters.each(
            lambda n: n.script("abandon", c.name, c.token, c.mode.value, cut_mark_ms(n) if cut else 0)
        )

    def _unwatch(self) -> None:
        if self._waker is not None:
            self._waker = None
            for n in self.backend.masters.nodes:
                n.listener.unwatch(self._channel, self.claim.token)

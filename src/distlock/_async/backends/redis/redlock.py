"""Redlock over N independent Redis masters: ``redlock://h1:6379,h2:6379,h3:6379[/db]`` (TLS: ``redlocks://``).

The algorithm of the Redis docs and the seeds, on the single-node scripts of ``_core/redis_lua.py`` (same
key and token on every master, so each master alone looks like the single-node layout):

* acquire: the acquire script is sent to every master in parallel, with a per-master deadline far below
  the TTL (``node_timeout``, at most ttl/5). Granted only if a majority said yes AND the validity
  ``ttl - elapsed - drift`` (monotonic clock, ``_core.timing.validity``) is still positive; the lock object
  counts its lease from that validity (``Grant.valid_for``). An unreachable master is a failed vote.
* a failed attempt removes the claim from every master that granted it or did not answer (a late
  success there must not linger), then the waiter retries after a random delay if the votes were split.
* fences: each master has one counter, seeded under its run id (``Backend._fence``): the holder's fence
  is the maximum over a majority of *seeded* masters that granted, written back (``FENCE_FLOOR``) to a
  majority before the grant, so every later majority (which shares a master with it) counts above it. A
  master that lost its state (flushed, restarted) counts toward no fence until it is re-seeded from a
  majority of seeded masters; with fewer seeded masters answering the acquire is refused
  (``docs/models/redlock_fence.pml``).
* renew: one pipeline per master per tick, in parallel; a lease is kept if a majority extended it.
* waiting: a waiter subscribes to the name's channel on every master (push, one waiter per release on
  each master) and re-checks no later than the holders' remaining lease.
* ``QuorumError`` when fewer than a majority of masters answer at all.

Lock kinds: lock, rlock, multilock and rwlock (a writer's majority and a reader's majority share a master,
which never grants both). Semaphores are refused (``UnsupportedFeature``): per-master permit counts over
majorities could admit up to 2N-1 holders. ``fair=True`` is refused (no FIFO across masters).
URL options: ``node_timeout`` (s, default 0.5), ``connect_timeout`` (s, default 1), ``socket_timeout``
(s, default 1), ``fence_counter`` (the key of each master's fence counter, default ``distlock:fences``), plus
redis-py's own URL options.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import NoScriptError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ... import _redis_async as drv
from ... import _rt_async as rt
from ..._core import redis_lua as lua
from ..._core.timing import monotonic, validity, wait_slice
from ..._core.types import Capabilities, Claim, Grant, HolderInfo, LockInfo, Mode
from ..._errors import BackendError, ConfigError, QuorumError
from ..._url import StoreConfig
from ..backend import AsyncAttempt, AsyncBackend
from .redis import (
    MAX_WAIT_SLICE,
    SUBSCRIBE_TIMEOUT,
    WAITER_TTL,
    Leases,
    Node,
    driver_url,
    fence_counter,
    reject_unknown,
)
from .redis_wire import Restarted

#: the random delay before retrying after a split vote (nobody got a majority): desynchronises contenders
SPLIT_RETRY = 0.01
#: consecutive tries in which fewer than a majority of masters answered in time before QuorumError
#: (a master that refuses connections counts at once; one that is slow may just be overloaded)
MAX_SILENT_TRIES = 5


class Vote:
    """One master's answer to an acquire: granted?, its fence (-1 if it is not seeded), the retry hint,
    whether its counter is seeded (kept since seeded under its current run id) and the counter's value."""

    __slots__ = ("acquired", "counter", "fence", "retry_after", "seeded")

    def __init__(self, acquired: bool, fence: int, retry_after: float | None, seeded: bool, counter: int) -> None:
        self.acquired = acquired
        self.fence = fence
        self.retry_after = retry_after
        self.seeded = seeded
        self.counter = counter

    @classmethod
    def of(cls, reply: Sequence[Any]) -> Vote:
        ok = int(reply[0]) == 1
        value = int(reply[1])
        mark = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
        retry = None if ok or value < 0 else value / 1000.0
        return cls(ok, value if ok else -1, retry, mark == "1", int(reply[3]))


class Attempt(AsyncAttempt):
    """As the single-node attempt (register and subscribe before the try whose failure we wait on), on every
    master: it blocks once a majority of masters had a live subscription during the last try (a release
    reaches a majority, so its wake-up reaches us from one of them)."""

    backend: Backend

    def __init__(self, backend: Backend, claim: Claim) -> None:
        super().__init__(backend, claim)
        self._waker: rt.Waker | None = None
        self._channel = lua.channel(claim.name)
        self._gens: list[int | None] = []
        self._silent = 0

    async def try_acquire(self) -> Grant:
        nodes = self.backend.nodes
        self._gens = [n.listener.live(self._channel) for n in nodes]
        if self._waker is None and self._covered(self._gens):
            waker = self._waker = rt.Waker()
            for n in nodes:
                n.listener.add(self._channel, self.claim.token, waker.notify)
        grant, errors = await self.backend._try(self.claim)
        self._silent = 0 if errors is None else self._silent + 1
        if errors is not None and self._silent >= MAX_SILENT_TRIES:
            raise self.backend._quorum_error(self.claim.name, "acquire", errors)
        if grant.acquired:
            await self._unwatch()
        return grant

    def _covered(self, gens: list[int | None]) -> bool:
        return sum(1 for g in gens if g is not None) >= self.backend.quorum

    async def wait(self, grant: Grant, timeout: float | None) -> None:
        nodes = self.backend.nodes
        now = [n.listener.live(self._channel) for n in nodes]
        steady = [g for g, h in zip(self._gens, now, strict=True) if g is not None and g == h]
        if self._waker is None or len(steady) < self.backend.quorum:
            # subscribe on every master, then let the caller re-check (no release can slip in between)
            waker = self._waker = self._waker or rt.Waker()
            token = self.claim.token
            calls = self.backend._calls(
                lambda n: n.listener.watch(self._channel, token, waker.notify, SUBSCRIBE_TIMEOUT), nodes
            )
            await self.backend._fan(calls, SUBSCRIBE_TIMEOUT + 0.5)
            if self._covered([n.listener.live(self._channel) for n in nodes]):
                return
        await self._waker.wait(wait_slice(grant.retry_after, None, timeout, MAX_WAIT_SLICE))

    async def abandon(self) -> None:
        await self._unwatch()
        c = self.claim
        self.backend.leases.forget(c.token)
        await self.backend._fan(
            self.backend._calls(lambda n: n.script("abandon", c.name, c.token, c.mode.value), self.backend.nodes)
        )

    async def _unwatch(self) -> None:
        if self._waker is not None:
            self._waker = None
            for n in self.backend.nodes:
                await n.listener.unwatch(self._channel, self.claim.token)


class Backend(AsyncBackend):
    capabilities = Capabilities(
        modes=frozenset({Mode.EXCLUSIVE, Mode.READ, Mode.WRITE}), fair=False, needs_renewal=True
    )

    def __init__(self, config: StoreConfig, nodes: list[Node], node_timeout: float) -> None:
        super().__init__(config)
        self.nodes = nodes
        self.counter = nodes[0].counter  # the same on every master
        self.quorum = len(nodes) // 2 + 1
        self.node_timeout = node_timeout
        self.fanout = drv.Fanout(len(nodes))
        self.leases = Leases()

    @classmethod
    async def open(cls, config: StoreConfig) -> Backend:
        if len(config.hosts) < 3 or len(config.hosts) % 2 == 0:
            raise ConfigError(
                f"redlock needs an odd number (>= 3) of independent masters, got {len(config.hosts)}",
                backend=config.scheme,
            )
        node_timeout = config.pop_float("node_timeout", 0.5)
        connect_timeout = config.pop_float("connect_timeout", 1.0)
        socket_timeout = config.pop_float("socket_timeout", 1.0)
        counter = fence_counter(config)
        urls = [driver_url(config, host) for host in config.hosts]
        reject_unknown(config)
        nodes = [
            await Node.connect(
                url, config.scheme, config.password, connect_timeout, socket_timeout, f"{h}:{p}", counter=counter
            )
            for url, (h, p) in zip(urls, config.hosts, strict=True)
        ]
        backend = cls(config, nodes, node_timeout)
        for n in nodes:
            n.watch_restarts()
        results = await backend._fan([n.ping for n in nodes], connect_timeout + socket_timeout)
        up = sum(1 for r in results if not isinstance(r, BaseException))
        if up < backend.quorum:
            await backend.aclose()
            raise QuorumError(
                f"only {up} of {len(nodes)} Redis masters reachable; a majority ({backend.quorum}) is needed",
                backend=config.scheme,
            )
        return backend

    # -- plumbing --------------------------------------------------------------------------------------
    def _deadline(self, ttl: float | None = None) -> float:
        return self.node_timeout if ttl is None else max(0.005, min(self.node_timeout, ttl / 5.0))

    async def _fan(self, calls: Sequence[Callable[[], Any]], timeout: float | None = None) -> list[Any]:
        """Run the calls in parallel; each result is a reply or the exception (timeouts included)."""
        return await self.fanout.gather(calls, self.node_timeout if timeout is None else timeout)

    async def _scatter(self, nodes: Sequence[Node], timeout: float, script: str, name: str, *args: Any) -> list[Any]:
        """The same script on every node, in parallel on the wire (one thread on the sync side, no pool).
        Each result is the reply or an exception; a node that lost its scripts (restart) is retried alone."""
        return await self._scatter_each(nodes, timeout, script, name, [args] * len(nodes))

    async def _scatter_each(
        self,
        nodes: Sequence[Node],
        timeout: float,
        script: str,
        name: str,
        each: Sequence[Sequence[Any]],
        expects: Sequence[str | None] | None = None,
    ) -> list[Any]:
        """As :meth:`_scatter`, with each node's own arguments (``each[i]``); ``expects[i]``: the run id the
        request to node i was prepared with (a new connection that finds another one fails that request)."""
        first = each[0] if each else ()
        if all(a == first for a in each):
            # encoded once for every master
            packed: bytes | list[bytes] = lua.packed_call(script, name, *first, counter=self.counter)
        else:
            packed = [lua.packed_call(script, name, *a, counter=self.counter) for a in each]
        results = await drv.scatter([n.plain_wire for n in nodes], packed, timeout, self.fanout, expects)
        out: list[Any] = []
        for n, r, args in zip(nodes, results, each, strict=True):
            if isinstance(r, NoScriptError):
                try:
                    r = await n.script(script, name, *args)
                except BackendError as exc:
                    r = exc
            elif isinstance(r, RedisError):
                err = n.error(r, script)
                err.__cause__ = r
                r = err
            out.append(r)
        return out

    @staticmethod
    def _calls(fn: Callable[[Node], Any], nodes: Sequence[Node]) -> list[Callable[[], Any]]:
        return [functools.partial(fn, n) for n in nodes]

    @staticmethod
    def _silent(r: object) -> bool:
        """No answer in time (as opposed to a refused connection or an error reply)."""
        cause = r.__cause__ if isinstance(r, BackendError) else r
        return isinstance(cause, (TimeoutError, RedisTimeoutError, Restarted))

    def _quorum_error(self, name: str | None, what: str, errors: Sequence[BaseException]) -> QuorumError:
        detail = "; ".join(sorted({type(e).__name__ + ": " + str(e)[:120] for e in errors}))
        return QuorumError(
            f"{what}: fewer than {self.quorum} of {len(self.nodes)} masters answered ({detail})",
            name=name,
            backend=self.scheme,
        )

    def _need_quorum(self, results: Sequence[Any], name: str | None, what: str) -> None:
        errors = [r for r in results if isinstance(r, BaseException)]
        if len(results) - len(errors) < self.quorum:
            raise self._quorum_error(name, what, errors)

    # -- operations ------------------------------------------------------------------------------------
    def attempt(self, claim: Claim) -> Attempt:
        return Attempt(self, claim)

    async def _try(self, claim: Claim) -> tuple[Grant, list[BaseException] | None]:
        """One Redlock round: the grant, and None if a majority answered in time, else the errors."""
        runs = [n.run_id or "" for n in self.nodes]
        each = [
            lua.acquire_args(
                claim.token, claim.mode, claim.ttl, claim.permits, False, claim.owner, WAITER_TTL, lua.REDLOCK + run
            )
            for run in runs
        ]
        started = monotonic()
        deadline = self._deadline(claim.ttl)
        results = await self._scatter_each(self.nodes, deadline, "acquire", claim.name, each, runs)
        votes = [None if isinstance(r, BaseException) else Vote.of(r) for r in results]
        fence, refused = await self._fence(claim, votes)
        won = [v for v in votes if v is not None and v.acquired]
        if fence is not None and len(won) >= self.quorum:
            valid = validity(claim.ttl, monotonic() - started)
            if valid > 0:
                self.leases.confirmed(claim, started)
                return Grant(True, fence=fence, valid_for=valid), None
        # Failed: take the claim back wherever it may have landed (granted, or no answer in time).
        dirty = [n for n, v in zip(self.nodes, votes, strict=True) if v is None or v.acquired]
        if dirty:
            await self._scatter(dirty, self._deadline(claim.ttl), "release", claim.name, claim.token, claim.mode.value)
        if refused is not None:
            raise QuorumError(refused, name=claim.name, backend=self.scheme)
        errors = [r for r in results if isinstance(r, BaseException)]
        if sum(1 for e in errors if not self._silent(e)) > len(self.nodes) - self.quorum:
            raise self._quorum_error(claim.name, "acquire", errors)  # a majority is down: no point waiting
        if len(results) - len(errors) < self.quorum:  # slow masters (or we are overloaded): try again soon
            return Grant(False, retry_after=random.uniform(0.0, SPLIT_RETRY)), errors
        if won:  # split vote: retry after a random delay so contenders fall out of step
            return Grant(False, retry_after=random.uniform(0.0, SPLIT_RETRY)), None
        hints = sorted(v.retry_after for v in votes if v is not None and v.retry_after is not None)
        return Grant(False, retry_after=hints[0] if hints else None), None

    async def _fence(self, claim: Claim, votes: list[Vote | None]) -> tuple[int | None, str | None]:
        """The fence of a round that won a majority, or None; and the reason to refuse the acquire, if any.

        Only *seeded* masters count (those that kept their counter since it was seeded under their current
        run id): the fence is the largest counter of a majority of seeded masters that granted, written back
        to a majority before the grant (every later majority shares a master with it). A master that lost
        its state is re-seeded whenever a majority of seeded masters answered, with the largest of their
        counters. When all masters answered and none of them is seeded, the fleet is new (or every master
        restarted at once): it is seeded with the largest counter of all, plus one. Fewer seeded masters than
        a majority, and not all answering: refused. docs/models/redlock_fence.pml models this rule."""
        answered = [i for i, v in enumerate(votes) if v is not None]
        seeded = [i for i in answered if votes[i].seeded]  # type: ignore[union-attr]
        won = [i for i in answered if votes[i].acquired]  # type: ignore[union-attr]
        won_seeded = [i for i in won if i in seeded]
        counters = {i: votes[i].counter for i in answered}  # type: ignore[union-attr]
        fence: int | None = None
        if len(seeded) >= self.quorum:
            floor = max(counters[i] for i in seeded)
            fresh = [i for i in answered if i not in seeded]
            if len(won) >= self.quorum and len(won_seeded) >= self.quorum:
                fence = max(votes[i].fence for i in won_seeded)  # type: ignore[union-attr]
        elif len(answered) == len(self.nodes) and not seeded:
            floor = max(counters.values()) + 1  # a new fleet: seed every master, hand out the next fence
            fresh = answered
            if len(won) >= self.quorum:
                fence = floor
        else:
            reason = (
                f"only {len(seeded)} of {len(self.nodes)} Redis masters answered with their fence counter "
                f"intact (the others are down, or restarted or flushed and not re-seeded yet); "
                f"{self.quorum} are needed so a fence never goes back: acquire refused"
            )
            return None, reason if len(won) >= self.quorum else None
        if fence is None:
            if fresh:  # re-seed what lost its state, for the next round
                await self._floor([self.nodes[i] for i in fresh], claim, floor, -1)
            return None, None
        # write the fence back where it is not yet, and re-seed the masters that lost their state
        behind = [i for i in won if i not in fresh and votes[i].fence != fence]  # type: ignore[union-attr]
        at = {i for i in won_seeded if votes[i].fence == fence}  # type: ignore[union-attr]
        todo = sorted(set(behind) | set(fresh))
        if todo:
            replies = await self._floor([self.nodes[i] for i in todo], claim, max(floor, fence), fence)
            at |= {i for i, r in zip(todo, replies, strict=True) if not isinstance(r, BaseException) and int(r) == 1}
        return (fence, None) if len(at) >= self.quorum else (None, None)

    async def _floor(self, nodes: list[Node], claim: Claim, floor: int, fence: int) -> list[Any]:
        runs = [n.run_id or "" for n in nodes]
        each = [(claim.token, floor, claim.mode.value, fence, run) for run in runs]
        return await self._scatter_each(nodes, self._deadline(claim.ttl), "fence_floor", claim.name, each, runs)

    async def release(self, claim: Claim) -> bool:
        """Released if a majority removed the token. An earlier try of this release may have run where this
        one finds the token gone: those count too while our lease cannot have ended (see ``Leases``). Too
        few definite answers to tell: ``QuorumError`` (the caller may retry; the retry is idempotent)."""
        results = await self._scatter(
            self.nodes, self.node_timeout, "release", claim.name, claim.token, claim.mode.value
        )
        ones = sum(1 for r in results if not isinstance(r, BaseException) and int(r) == 1)
        zeros = sum(1 for r in results if not isinstance(r, BaseException) and int(r) == 0)
        errors = [r for r in results if isinstance(r, BaseException)]
        gone = ones + zeros >= self.quorum  # a majority says the token does not hold the name now
        if ones < self.quorum and not gone and ones + len(errors) >= self.quorum:
            self.leases.unsure(claim.token)  # too few definite answers to tell
            raise self._quorum_error(claim.name, "release", errors)
        return self.leases.released(claim.token, ones >= self.quorum, gone)

    async def renew(self, claims: Sequence[Claim]) -> list[bool]:
        if not claims:
            return []
        calls = [(c.name, (c.token, c.mode.value, lua.ms(c.ttl))) for c in claims]
        started = monotonic()
        deadline = self._deadline(min(c.ttl for c in claims))
        results = await self._fan(
            self._calls(lambda n: n.batch("renew", calls, "renew", deadline), self.nodes),
            deadline,
        )
        self._need_quorum(results, None, "renew")
        elapsed = monotonic() - started
        out = []
        for i, c in enumerate(claims):
            votes = sum(1 for r in results if not isinstance(r, BaseException) and int(r[i]) == 1)
            # the drift margin applies to a renewal as to an acquire: ttl - elapsed - drift must stay > 0
            out.append(votes >= self.quorum and validity(c.ttl, elapsed) > 0)
        self.leases.renewed(claims, out, started)
        return out

    async def holds(self, claim: Claim) -> bool:
        results = await self._scatter(self.nodes, self.node_timeout, "holds", claim.name, claim.token, claim.mode.value)
        self._need_quorum(results, claim.name, "holds")
        return sum(1 for r in results if not isinstance(r, BaseException) and int(r) == 1) >= self.quorum

    async def _snapshots(self, names: list[str]) -> list[list[lua.Snapshot] | BaseException]:
        return await self._fan(self._calls(lambda n: n.snapshots(names), self.nodes))

    def _merge(self, name: str, snaps: list[lua.Snapshot]) -> LockInfo | None:
        """A holder counts if a majority of masters list it; fence = the largest, lease = the shortest."""
        seen: dict[str, list[HolderInfo]] = {}
        waiters = 0
        for s in snaps:
            waiters = max(waiters, s.waiters)
            for token, h in s.holders():
                seen.setdefault(token, []).append(h)
        holders = []
        for views in seen.values():
            if len(views) >= self.quorum:
                fences = [v.fence for v in views if v.fence is not None]
                lefts = [v.ttl_left for v in views if v.ttl_left is not None]
                holders.append(
                    HolderInfo(
                        views[0].owner, max(fences) if fences else None, views[0].mode, min(lefts) if lefts else None
                    )
                )
        if not holders:
            return None
        return LockInfo(name, lua.KIND_OF_MODE.get(holders[0].mode, "lock"), tuple(holders), waiters)

    async def inspect(self, name: str) -> LockInfo | None:
        results = await self._snapshots([name])
        self._need_quorum(results, name, "inspect")
        return self._merge(name, [r[0] for r in results if not isinstance(r, BaseException)])

    async def list(self, prefix: str) -> list[LockInfo]:
        found = await self._fan(self._calls(lambda n: n.names(prefix), self.nodes))
        self._need_quorum(found, None, "list")
        names = sorted({x for r in found if not isinstance(r, BaseException) for x in r})
        if not names:
            return []
        results = await self._snapshots(names)
        self._need_quorum(results, None, "list")
        ok = [r for r in results if not isinstance(r, BaseException)]
        infos = [self._merge(name, [r[i] for r in ok]) for i, name in enumerate(names)]
        return [i for i in infos if i is not None]

    async def break_lock(self, name: str) -> bool:
        results = await self._fan(self._calls(lambda n: n.script("break", name), self.nodes))
        self._need_quorum(results, name, "break")
        tokens = {
            t.decode() if isinstance(t, bytes) else str(t)
            for r in results
            if not isinstance(r, BaseException)
            for t in r
        }
        for token in tokens:
            self.leases.forget(token)
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

    async def aclose(self) -> None:
        for n in self.nodes:
            try:
                await n.aclose()
            except BackendError:
                pass
        self.fanout.close()

# GENERATED from src/distlock/_backends/redis/_async/redlock.py by scripts/gen_sync.py: edit that file, not this one.
"""Redlock over N independent Redis masters: ``redlock://h1:6379,h2:6379,h3:6379[/db]`` (TLS: ``redlocks://``).

The algorithm of the Redis docs and the seeds, on the single-node scripts of ``_backends/redis/lua/`` (same
key and token on every master, so each master alone looks like the single-node layout):

* acquire: the acquire script is sent to every master in parallel, with a per-master deadline far below
  the TTL (``node_timeout``, at most ttl/5). Granted only if a majority said yes AND the validity
  ``ttl - elapsed - drift`` (monotonic clock, ``_core.timing.validity``) is still positive; the lock object
  counts its lease from that validity (``Grant.valid_for``). An unreachable master is a failed vote.
* a failed attempt removes the claim from every master that granted it or did not answer (a late
  success there must not linger), then the waiter retries after a random delay if the votes were split.
* fences: each master has one counter, seeded under its run id (the rule: ``fences.plan``): the holder's fence
  is the maximum over a majority of *seeded* masters that granted, written back (``FENCE_FLOOR``) to a
  majority before the grant, so every later majority (which shares a master with it) counts above it. A
  master that lost its state (flushed, restarted) counts toward no fence until it is re-seeded from a
  majority of seeded masters; when a majority answers with fewer of them seeded (a new fleet, or a majority
  that lost its counters), they are seeded from the largest of their counters and clocks
  (``docs/models/redlock_fence.pml``, CLOCK).
* renew: one pipeline per master per tick, in parallel; a lease is kept if a majority extended it.
* waiting: a waiter subscribes to the name's channel on every master (push, one waiter per release on
  each master) and re-checks no later than the holders' remaining lease (``attempt.RedlockAttempt``).
* direct hand-over: an exclusive try leaves a hand-over record with its queue entry; a release on a master
  where it heads the queue grants it the name there and pushes the fence (only if that master is seeded
  under the run id both sides saw). Pushes from a majority at their largest fence are a grant with no
  round trip (``Backend.handed_over``; the fence rule's HANDOVER variant in the model).
* ``QuorumError`` when fewer than a majority of masters answer at all.
* elections: a candidate's value rides in its holder details on each master (as on a single node);
  ``proclaim`` rewrites them on every master and succeeds when a majority did so before the local lease end
  (the lease of the last confirmed acquire or renewal). It touches neither the holdings nor any fence
  counter, so the fence rule above (and its model) does not see it. ``inspect`` and ``leader`` report the
  value that most of the answering masters hold. Observers subscribe on every master (``watch.RedisWatch``).

Lock kinds: lock, rlock, multilock and rwlock (a writer's majority and a reader's majority share a master,
which never grants both). Semaphores are refused (``UnsupportedFeature``): per-master permit counts over
majorities could admit up to 2N-1 holders. ``fair=True`` is refused (no FIFO across masters).
URL options: ``node_timeout`` (s, default 0.5), ``connect_timeout`` (s, default 1), ``socket_timeout``
(s, default 1), ``fence_counter`` (the key of each master's fence counter, default ``distlock:fences``), plus
redis-py's own URL options.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ...._sync.backend import SyncWatch
from ...._core import ids
from ...._core.timing import WAITER_TTL, monotonic, validity
from ...._core.types import Capabilities, Claim, Grant, HolderInfo, LockInfo, Mode, lock_kind
from ...._errors import ConfigError, QuorumError
from ...._tls import one_line
from ...._url import StoreConfig, scrub
from .. import calls as rc
from .attempt import Handed, RedlockAttempt
from .fences import Vote, plan
from .masters import Masters
from .node import Node, connect_node
from .options import driver_url, fence_counter, reject_unknown
from .releases import ReleaseLog, RenewCalls, RenewingBackend
from .watch import RedisWatch

#: the random delay before retrying after a split vote (nobody got a majority): desynchronises contenders
SPLIT_RETRY = 0.01


class Backend(RenewingBackend):
    capabilities = Capabilities(
        modes=frozenset({Mode.EXCLUSIVE, Mode.READ, Mode.WRITE}),
        fair=False,
        needs_renewal=True,
        elections=True,
        downgrade=True,
    )

    def __init__(self, config: StoreConfig, nodes: list[Node], node_timeout: float) -> None:
        super().__init__(config)
        self.masters = Masters(nodes, node_timeout, config.scheme)
        self.releases = ReleaseLog()

    @classmethod
    def open(cls, config: StoreConfig) -> Backend:
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
            connect_node(
                url, config.scheme, config.password, connect_timeout, socket_timeout, f"{h}:{p}", counter=counter
            )
            for url, (h, p) in zip(urls, config.hosts, strict=True)
        ]
        backend = cls(config, nodes, node_timeout)
        for n in nodes:
            n.watch_restarts()
        results = backend.masters.fan([n.ping for n in nodes], connect_timeout + socket_timeout)
        up = sum(1 for r in results if not isinstance(r, BaseException))
        if up < backend.masters.quorum:
            backend.close()
            # the first master's reason (a refused certificate, a wrong password) says what to fix
            why = next((r.args[0] if r.args else str(r) for r in results if isinstance(r, BaseException)), "")
            raise QuorumError(
                f"only {up} of {len(nodes)} Redis masters reachable; a majority ({backend.masters.quorum}) is needed"
                + (f"; first: {scrub(one_line(str(why)), config.password)}" if why else ""),
                backend=config.scheme,
            )
        return backend

    def name_refused(self, name: str) -> str | None:
        return self.masters.nodes[0].name_refused(name)  # every master has the same layout and counter

    def attempt(self, claim: Claim) -> RedlockAttempt:
        return RedlockAttempt(self, claim)

    def try_once(
        self, claim: Claim, handed: Handed | None = None, replies: Sequence[str] | None = None
    ) -> tuple[Grant, list[BaseException] | None]:
        """One Redlock round: the grant, and None if a majority answered in time, else the errors. A failed
        round tells ``handed`` which masters it took the claim back from (their earlier hand-overs are void).
        ``replies``: the waiter's reply channel on each master ('' = none there, see ``rc.acquire_args``)."""
        runs = [n.run_id or "" for n in self.masters.nodes]
        started = monotonic()
        # an exclusive claim left queued may be handed the name by a release (docs/redis.md, Redlock)
        stamp = "" if claim.mode.shared else rc.stamp_of(started)
        each = [
            rc.acquire_args(
                claim.token,
                claim.mode,
                claim.ttl,
                rc.permits_arg(claim),
                False,
                claim.record,
                WAITER_TTL,
                rc.REDLOCK + run,
                stamp,
                "" if replies is None else replies[i],
                claim.companion,
            )
            for i, run in enumerate(runs)
        ]
        deadline = self.masters.deadline(claim.ttl)
        results = self.masters.scatter_each(self.masters.nodes, deadline, "acquire", claim.name, each, runs)
        votes = [None if isinstance(r, BaseException) else Vote.of(r) for r in results]
        fence = self._fence(claim, votes)
        won = [v for v in votes if v is not None and v.acquired]
        if fence is not None and len(won) >= self.masters.quorum:
            valid = validity(claim.ttl, monotonic() - started)
            if valid > 0:
                self.releases.confirmed(claim, started)
                self._leave_queues(claim, votes)
                return Grant(True, fence=fence, valid_for=valid), None
        # Failed: take the claim back wherever it may have landed (granted, or no answer in time).
        dirty = [i for i, v in enumerate(votes) if v is None or v.acquired]
        if dirty:
            if handed is not None and stamp:
                handed.released(dirty, rc.stamp_time(stamp))
            self._release_on([self.masters.nodes[i] for i in dirty], self.masters.deadline(claim.ttl), claim)
        errors = [r for r in results if isinstance(r, BaseException)]
        if sum(1 for e in errors if not self.masters.silent(e)) > len(self.masters.nodes) - self.masters.quorum:
            raise self.masters.quorum_error(claim.name, "acquire", errors)  # a majority is down: no point waiting
        if len(results) - len(errors) < self.masters.quorum:  # slow masters (or we are overloaded): try again soon
            return Grant(False, retry_after=random.uniform(0.0, SPLIT_RETRY)), errors
        if won:  # split vote: retry after a random delay so contenders fall out of step
            return Grant(False, retry_after=random.uniform(0.0, SPLIT_RETRY)), None
        hints = sorted(v.retry_after for v in votes if v is not None and v.retry_after is not None)
        return Grant(False, retry_after=hints[0] if hints else None), None

    def handed_over(self, claim: Claim, handed: Handed) -> Grant | None:
        """The grant of the hand-overs pushed to this waiter, with no round trip; None if they do not make one.

        Each push is a vote as an acquire's reply would be, from a master seeded under the run id both our try
        and the release were sent under (the release script checks it), so the fence rule
        (``fences.plan``) applies with nothing to write back: a majority of pushes must carry their largest
        fence (``docs/models/redlock_fence.pml``, HANDOVER). Each master's lease counts from the stamp its push
        echoes (the send of the try that queued us there, before its grant) and lasts the TTL capped at the
        queue deadline; the local lease ends with the earliest of them (``ReleaseLog.handed``: with less than half of
        it left, None, and the waiter's try confirms the grants for a full TTL)."""
        grants = handed.grants
        if len(grants) < self.masters.quorum:
            return None
        votes: list[Vote | None] = [None] * len(self.masters.nodes)
        for i, h in grants.items():
            votes[i] = Vote(True, h.fence, None, True, h.fence)
        p = plan(votes, self.masters.quorum)
        if p.fence is None or len(p.at) < self.masters.quorum:
            return None  # the fences differ: an ordinary try writes the largest back first
        left = self.releases.handed(claim, min(h.since for h in grants.values()))
        return None if left is None else Grant(True, fence=p.fence, valid_for=left)

    def _release_on(self, nodes: Sequence[Node], timeout: float, claim: Claim) -> list[Any]:
        """The release script on ``nodes``, each told the run id this store read from it: a master hands the
        name over to its head waiter only if that waiter's try saw the same run (the fence rule's seeding)."""
        runs = [n.run_id or "" for n in nodes]
        each = [rc.release_args(claim, rc.REDLOCK + run) for run in runs]
        return self.masters.scatter_each(nodes, timeout, "release", claim.name, each, runs)

    def _leave_queues(self, claim: Claim, votes: list[Vote | None]) -> None:
        """After winning a majority, leave the queues of the masters that refused: the failed try queued the
        claim there, and a release on such a master wakes only the head of its queue. Left there, the
        entry of a waiter that no longer waits would take every wake-up of that master until its deadline
        (WAITER_TTL), and the real waiters would sleep out their wait slice: a hand-over gap. A master with
        no answer is left alone (the claim may hold there; renewals and the release cover it); a failure
        here costs only that gap, so it is not an error."""
        refused = [n for n, v in zip(self.masters.nodes, votes, strict=True) if v is not None and not v.acquired]
        if refused:
            c = claim
            self.masters.scatter(refused, self.masters.deadline(c.ttl), "abandon", c.name, c.token, c.mode.value)

    def _fence(self, claim: Claim, votes: list[Vote | None]) -> int | None:
        """The fence of a round that won a majority, or None. The rule is ``fences.plan``; here its
        write-backs (``FENCE_FLOOR``) are sent."""
        p = plan(votes, self.masters.quorum)
        if p.todo:
            replies = self._floor(
                [self.masters.nodes[i] for i in p.todo], claim, p.floor, -1 if p.fence is None else p.fence
            )
            if p.fence is not None:
                p.at |= {
                    i for i, r in zip(p.todo, replies, strict=True) if not isinstance(r, BaseException) and int(r) == 1
                }
        if p.fence is None:
            return None
        return p.fence if len(p.at) >= self.masters.quorum else None

    def _floor(self, nodes: list[Node], claim: Claim, floor: int, fence: int) -> list[Any]:
        runs = [n.run_id or "" for n in nodes]
        each = [(claim.token, floor, claim.mode.value, fence, run) for run in runs]
        return self.masters.scatter_each(
            nodes, self.masters.deadline(claim.ttl), "fence_floor", claim.name, each, runs
        )

    def release(self, claim: Claim) -> bool:
        """Released if a majority removed the token. An earlier try of this release may have run where this
        one finds the token gone: those count too while our lease cannot have ended (see ``ReleaseLog``). Too
        few definite answers to tell: ``QuorumError`` (the caller may retry; the retry is idempotent)."""
        results = self._release_on(self.masters.nodes, self.masters.node_timeout, claim)
        ones = sum(1 for r in results if not isinstance(r, BaseException) and int(r) == 1)
        zeros = sum(1 for r in results if not isinstance(r, BaseException) and int(r) == 0)
        errors = [r for r in results if isinstance(r, BaseException)]
        gone = ones + zeros >= self.masters.quorum  # a majority says the token does not hold the name now
        if ones < self.masters.quorum and not gone and ones + len(errors) >= self.masters.quorum:
            self.releases.unsure(claim.token)  # too few definite answers to tell
            raise self.masters.quorum_error(claim.name, "release", errors)
        return self.releases.released(claim.token, ones >= self.masters.quorum, gone)

    def renew_round(
        self, claims: Sequence[Claim], calls: RenewCalls, shortest: float, started: float
    ) -> list[bool]:
        deadline = self.masters.deadline(shortest)
        results = self.masters.each(lambda n: n.batch("renew", calls, "renew", deadline), deadline)
        self.masters.need_quorum(results, None, "renew")
        elapsed = monotonic() - started
        out = []
        for i, c in enumerate(claims):
            replies = [rc.renew_reply(r[i]) for r in results if not isinstance(r, BaseException)]
            votes = sum(1 for ok, _ in replies if ok)
            request = next((asked for _, asked in replies if asked is not None), None)
            if request is not None:  # on any master: the asker wrote it on each it reached
                self.revoked(c.token, *request)
            # the drift margin applies to a renewal as to an acquire: ttl - elapsed - drift must stay > 0
            out.append(votes >= self.masters.quorum and validity(c.ttl, elapsed) > 0)
        return out

    def proclaim(self, claim: Claim, value: str) -> bool:
        """The new value is stored if a majority of masters rewrote it under our token before our lease could
        have ended (as a renewal counts its votes). Only the holder details change: the key, its lease and the
        fence counters are left alone, so the fence rule and its model (FENCE_FLOOR) are unaffected. Masters
        that did not answer or refused may keep the old value until the leadership ends; ``inspect`` reports
        the value most of the answering masters hold. Too few answers: ``QuorumError``."""
        record = replace(claim, value=value).record
        results = self.masters.scatter(
            self.masters.nodes, self.masters.deadline(claim.ttl), "proclaim", claim.name, claim.token, record
        )
        self.masters.need_quorum(results, claim.name, "proclaim")
        votes = sum(1 for r in results if not isinstance(r, BaseException) and int(r) == 1)
        return votes >= self.masters.quorum and monotonic() < self.releases.until(claim.token)

    def watch(self, name: str) -> SyncWatch:
        watch = RedisWatch([n.listener for n in self.masters.nodes], self.masters.quorum, name, self.masters.fan)
        watch.arm()
        return watch

    def holds(self, claim: Claim) -> bool:
        results = self.masters.scatter(
            self.masters.nodes, self.masters.node_timeout, "holds", claim.name, claim.token, claim.mode.value
        )
        self.masters.need_quorum(results, claim.name, "holds")
        return sum(1 for r in results if not isinstance(r, BaseException) and int(r) == 1) >= self.masters.quorum

    def _snapshots(self, names: list[str]) -> list[list[rc.Snapshot] | BaseException]:
        return self.masters.each(lambda n: n.snapshots(names))

    def inspect(self, name: str) -> LockInfo | None:
        results = self._snapshots([name])
        self.masters.need_quorum(results, name, "inspect")
        return merged(name, [r[0] for r in results if not isinstance(r, BaseException)], self.masters)

    def list(self, prefix: str) -> list[LockInfo]:
        found = self.masters.each(lambda n: n.names(prefix))
        self.masters.need_quorum(found, None, "list")
        names = sorted({x for r in found if not isinstance(r, BaseException) for x in r})
        if not names:
            return []
        results = self._snapshots(names)
        self.masters.need_quorum(results, None, "list")
        ok = [r for r in results if not isinstance(r, BaseException)]
        infos = [merged(name, [r[i] for r in ok], self.masters) for i, name in enumerate(names)]
        return [i for i in infos if i is not None]

    def break_lock(self, name: str) -> bool:
        results = self.masters.each(lambda n: n.script("break", name))
        self.masters.need_quorum(results, name, "break")
        tokens = {
            t.decode() if isinstance(t, bytes) else str(t)
            for r in results
            if not isinstance(r, BaseException)
            for t in r
        }
        for token in tokens:
            self.releases.forget(token)
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

    def latch_refused(self) -> str | None:
        return (
            "count-down latches are not supported on Redlock: a count kept on a majority of masters cannot be "
            "taken off exactly once when a reply is lost; use one Redis server, Sentinel or a cluster"
        )

    def barrier_refused(self, kind: str) -> str | None:
        return (
            f"{kind}s are not supported on Redlock: a record replaced on a majority of masters by compare-and-set "
            "can split between two generations; use one Redis server, Sentinel or a cluster"
        )

    def request_release(self, name: str, reason: str) -> bool:
        """The request on every master (one id: a holder that reads it on several is told once); True if a
        master that answered had a holder to ask (a Redlock holder renews on every master it can reach)."""
        request = ids.new_token()[:12]
        results = self.masters.each(lambda n: n.script("request", name, request, reason))
        self.masters.need_quorum(results, name, "request_release")
        return any(int(r) > 0 for r in results if not isinstance(r, BaseException))

    def close(self) -> None:
        self.masters.close()


def merged(name: str, snaps: list[rc.Snapshot], masters: Masters) -> LockInfo | None:
    """A holder counts if a majority of masters list it with its fence, the largest any of them shows; lease
    = the shortest, value = the one most of them hold (a proclaim reaches a majority; the others catch up
    never, see proclaim). Fewer masters at that fence means its acquire is still writing the fence back
    (``FENCE_FLOOR``): not a holder yet, whose fence (an election's term) a reader would get wrong."""
    seen: dict[str, list[HolderInfo]] = {}
    waiters = 0
    for s in snaps:
        waiters = max(waiters, s.waiters)
        for token, h in s.holders():
            seen.setdefault(token, []).append(h)
    holders = []
    silent = len(masters.nodes) - len(snaps)  # masters that did not answer (fewer than a majority)
    for views in seen.values():
        fences = [v.fence for v in views if v.fence is not None]
        if not fences:
            continue  # every grant carries a fence: this one's acquire has not written it yet
        fence = max(fences)
        views = [v for v in views if v.fence == fence]
        if len(views) < masters.quorum <= len(views) + silent:
            # it may hold a majority with the silent masters: "free" would be a guess, and a wrong one
            # lets an admin or a script act on a held name
            raise QuorumError(
                f"cannot tell whether it is held: {len(views)} answering master(s) list a holder and "
                f"{silent} did not answer (a majority of {masters.quorum} decides)",
                name=name,
                backend=masters.scheme,
            )
        if len(views) >= masters.quorum:
            lefts = [v.ttl_left for v in views if v.ttl_left is not None]
            value = Counter(v.value for v in views).most_common(1)[0][0]
            holders.append(
                HolderInfo(
                    views[0].owner,
                    fence,
                    views[0].mode,
                    min(lefts) if lefts else None,
                    value,
                    views[0].client_name,
                )
            )
    if not holders:
        return None
    return LockInfo(name, lock_kind(holders[0].mode), tuple(holders), waiters)

"""The fence counter as the client sees it: one counter per node (per hash slot on a cluster), its marker, the
connect-time checks that protect it, and the Redlock rule that seeds it on a majority of masters.

The counter's keys and the marker's meaning are in ``_backends/redis/keys.py``; the scripts that count are in
``_backends/redis/lua/``. Here:

* ``Markers``: the marker each counter showed this store. A counter that went missing (flush, eviction,
  restart without persistence) comes back with another marker: the store logs that once per loss. The counter
  itself needs no help: every fence is at least the server clock in microseconds, so a counter that was lost
  or went back starts again above every earlier fence (``docs/models/fence_counter.pml``).
* ``check_server``: at connect, a warning when the eviction policy may evict the counter, and a refusal
  when a distlock 0.1.0 client (per-name counters, which would hand out fences below ours) used the server.
* ``Vote`` and ``plan``: Redlock. Each master counts on its own; a holder's fence is the largest
  counter of a majority of *seeded* masters that granted, written back to a majority before the grant
  (``docs/models/redlock_fence.pml`` models the rule). ``plan`` decides, with no I/O; the Redlock
  backend sends the write-backs it asks for.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from ...._errors import ConfigError
from .. import _driver_async as drv
from .. import keys as rk
from .. import lua
from .wire import every_master

log = logging.getLogger("distlock")


class Markers:
    """The marker of each fence counter as one node showed it to this store (one counter per node; per slot
    on a cluster): a counter found with another marker later was lost (flushed, evicted, restarted empty, or
    failed over to a replica that never received it) and started again from the server clock."""

    def __init__(self, cluster: bool, counter: str) -> None:
        self.cluster = cluster
        self.counter = counter
        self.epochs: dict[str, str] = {}

    def marker(self, name: str) -> str:
        """The marker this node showed us for ``name``'s fence counter ('' before the first acquire)."""
        return self.epochs.get(rk.counter_key(name, self.cluster, self.counter), "")

    def learn(self, name: str, reply: Sequence[Any]) -> None:
        """Remember the marker an acquire reply carries; a new one for a counter already seen means that
        counter was lost and started again from the server clock: said once, as a warning."""
        if len(reply) > 2:
            key = rk.counter_key(name, self.cluster, self.counter)
            raw = reply[2]
            epoch = raw.decode() if isinstance(raw, bytes) else str(raw)
            seen = self.epochs.get(key)
            if seen != epoch:
                if seen is not None:
                    log.warning(
                        "Redis fence counter %s was lost (flushed, evicted, restarted without persistence, or "
                        "failed over before it replicated); it started again from the server clock, above the "
                        "fences handed out before it was lost",
                        key,
                    )
                self.epochs[key] = epoch


async def check_server(client: drv.AnyClient, label: str, scheme: str) -> None:
    """At connect: an eviction policy that may evict the fence counter -> a warning; a server whose script
    cache holds distlock 0.1.0's acquire script (an old client uses it: its per-name fences would go
    below ours) -> ConfigError. A server that refuses CONFIG (managed Redis) is not checked."""
    try:
        policies = _values(await every_master(client, "CONFIG GET", "maxmemory-policy"))
    except (RedisError, RedisClusterException) as exc:
        log.debug("Redis %s: CONFIG GET maxmemory-policy refused (%s): eviction policy not checked", label, exc)
        policies = []
    bad = sorted({p for p in policies if p.startswith("allkeys-")})
    if bad:
        log.warning(
            "Redis %s: maxmemory-policy %s may evict the fence counter, and fences then start again "
            "(set noeviction or a volatile-* policy)",
            label,
            bad[0],
        )
    try:
        found = await every_master(client, "SCRIPT EXISTS", lua.OLD_ACQUIRE_SHA)
    except (RedisError, RedisClusterException):
        return
    if any(_truthy(x) for x in (found if isinstance(found, list) else [found])):
        raise ConfigError(
            f"Redis {label}: a distlock 0.1.0 client has used this server (its script is cached); "
            "0.1.0 counts fences per name and would hand out fences below ours: stop every 0.1.0 client, "
            "then run SCRIPT FLUSH",
            backend=scheme,
        )


def _values(reply: Any) -> list[str]:
    """The values of a CONFIG GET reply: a dict, a flat list, or a dict per cluster node."""
    out: list[str] = []
    if isinstance(reply, dict):
        for k, v in reply.items():
            if isinstance(v, (dict, list)):
                out += _values(v)
            else:
                key = k.decode() if isinstance(k, bytes) else str(k)
                if key == "maxmemory-policy":
                    out.append(v.decode() if isinstance(v, bytes) else str(v))
    elif isinstance(reply, list):
        flat = [x.decode() if isinstance(x, bytes) else str(x) for x in reply]
        out += [flat[i + 1] for i in range(0, len(flat) - 1, 2) if flat[i] == "maxmemory-policy"]
    return out


def _truthy(x: Any) -> bool:
    if isinstance(x, (list, tuple)):
        return any(_truthy(y) for y in x)
    if isinstance(x, dict):
        return any(_truthy(y) for y in x.values())
    return bool(int(x)) if isinstance(x, (int, bool)) else str(x) in ("1", "True")


# -- Redlock -----------------------------------------------------------------------------------------------
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


@dataclass
class Plan:
    """What a Redlock round does about fences: ``fence`` to hand out if the write-back reaches a majority
    (None: no fence this round); ``todo``: the masters (indexes) to send ``FENCE_FLOOR`` with ``floor`` and
    ``fence`` (-1: re-seed only); ``at``: the masters that already hold ``fence``."""

    fence: int | None = None
    floor: int = 0
    todo: list[int] = field(default_factory=list)
    at: set[int] = field(default_factory=set)


def plan(votes: Sequence[Vote | None], quorum: int) -> Plan:
    """The fence rule of one Redlock round (``votes[i]``: master i's answer, None if it gave none).

    Only *seeded* masters count (those that kept their counter since it was seeded under their current
    run id): the fence is the largest counter of a majority of seeded masters that granted, written back
    to a majority before the grant (every later majority shares a master with it). A master that lost
    its state is re-seeded whenever a majority of seeded masters answered, with the largest of their
    counters. When a majority answered but fewer than a majority of them are seeded (a new fleet, or a
    majority of masters lost their counters), the answering masters are seeded with the largest counter
    among them plus one, where an unseeded master's counter is at least its clock in microseconds (every
    counter counts no lower than its server clock): above every earlier fence as long as the masters' clocks
    agree to within the time the loss took. Fewer than a majority answering: no fence.
    docs/models/redlock_fence.pml models this rule (CLOCK)."""
    answered = {i: v for i, v in enumerate(votes) if v is not None}
    seeded = [i for i, v in answered.items() if v.seeded]
    won = [i for i, v in answered.items() if v.acquired]
    won_seeded = [i for i in won if i in seeded]
    fence: int | None = None
    if len(seeded) >= quorum:
        floor = max(answered[i].counter for i in seeded)
        fresh = [i for i in answered if i not in seeded]
        if len(won) >= quorum and len(won_seeded) >= quorum:
            fence = max(answered[i].fence for i in won_seeded)
    elif len(answered) >= quorum:
        # a new fleet, or a majority lost its counters: seed from the largest counter or clock among them
        floor = max(v.counter for v in answered.values()) + 1
        fresh = [i for i in answered if i not in seeded]
        if len(won) >= quorum:
            fence = floor  # ... and hand out the next fence
    else:
        return Plan()  # fewer than a majority answered: no grant either (len(won) < quorum)
    if fence is None:
        return Plan(floor=floor, todo=fresh)  # re-seed what lost its state, for the next round
    # write the fence back where it is not yet, and re-seed the masters that lost their state
    behind = [i for i in won if i not in fresh and answered[i].fence != fence]
    at = {i for i in won_seeded if answered[i].fence == fence}
    return Plan(fence=fence, floor=max(floor, fence), todo=sorted(set(behind) | set(fresh)), at=at)

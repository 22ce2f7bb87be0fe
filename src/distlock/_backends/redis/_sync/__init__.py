# GENERATED from src/distlock/_backends/redis/_async/__init__.py by scripts/gen_sync.py: edit that file, not this one.
"""Single Redis node: ``redis://``, ``rediss://`` (TLS), ``unix:///path.sock``. Driver: redis-py.

Every operation is one Lua script call, one round trip (``_backends/redis/lua/`` has the scripts and the grant
rule, ``_backends/redis/keys.py`` the key layout). A plain ``lock(name)`` is the redis-py layout: key = the name, value = the
token, ``PX`` = the lease, so a redis-py ``Lock(name)`` and a distlock lock exclude each other. The fence
comes from the store's one counter (one per hash slot on a cluster) in the same script; nothing of a name
stays on the server once it is free. A store remembers the marker of each counter it used and refuses to
acquire when the counter went missing (flush, eviction, restart without persistence).

Waiting is push: a waiter that failed is entered in the name's wait queue (with its own short deadline,
refreshed on every re-check), subscribes to the name's channel on the store's one pub/sub connection,
re-checks once the subscription is confirmed, then sleeps until a release publishes its token (one
waiter per release) or until the holder's lease ends (a holder that never signals, such as a redis-py
Lock or a crashed process, cannot strand it).

URL options: ``wait_replicas=N`` and ``wait_timeout=ms`` (WAIT for N replicas after each acquire;
fewer acknowledgements -> the lock is released and ``BackendError`` is raised), ``connect_timeout``
and ``socket_timeout`` (seconds), ``cluster`` (``auto``: a seed that reports ``cluster_enabled:1`` is
used through redis-py's ``RedisCluster``; ``true``/``false`` force it), ``fence_counter`` (the key of the
store's fence counter, default ``distlock:fences``; on a cluster the prefix of the per-slot counters: a tenant
limited to its own key pattern names one inside it), plus redis-py's own URL options (``ssl_*``,
``client_name``, ...).

Elections (``store.election``): a candidate is a fair exclusive claim whose record (owner id, 0x1F, value)
is the owner part of its holder details, so ``inspect`` and ``leader`` read the value where they read the
owner; the exclusive key keeps the token (redis-py's layout). ``proclaim`` rewrites that record if the token
still holds the key; grants, releases and proclaims of a candidate publish the election NOTICE on the name's
channel, which the observers' ``RedisWatch`` listens to (``keys.py``, in the folder above).

Redis Cluster: every key of one name is in the slot of the name (hash tag ``{name}``), so each script
runs on the one master that owns the name; the wake-up is a classic ``PUBLISH``, which the cluster
broadcasts to every node, so the one pub/sub connection may be on any node. A name whose keys would fall
in different slots (it contains ``}``) is refused with ``ConfigError``.

The whole Redis family's folder is mapped in ``distlock/_backends/redis/__init__.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ...._sync.backend import SyncWatch
from ...._core import ids
from ...._core.latch import LatchState
from ...._core.timing import WAITER_TTL, monotonic
from ...._core.types import Capabilities, Claim, Grant, LockInfo, Mode, PrimitiveInfo, primitive_infos
from ...._errors import BackendError, ConfigError
from ...._given import given
from ...._url import StoreConfig
from .. import calls as rc
from ..remap import remap_option
from . import barrier, latch
from .attempt import Attempt
from .node import Node, connect_node
from .options import GIVEN_CLUSTER, cluster_option, driver_url, fence_counter, reject_unknown, timeouts
from .releases import ReleaseLog, RenewCalls, RenewingBackend
from .watch import RedisWatch


class Backend(RenewingBackend):
    capabilities = Capabilities(modes=frozenset(Mode), fair=True, needs_renewal=True, elections=True, downgrade=True)

    def __init__(self, config: StoreConfig, node: Node, wait_replicas: int, wait_timeout_ms: int) -> None:
        super().__init__(config)
        self.node = node
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        self.releases = ReleaseLog()

    @classmethod
    def open(cls, config: StoreConfig) -> Backend:
        cluster = cluster_option(config)
        wait_replicas = config.pop_int("wait_replicas", 0)
        if wait_replicas < 0:
            raise ConfigError("wait_replicas must be >= 0", backend=config.scheme)
        wait_timeout = config.pop_int("wait_timeout", 1000)
        if wait_timeout <= 0:
            raise ConfigError("wait_timeout (ms) must be > 0", backend=config.scheme)
        connect_timeout, socket_timeout = timeouts(config)
        counter = fence_counter(config)
        remap = remap_option(config)
        if wait_replicas:
            socket_timeout = max(socket_timeout, wait_timeout / 1000.0 + 1.0)
        url = driver_url(config)
        reject_unknown(config)
        client = given(config)
        if client is not None and cluster:
            raise ConfigError(GIVEN_CLUSTER, backend=config.scheme)
        args = (url, config.scheme, config.password, connect_timeout, socket_timeout)
        node = connect_node(*args, "server", cluster=bool(cluster), counter=counter, given=client, remap=remap)
        try:
            node.ping()
            if cluster is None and node.is_cluster():  # auto: a cluster node was given as the seed
                if client is not None:
                    raise ConfigError(GIVEN_CLUSTER, backend=config.scheme)
                node.close()
                node = connect_node(*args, "cluster", cluster=True, counter=counter, remap=remap)
                node.ping()
        except BaseException:
            node.close()
            raise
        return cls(config, node, wait_replicas, wait_timeout)

    def name_refused(self, name: str) -> str | None:
        return self.node.name_refused(name)

    def attempt(self, claim: Claim) -> Attempt:
        self.node.check_slot(claim.name)
        return Attempt(self, claim)

    def forget(self, token: str) -> None:
        self.releases.forget(token)

    def takes_handover(self, claim: Claim) -> bool:
        """Whether a release may grant ``claim`` the name directly (``docs/redis.md``, direct hand-over): the
        exclusive kinds, unless every acquire must first be acknowledged by replicas (``WAIT`` runs only on
        the acquirer's own request)."""
        return not claim.mode.shared and not self.wait_replicas

    def handed_over(self, claim: Claim, handed: rc.HandOver) -> Grant | None:
        """The grant of a hand-over the release pushed: held since the grant, with a lease that counts from
        the send of the try that queued us (``handed.since``, before the grant) and lasts the TTL capped at the
        queue deadline; the first renewal extends it to the TTL. ``valid_for`` counts from now, which is no
        earlier than when the caller started this try, so the local lease end stays at or before that bound.
        None when less than half of that lease is left (``ReleaseLog.handed``): the caller tries, which confirms."""
        left = self.releases.handed(claim, handed.since)
        return None if left is None else Grant(True, fence=handed.fence, valid_for=left)

    def try_once(self, claim: Claim, reply: str = "") -> Grant:
        """One try; ``reply``: the waiter's reply channel ('' = none, see ``rc.acquire_args``)."""
        node = self.node
        sent = monotonic()
        args = rc.acquire_args(
            claim.token,
            claim.mode,
            claim.ttl,
            rc.permits_arg(claim),
            claim.fair,
            claim.record,
            WAITER_TTL,
            node.fences.marker(claim.name),
            rc.stamp_of(sent) if self.takes_handover(claim) else "",
            reply,
            claim.companion,
        )
        if not self.wait_replicas:
            reply = node.script("acquire", claim.name, *args, timeout=node.budget(claim.ttl))
            node.fences.learn(claim.name, reply)
            grant = rc.grant_of(reply, claim)
            if grant.acquired:
                self.releases.confirmed(claim, sent)
            return grant
        (reply,), acks = node.replicated(
            "acquire", [(claim.name, args)], self.wait_replicas, self.wait_timeout_ms, "acquire", None
        )
        node.fences.learn(claim.name, reply)
        grant = rc.grant_of(reply, claim)
        if grant.acquired:
            self.releases.confirmed(claim, sent)
        if grant.acquired and int(acks) < self.wait_replicas:
            self.node.script("release", claim.name, *rc.release_args(claim))
            raise BackendError(
                f"only {int(acks)} of {self.wait_replicas} replicas acknowledged the lock within "
                f"{self.wait_timeout_ms} ms; released it (wait_replicas)",
                name=claim.name,
                backend=self.scheme,
            )
        return grant

    def release(self, claim: Claim) -> bool:
        unsure: list[bool] = []
        try:
            reply = self.node.script(
                "release", claim.name, *rc.release_args(claim), unsure=unsure, timeout=self.node.budget(claim.ttl)
            )
        except BackendError:
            self.releases.unsure(claim.token)
            raise
        return self.releases.released(claim.token, int(reply) == 1, True, bool(unsure))

    def renew_round(self, claims: Sequence[Claim], calls: RenewCalls, shortest: float, sent: float) -> list[bool]:
        budget = self.node.budget(shortest)
        if not self.wait_replicas:
            return self.told(claims, self.node.batch("renew", calls, "renew", budget))
        # A renewal the replicas have not acknowledged must not move the local lease end past the expiry a
        # promoted replica would have: it counts as a renewal that failed to answer (tried again at the next
        # tick; the local lease runs out, and `lost` fires, no later than the last acknowledged expiry).
        replies, acks = self.node.replicated(
            "renew", calls, self.wait_replicas, self.wait_timeout_ms, "renew", budget
        )
        if acks < self.wait_replicas:
            raise BackendError(
                f"only {acks} of {self.wait_replicas} replicas acknowledged the renewal within "
                f"{self.wait_timeout_ms} ms (wait_replicas): the local lease is not extended",
                backend=self.scheme,
            )
        return self.told(claims, replies)

    def told(self, claims: Sequence[Claim], replies: Sequence[object]) -> list[bool]:
        """The renewal replies as extended or not; a release request one of them carries is told."""
        out = []
        for claim, reply in zip(claims, replies, strict=True):
            ok, request = rc.renew_reply(reply)
            if request is not None:
                self.revoked(claim.token, *request)
            out.append(ok)
        return out

    def set_permits(self, name: str, permits: int) -> bool:
        self.node.check_slot(name)
        return int(self.node.script("resize", name, str(permits))) == 1

    def request_release(self, name: str, reason: str) -> bool:
        self.node.check_slot(name)
        return int(self.node.script("request", name, ids.new_token()[:12], reason)) > 0

    def holds(self, claim: Claim) -> bool:
        return int(self.node.script("holds", claim.name, claim.token, claim.mode.value)) == 1

    def proclaim(self, claim: Claim, value: str) -> bool:
        record = replace(claim, value=value).record
        reply = self.node.script("proclaim", claim.name, claim.token, record, timeout=self.node.budget(claim.ttl))
        return int(reply) == 1

    def watch(self, name: str) -> SyncWatch:
        self.node.check_slot(name)
        watch = RedisWatch([self.node.listener], 1, name)
        watch.arm()
        return watch

    def inspect(self, name: str) -> LockInfo | None:
        self.node.check_slot(name)
        (snap,) = self.node.snapshots([name])
        return snap.info(name)

    def list(self, prefix: str) -> list[LockInfo]:
        names = self.node.names(prefix)
        infos = [s.info(n) for n, s in zip(names, self.node.snapshots(names), strict=True)]
        return [i for i in infos if i is not None]

    def break_lock(self, name: str) -> bool:
        self.node.check_slot(name)
        tokens = self.node.script("break", name)
        for raw in tokens:
            token = raw.decode() if isinstance(raw, bytes) else str(raw)
            self.releases.forget(token)
            self.lost(token, "broken by an admin (break_lock)")
        return bool(tokens)

    def list_primitives(self, prefix: str) -> Sequence[PrimitiveInfo] | None:
        latches = latch.listing(self.node, prefix)
        return primitive_infos(latches, barrier.listing(self.node, prefix), prefix)

    def latch_refused(self) -> str | None:
        return None

    def latch_open(self, name: str, count: int | None, round_id: str) -> LatchState | None:
        return latch.open_latch(self.node, name, count, round_id)

    def latch_count_down(self, name: str, round_id: str, step: str, linger: float) -> int:
        return latch.count_down(self.node, name, round_id, step, linger)

    def latch_watch(self, name: str) -> SyncWatch:
        return latch.watch(self.node, name)

    def barrier_refused(self, kind: str) -> str | None:
        return None

    def barrier_read(self, kind: str, name: str) -> tuple[bytes | str | None, object]:
        return barrier.read(self.node, kind, name)

    def barrier_cas(self, kind: str, name: str, version: object, data: str | None, keep_ms: int) -> bool:
        return barrier.cas(self.node, kind, name, version, data, keep_ms)

    def close(self) -> None:
        self.node.close()

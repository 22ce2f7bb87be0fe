"""One Redis server or one Redis Cluster, as the backends use it (``Node``): the client, the scripts by
name (loaded once, reloaded after a restart), one call or a batch in one round trip on distlock's own request
path (``wire.py``; on a cluster one per master, by the slot of the name), the wake-up listener
(``listener.py``), the fence markers (``fences.py``) and the driver's errors as ``BackendError``.

Redis Cluster: every key of one name is in the slot of the name (hash tag ``{name}``), so each script runs on
the one master that owns the name; a name whose keys would fall in different slots (it contains ``}``) is
refused with ``ConfigError`` (``Node.check_slot``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from redis.crc import key_slot
from redis.exceptions import NoPermissionError, NoScriptError, RedisClusterException, RedisError

from ...._errors import BackendError, ConfigError
from ...._url import scrub
from .. import _driver_async as drv
from .. import keys as rk
from .. import lua
from ..calls import Snapshot, decode_inspect, packed_call, packed_command
from ..remap import Remap
from . import options
from .fences import Markers, check_server
from .listener import Listener
from .options import derive
from .sentinel import SwitchWatch, sentinel_pool
from .wire import Restarted, Wire, read_run_id

log = logging.getLogger("distlock")


#: what a failed Redis call raises: redis-py's cluster client reports a cluster it cannot reach (every link
#: silent or refused) as ``RedisClusterException``, which is not a ``RedisError``; both become BackendError
FAILED = (RedisError, RedisClusterException)


class Node:
    """One Redis server (or one Redis Cluster): the client, its wake-up listener, scripts by name, errors ->
    BackendError."""

    def __init__(
        self,
        client: drv.AnyClient,
        scheme: str,
        secret: str | None,
        label: str,
        socket_timeout: float = 5.0,
        counter: str = rk.NODE_COUNTER,
    ) -> None:
        self.cluster = isinstance(client, drv.ClusterClient)
        # the key of the fence counter (on a cluster: the prefix of the per-slot counters), fixed per store
        bad = rk.check_counter(counter, self.cluster)
        if bad is not None:
            raise ConfigError(bad, backend=scheme)
        self.counter = counter
        self.client = client
        self.scheme = scheme
        self.secret = secret
        self.label = label
        self.socket_timeout = socket_timeout
        self.listener = Listener(client)
        # the hot path: pre-encoded script calls on distlock's own connections (on a cluster, one set of them
        # per master, chosen by the name's slot in redis-py's slot map)
        self.wire = None if isinstance(client, drv.ClusterClient) else Wire.of(client)
        self._wires: dict[str, Wire] = {}
        # the marker of each fence counter as this node showed it to us
        self.fences = Markers(self.cluster, counter)
        # Redlock: the server's run id as last read on a new connection (None: not read yet)
        self.run_id: str | None = None
        # Sentinel: every connection finds the master again as soon as the sentinels announce a new one
        pool = sentinel_pool(client)
        self.sentinel = pool is not None
        self.switches = SwitchWatch(pool, self.follow) if pool is not None else None

    async def follow(self) -> None:
        """Sentinel announced a new master: the pool drops its idle connections to the old one (redis-py does
        that when the address it reads differs), distlock's own request path stops using its connections
        (a reply still due from the old master makes its request go again to the new one) and the wake-up
        listener re-subscribes on the new master, waking every waiter to re-check."""
        log.info("Redis %s: Sentinel announced a new master; reconnecting", self.label)
        client: Any = self.client
        try:
            await client.connection_pool.get_master_address()
        except FAILED as exc:  # the next connection asks again
            log.debug("Redis %s: master lookup after the switch failed: %s", self.label, exc)
        if self.wire is not None:
            await self.wire.moved()
        await self.listener.moved()

    @property
    def plain_wire(self) -> Wire:
        """The short path of a single server (Redlock masters are never clusters)."""
        assert self.wire is not None
        return self.wire

    async def is_cluster(self) -> bool:
        """Does the server say it is a Redis Cluster node (``INFO cluster``)? False if it may not say."""
        try:
            info = await drv.command(self.client, "INFO", "cluster")
        except RedisError:
            return False
        return isinstance(info, dict) and int(info.get("cluster_enabled", 0)) == 1

    def name_refused(self, name: str) -> str | None:
        """Why this store cannot take ``name`` (a key of another name or a fence counter; on a cluster also a
        name whose keys would not share a slot), or None."""
        if self.cluster and not same_slot(name):
            return SLOT_REFUSAL
        return rk.name_refused(name, self.counter)

    def check_slot(self, name: str) -> None:
        """On a cluster, refuse a name whose keys would not share one hash slot (a ``}`` in the name)."""
        if self.cluster and not same_slot(name):
            raise ConfigError(SLOT_REFUSAL, name=name, backend=self.scheme)

    def error(self, exc: BaseException, what: str, reason: str | None = None) -> BackendError:
        if reason is None and isinstance(exc, NoPermissionError):
            # Redis names neither the key nor the fix; the counter is the key a tenant's grant most often lacks
            counter = rk.counter_key("x", self.cluster, self.counter).split("{")[0] + ("{*}" if self.cluster else "")
            reason = (
                f"{exc} (the ACL user needs the name's keys NAME and {{NAME}}:* and the fence counter "
                f"{counter}: grant ~{counter.replace('{*}', '*')}, or keep the counter inside its key pattern "
                f"with ?fence_counter=<prefix>distlock:fences)"
            )
        return BackendError(scrub(f"Redis {self.label}: {what}: {reason or exc}", self.secret), backend=self.scheme)

    async def load(self, timeout: float | None = None) -> None:
        """Load the scripts: at open, and again when a call finds them gone (a restart, or a replica promoted
        by a failover: scripts are not replicated). On distlock's own connections, each try bounded by
        ``timeout`` as the call that found them gone is: through redis-py's pool this waited up to its 5 s
        socket timeout and raced with the pool's reset when the sentinels announced the new master (a waiter
        right after a failover sat 5 s in it, or failed with a closed-socket ``ValueError``). A cluster:
        redis-py routes ``SCRIPT LOAD`` to every master."""
        if self.cluster:
            for text in lua.SCRIPTS.values():
                await drv.command(self.client, "SCRIPT LOAD", text)
            return
        packs = [packed_command("SCRIPT", "LOAD", text) for text in lua.SCRIPTS.values()]
        for reply in await self.plain_wire.call_many(packs, None, timeout):
            if isinstance(reply, RedisError):
                raise reply

    async def ping(self) -> None:
        try:
            if self.wire is not None:  # on distlock's own path, which keeps the caller's deadline (connect: -w S)
                await self.wire.call(packed_command("PING"))
            else:
                await drv.command(self.client, "PING")
            if self.wire is not None and self.wire.on_connect is not None and self.run_id is None:
                info = await drv.command(self.client, "INFO", "server")
                self.run_id = str(info.get("run_id")) if isinstance(info, dict) else None
            await check_server(self.client, self.label, self.scheme)
            await self.load()
        except FAILED as exc:
            reason = await self.switches.why(exc) if self.switches is not None else None
            raise self.error(exc, "cannot connect", reason) from exc

    def watch_restarts(self) -> None:
        """Redlock: read the run id on every new connection of the short path; a changed run id (the server
        restarted) fails the request that was prepared with the old one (``Restarted``)."""
        self.plain_wire.on_connect = self._on_connect

    async def _on_connect(self, conn: Any, expect: str | None) -> None:
        run = await read_run_id(conn)
        self.run_id = run
        if expect is not None and run != expect:  # the request was prepared with another run's id
            raise Restarted(f"Redis {self.label} restarted (new run id): its fence counter is re-checked")

    def call(self, script: str, name: str, *args: Any) -> tuple[Any, ...]:
        keys = rk.keys(name, self.cluster, self.counter)
        return ("EVALSHA", lua.SHA[script], rk.NKEYS, *keys, rk.channel(name), *args)

    async def run(self, commands: Sequence[Sequence[Any]], what: str) -> list[Any]:
        """Commands in one round trip (an acquire and its ``WAIT``, inspections); reloads the scripts once if
        the server lost them (restart). On distlock's own connections, as every call of the lock path: through
        redis-py's pool, a call raced with the pool's reset when the sentinels announced a new master (a
        closed-socket ``ValueError`` out of ``acquire()``). A cluster: redis-py's pipeline, which routes by
        slot."""
        if self.wire is None:
            try:
                try:
                    return await drv.pipeline(self.client, commands)
                except NoScriptError:
                    await self.load()
                    return await drv.pipeline(self.client, commands)
            except FAILED as exc:
                raise self.error(exc, what) from exc
        return await self._own([packed_command(*(str(part) for part in c)) for c in commands], what, None)

    def budget(self, ttl: float) -> float:
        """How long one try of a call about a lease of ``ttl`` may wait for its reply: a third of the TTL
        (at least 50 ms), at most the socket timeout. A try that runs out closes its connection and is sent
        once more on a new one, so one silent (half-open) connection costs a third of a lease, not all."""
        return min(self.socket_timeout, max(0.05, ttl / 3.0))

    async def script(
        self,
        script: str,
        name: str,
        *args: str | int,
        unsure: list[bool] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """One script call on ``name`` (one round trip); reloads the scripts once after a restart. ``unsure``
        gets a ``True`` when the call was sent again after a try whose outcome is unknown; ``timeout``
        bounds each try (below the socket timeout)."""
        try:
            try:
                return await self._send(script, name, args, unsure, timeout)
            except NoScriptError:
                await self.load(timeout)
                return await self._send(script, name, args, unsure, timeout)
        except FAILED as exc:
            raise self.error(exc, script) from exc

    async def batch(
        self, script: str, calls: Sequence[tuple[str, Sequence[str | int]]], what: str, timeout: float | None
    ) -> list[Any]:
        """The same script on many names in one round trip (renewals), each try bounded by ``timeout``, on
        distlock's own connections (a cluster: redis-py's pipeline, which routes by slot)."""
        if self.wire is None:
            return await self.run([self.call(script, n, *a) for n, a in calls], what)
        return await self._own([packed_call(script, n, *a, counter=self.counter) for n, a in calls], what, timeout)

    async def _own(
        self, packs: Sequence[bytes], what: str, timeout: float | None, wire: Wire | None = None
    ) -> list[Any]:
        """Packed requests in one round trip on distlock's own connections (``wire``: a cluster master's),
        each try bounded by ``timeout``; the scripts loaded again once if the server lost them; an error reply
        raises."""
        wire = wire or self.wire
        assert wire is not None
        if self.switches is not None:
            self.switches.ensure()  # a forked child's copy follows failovers too
        try:
            replies = await wire.call_many(packs, None, timeout)
            if any(isinstance(r, NoScriptError) for r in replies):
                await self.load(timeout)
                replies = await wire.call_many(packs, None, timeout)
        except FAILED as exc:
            raise self.error(exc, what) from exc
        for r in replies:
            if isinstance(r, RedisError):
                raise self.error(r, what) from r
        return replies

    def _master_wire(self, name: str) -> Wire:
        """A cluster: distlock's own connections to the master of ``name``'s slot in the client's slot map."""
        assert isinstance(self.client, drv.ClusterClient)
        key, made = drv.route(self.client, name)
        wire = self._wires.get(key)
        if wire is None:
            wire = self._wires[key] = Wire(made)
        return wire

    async def replicated(
        self,
        script: str,
        calls: Sequence[tuple[str, Sequence[str | int]]],
        replicas: int,
        wait_ms: int,
        what: str,
        timeout: float | None,
    ) -> tuple[list[Any], int]:
        """``script`` on each of ``calls`` and then ``WAIT replicas wait_ms``, in one round trip on ONE
        connection per master (``WAIT`` counts the writes made on its own connection, so it must follow them
        there): (the replies in the order of ``calls``, the fewest replicas any master acknowledged). On a
        cluster the names are grouped by the master of their slot; a slot that moved or a master that is away
        has the slot map read again and the group sent once more (the scripts are idempotent per token), then
        an error."""
        wait = packed_command("WAIT", str(replicas), str(wait_ms))
        if self.wire is not None:
            replies = await self._own(
                [*(packed_call(script, n, *a, counter=self.counter) for n, a in calls), wait], what, timeout
            )
            return replies[:-1], int(replies[-1])
        assert isinstance(self.client, drv.ClusterClient)
        groups: dict[str, list[int]] = {}
        for i, (n, _a) in enumerate(calls):
            groups.setdefault(drv.route(self.client, n)[0], []).append(i)
        out: list[Any] = [None] * len(calls)
        acks: list[int] = []
        for idx in groups.values():
            packs = [packed_call(script, calls[i][0], *calls[i][1], cluster=True, counter=self.counter) for i in idx]
            for attempt in (1, 2):
                try:
                    replies = await self._own([*packs, wait], what, timeout, self._master_wire(calls[idx[0]][0]))
                    break
                except BackendError as exc:
                    if attempt == 2 or not isinstance(exc.__cause__, options.REROUTE):
                        raise
                    await drv.initialize(self.client)  # the slot moved or its master changed: read the map again
            for i, r in zip(idx, replies[:-1], strict=True):
                out[i] = r
            acks.append(int(replies[-1]))
        return out, min(acks, default=replicas)

    async def _send(
        self,
        script: str,
        name: str,
        args: tuple[str | int, ...],
        unsure: list[bool] | None = None,
        timeout: float | None = None,
    ) -> Any:
        if self.wire is not None:
            if self.switches is not None:
                self.switches.ensure()  # a forked child's copy follows failovers too
            return await self.wire.call(packed_call(script, name, *args, counter=self.counter), unsure, timeout)
        assert isinstance(self.client, drv.ClusterClient)
        try:  # straight to the master of the name's slot ...
            packed = packed_call(script, name, *args, cluster=True, counter=self.counter)
            return await self._master_wire(name).call(packed, unsure, timeout)
        except options.REROUTE:  # ... unless the slot moved or the master is away: redis-py's routing sorts it out
            if unsure is not None:
                unsure.append(True)
            return await drv.command(self.client, *self.call(script, name, *args))

    async def names(self, prefix: str, suffix: str = "i") -> list[str]:
        """Names with live distlock details whose name starts with ``prefix`` (SCAN, not KEYS); with ``suffix``,
        the names whose ``{N}:<suffix>`` key exists (a latch's, a barrier's)."""
        found: set[str] = set()
        pattern = "{" + rk.glob_escape(prefix) + "*}:" + suffix
        try:  # scan_iter: one SCAN cursor per node (every master of a cluster)
            async for raw in self.client.scan_iter(match=pattern, count=1000):
                key = raw.decode() if isinstance(raw, bytes) else str(raw)
                n = rk.name_of_info_key(key, suffix)
                if n is not None and n.startswith(prefix):
                    found.add(n)
        except FAILED as exc:
            raise self.error(exc, "list") from exc
        return sorted(found)

    async def snapshots(self, names: Sequence[str]) -> list[Snapshot]:
        if not names:
            return []
        replies = await self.run([self.call("inspect", n) for n in names], "inspect")
        return [decode_inspect(r) for r in replies]

    async def aclose(self) -> None:
        if self.switches is not None:
            await self.switches.close()
        await self.listener.close()
        for wire in [self.wire, *self._wires.values()]:
            if wire is not None:
                await wire.close()
        await drv.close(self.client)


SLOT_REFUSAL = (
    "on Redis Cluster a lock name may not contain '}': its keys {name}:... would not share the hash slot of the name"
)


async def connect_node(
    url: str,
    scheme: str,
    secret: str | None,
    connect_timeout: float,
    socket_timeout: float,
    label: str,
    cluster: bool = False,
    counter: str = rk.NODE_COUNTER,
    given: object | None = None,
    remap: Remap | None = None,
) -> Node:
    """A ``Node`` on a client made from ``url``, or (``given``: the caller's redis-py client or pool, see
    ``connect(client=...)``) on distlock's own client with the given one's connection parameters."""
    client: drv.AnyClient
    if given is not None:
        try:
            client = derive(given, connect_timeout, socket_timeout)
        except ValueError as exc:
            raise ConfigError(str(exc), backend=scheme) from None
        secret = secret or client.connection_pool.connection_kwargs.get("password")
        return Node(client, scheme, secret, label, socket_timeout, counter)
    if cluster and urlsplit(url).path.strip("/") not in ("", "0"):
        raise ConfigError("Redis Cluster has only database 0 (drop /N from the URL)", backend=scheme)
    try:
        if cluster:
            client = await options.connect_cluster(
                url, socket_connect_timeout=connect_timeout, socket_timeout=socket_timeout, remap=remap
            )
        else:
            client = options.connect(
                url, socket_connect_timeout=connect_timeout, socket_timeout=socket_timeout, remap=remap
            )
    except (ValueError, TypeError) as exc:
        raise ConfigError(scrub(f"bad Redis URL option: {exc}", secret), backend=scheme) from None
    except RedisError as exc:
        raise BackendError(scrub(f"Redis {label}: cannot connect: {exc}", secret), backend=scheme) from exc
    try:
        return Node(client, scheme, secret, label, socket_timeout, counter)
    except ConfigError:
        await drv.close(client)
        raise


def same_slot(name: str) -> bool:
    """Do all keys of ``name`` hash to one Redis Cluster slot? (Always when the name has no ``}``.)"""
    return "}" not in name or len({key_slot(k.encode()) for k in rk.keys(name, cluster=True)}) == 1

"""A loopback TCP proxy that injects gray link failures between one client and one server.

Gray failures are the ones a kill or a pause does not show: the link stays "up" (no FIN, no RST, the
sockets stay open) while nothing gets through, or replies come late. The proxy runs its own asyncio
loop in a daemon thread, so sync tests, asyncio tests and the checker drive it the same way:

* ``FaultProxy.freeze`` -- a silent partition: every connection, open or new, stops forwarding
  in both directions. Bytes are held, not dropped; ``heal`` delivers them in order, as TCP would
  after the partition heals (a retransmission). New connections are accepted but get nothing through.
* ``FaultProxy.half_open`` -- only the connections open *now* go silent for good (what a client sees
  when the server host rebooted or a NAT forgot the flow): their bytes vanish. Connections opened later
  work normally. This is the "one dead connection in a pool" case.
* ``FaultProxy.delay`` -- every chunk is forwarded ``seconds`` late (order kept per direction).
* ``FaultProxy.delay_next`` -- the next chunk that contains ``pattern`` (client -> server, or the
  reverse) is held ``seconds`` before it is forwarded: a COMMIT, a renewal script, a keepalive.
* ``FaultProxy.silence_at`` -- the same, but the bytes before ``pattern`` go through at once: the link
  goes silent at that byte, in the middle of a message or between two messages the client wrote together.

Only loopback: the proxy listens on 127.0.0.1 and forwards to the address it was given, which the
callers take from a URL they own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

T = TypeVar("T")

UP = "up"  # client -> server
DOWN = "down"  # server -> client


@dataclass
class _Rule:
    pattern: bytes
    seconds: float
    direction: str
    hit: threading.Event = field(default_factory=threading.Event)
    split: bool = False  # forward the bytes before the pattern first (``silence_at``)


class _Link:
    """One proxied connection: two pumps, and whether this connection was made silent for good."""

    def __init__(self) -> None:
        self.dead = False
        self.writers: list[asyncio.StreamWriter] = []


class FaultProxy:
    """``FaultProxy(host, port).start()``; clients connect to ``proxy.port`` on 127.0.0.1."""

    def __init__(self, host: str, port: int, listen_host: str = "127.0.0.1") -> None:
        self.target = (host, port)
        self.listen_host = listen_host
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="distlock-fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._thawed = asyncio.Event()  # set: forwarding; clear: frozen (created on the proxy's loop below)
        self._delay = 0.0
        self._rules: list[_Rule] = []
        self._mutex = threading.Lock()

    # -- life cycle ------------------------------------------------------------------------------------
    def start(self) -> Self:
        self._thread.start()
        self._call(self._start())
        return self

    async def _start(self) -> None:
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._server = await asyncio.start_server(self._accept, self.listen_host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.port}"

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        self._thawed.set()
        for link in list(self._links):
            link.dead = True  # no EOF passed on: the pumps end with their sockets
            for w in link.writers:
                w.close()
        pumps = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if pumps:
            _, pending = await asyncio.wait(pumps, timeout=2.0)
            for task in pending:  # one holding a chunk (``delay_next``) for longer: not left to the loop's end
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults ----------------------------------------------------------------------------------------
    def freeze(self) -> None:
        """Silent partition of every connection (open and new) until ``heal``."""
        self._loop.call_soon_threadsafe(self._thawed.clear)

    def half_open(self) -> int:
        """Make the connections open now silent for good; returns how many there were."""
        return self._call(self._half_open())

    async def _half_open(self) -> int:
        for link in self._links:
            link.dead = True
        return len(self._links)

    def cut(self) -> int:
        """Close the connections open now, at both ends: a dropped link that both sides notice at once (a
        firewall's reset, a restarted load balancer); new connections pass. Returns how many there were."""
        return self._call(self._cut())

    async def _cut(self) -> int:
        links = list(self._links)
        for link in links:
            for w in link.writers:
                w.close()
        return len(links)

    def delay(self, seconds: float) -> None:
        """Forward every chunk ``seconds`` late, from now on (0 stops it)."""
        self._delay = max(0.0, seconds)

    def delay_next(self, pattern: bytes, seconds: float, direction: str = UP) -> threading.Event:
        """Hold the next chunk containing ``pattern`` for ``seconds``; the event is set when one matched."""
        if direction not in (UP, DOWN):
            raise ValueError(f"direction must be {UP!r} or {DOWN!r}")
        rule = _Rule(pattern, seconds, direction)
        with self._mutex:
            self._rules.append(rule)
        return rule.hit

    def silence_at(self, pattern: bytes, seconds: float, direction: str = UP) -> threading.Event:
        """The link goes silent for ``seconds`` right before the next ``pattern``: the bytes of its chunk before
        it are forwarded, the rest held. The event is set once those bytes were forwarded."""
        hit = self.delay_next(pattern, seconds, direction)
        with self._mutex:
            self._rules[-1].split = True
        return hit

    def heal(self) -> None:
        """End freeze, delays and pending rules (connections made half-open stay dead)."""
        self._delay = 0.0
        with self._mutex:
            self._rules.clear()
        self._loop.call_soon_threadsafe(self._thawed.set)

    def connections(self) -> int:
        return self._call(self._count())

    async def _count(self) -> int:
        return len(self._links)

    # -- forwarding ------------------------------------------------------------------------------------
    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10.0)

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        link = _Link()
        try:
            s_reader, s_writer = await asyncio.open_connection(*self.target)
        except OSError:
            c_writer.close()
            return
        link.writers = [c_writer, s_writer]
        self._links.add(link)
        try:
            await asyncio.gather(self._pump(link, c_reader, s_writer, UP), self._pump(link, s_reader, c_writer, DOWN))
        finally:
            self._links.discard(link)
            for w in link.writers:
                w.close()

    def _rule_for(self, chunk: bytes, direction: str) -> _Rule | None:
        with self._mutex:
            for rule in self._rules:
                if rule.direction == direction and rule.pattern in chunk:
                    self._rules.remove(rule)
                    return rule
        return None

    async def _pump(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str
    ) -> None:
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                if link.dead:
                    continue  # half-open: the bytes vanish, nobody is told
                rule = self._rule_for(chunk, direction)
                if rule is not None:
                    if rule.split:
                        at = chunk.find(rule.pattern)
                        head, chunk = chunk[:at], chunk[at:]
                        await self._thawed.wait()
                        if head and not link.dead:
                            writer.write(head)
                            await writer.drain()
                    rule.hit.set()
                    await asyncio.sleep(rule.seconds)
                if self._delay:
                    await asyncio.sleep(self._delay)
                await self._thawed.wait()  # frozen: hold the bytes until healed
                if link.dead:
                    continue
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not link.dead:
                # A real end of stream is passed on (a FIN is not a gray failure); a dead link stays silent.
                try:
                    writer.write_eof()
                except (OSError, RuntimeError):
                    pass

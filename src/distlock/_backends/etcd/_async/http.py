"""A small HTTP/1.1 client for etcd's JSON gateway, written once (the sync twin is generated).

It does only what the gateway needs: ``POST`` a JSON body, read the answer (streamed for watch and lease
keepalive), keep connections alive per member and reuse them. The HTTP/1.1 messages are h11's: each
connection has an ``h11.Connection`` that writes the request and parses the answer (status line,
headers, ``Content-Length`` or chunked framing, whether the connection can be reused). What is ours is
the rest, kept lean because a general client (httpx: ~1 ms of CPU per request here, more than etcd spends
on a put on loopback) costs more than the round trip it makes: the pool, one ``send`` per request and
reads of whatever has arrived. The connection itself (open, send, receive, close: the only part that differs
between asyncio and threads) is the hand-kept driver pair ``_driver_async.py`` / ``_driver_sync.py`` (this folder's parent).
The JSON the gateway speaks, and what to do when a member fails, is ``gateway.py``'s.

Errors are ``OSError``: ``TimeoutError`` when the deadline passed, ``ConnectionError`` for a closed or
garbled connection, ``ssl.SSLError`` and the socket's own errors as they come.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass

import h11

from ...._core import forks
from ...._core.timing import monotonic
from .. import _driver_async as etcdio

#: idle connections kept per member
_MAX_IDLE = 32
#: request heads kept for reuse (distinct member, path, body length and headers)
_MAX_HEADS = 512

Member = tuple[str, int]


@dataclass
class Answer:
    """A whole answer."""

    status: int
    body: bytes = b""


class _Link:
    """One connection and its HTTP/1.1 state."""

    __slots__ = ("http", "io")

    def __init__(self, io: etcdio.Conn) -> None:
        self.io = io
        self.http = h11.Connection(our_role=h11.CLIENT)

    async def exchange(self, request: h11.Request, body: bytes, deadline: float) -> int:
        """Send a request (one write) and read up to its answer's head; the status code."""
        http = self.http
        out = [http.send(request), http.send(h11.Data(data=body)), http.send(h11.EndOfMessage())]
        await self.io.send(b"".join(b for b in out if b), deadline)
        while True:
            event = await self._event(deadline)
            if type(event) is h11.Response:
                return event.status_code
            if type(event) is not h11.InformationalResponse:
                raise ConnectionError(f"unexpected HTTP event {type(event).__name__}")

    async def data(self, deadline: float) -> bytes | None:
        """The next piece of the answer's body as it arrives; None at its end."""
        while True:
            event = await self._event(deadline)
            if type(event) is h11.Data:
                return bytes(event.data)
            if type(event) is h11.EndOfMessage:
                return None

    async def _event(self, deadline: float) -> h11.Event:
        """The next event of the answer (``Response``, ``Data``, ``EndOfMessage``), reading as needed."""
        http = self.http
        while True:
            try:
                event = http.next_event()
            except h11.RemoteProtocolError as exc:
                raise ConnectionError(f"bad HTTP answer: {exc}") from exc
            if isinstance(event, h11.Event):
                if type(event) is h11.ConnectionClosed:
                    raise ConnectionError("connection closed by the server")
                return event
            if event is not h11.NEED_DATA:  # PAUSED: bytes past the end of the answer
                raise ConnectionError("unexpected bytes after an HTTP answer")
            http.receive_data(await self.io.recv(deadline))

    def next_cycle(self) -> bool:
        """Make the connection ready for the next request; False if it cannot carry one (the answer was
        not read to its end, or a side asked to close)."""
        http = self.http
        if http.our_state is h11.DONE and http.their_state is h11.DONE:
            http.start_next_cycle()
            return True
        return False

    def close(self) -> None:
        self.io.close()


@dataclass
class Stream:
    """A streamed answer (watch): ``status`` and its body line by line."""

    status: int
    _link: _Link
    _deadline: float
    _done: bool = False

    async def read(self, deadline: float) -> bytes | None:
        """The next piece of the body as it arrives; None at its end. Past ``deadline`` it raises
        ``TimeoutError`` having consumed nothing, so a long-lived stream (an observer's watch) can be read on
        with a new deadline."""
        data = await self._link.data(deadline)
        if data is None:
            self._done = True
        return data

    def close(self) -> None:
        """Drop the connection (a stream left before its end cannot carry another request)."""
        self._link.close()

    async def lines(self) -> AsyncIterator[bytes]:
        """The body split at newlines (one JSON message per line), as it arrives."""
        pending = b""
        while (data := await self._link.data(self._deadline)) is not None:
            pending += data
            while (cut := pending.find(b"\n")) >= 0:
                yield pending[:cut]
                pending = pending[cut + 1 :]
        self._done = True
        if pending:
            yield pending


class HTTPClient:
    """Kept-alive connections to the members of one cluster; safe to share between threads or tasks."""

    def __init__(self, tls: ssl.SSLContext | None) -> None:
        self._tls = tls
        self._idle: dict[Member, list[_Link]] = {}
        self._requests: dict[tuple[object, ...], h11.Request] = {}
        self._mutex = threading.Lock()
        self._closed = False

    def after_fork(self) -> None:
        """A forked child's requests must not go on the parent's kept-alive connections (two processes
        writing and reading one socket mix up both sides' answers): forgotten, never closed (a TLS close
        speaks on the socket); the child opens its own."""
        forks.abandon(self._idle)
        self._idle = {}
        self._mutex = threading.Lock()

    # -- connections ---------------------------------------------------------------------------------
    def _take(self, member: Member) -> _Link | None:
        with self._mutex:
            idle = self._idle.get(member)
            return idle.pop() if idle else None

    def _flush(self, member: Member) -> None:
        """Close every idle connection to ``member``: one of them went silent (a half-open link, a frozen
        path), and the others were opened no later than it was; new connections are made as needed."""
        with self._mutex:
            idle = self._idle.pop(member, [])
        for link in idle:
            link.close()

    def _release(self, member: Member, link: _Link) -> None:
        """Back to the pool if h11 says the connection can carry another request, else closed."""
        if link.next_cycle():
            with self._mutex:
                idle = self._idle.setdefault(member, [])
                if not self._closed and len(idle) < _MAX_IDLE:
                    idle.append(link)
                    return
        link.close()

    async def _open(self, member: Member, deadline: float) -> etcdio.Conn:
        return await etcdio.Conn.open(member[0], member[1], self._tls, deadline)

    async def aclose(self) -> None:
        with self._mutex:
            self._closed = True
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()

    # -- requests ------------------------------------------------------------------------------------
    def _request(self, member: Member, path: str, body: bytes, headers: dict[str, str]) -> h11.Request:
        """The request's head as an h11 event; built (and validated by h11) once per distinct head, since
        the backend sends the same few again and again."""
        key = (member, path, len(body), *headers.items())
        request = self._requests.get(key)
        if request is None:
            host = f"[{member[0]}]" if ":" in member[0] else member[0]
            fields = [("Host", f"{host}:{member[1]}"), ("Content-Type", "application/json")]
            fields += [("Content-Length", str(len(body))), *headers.items()]
            request = h11.Request(method="POST", target=path, headers=fields)
            if len(self._requests) >= _MAX_HEADS:
                self._requests.clear()
            self._requests[key] = request
        return request

    async def _send(
        self, member: Member, request: h11.Request, body: bytes, timeout: float, connect_timeout: float
    ) -> tuple[_Link, int, float]:
        """Send on a kept-alive connection (or a new one) and read the answer's head: the connection, the
        status and the deadline.

        A kept-alive connection the server closed meanwhile fails before any answer arrives; then the
        request goes once more on a new connection (every request the backend sends is safe to repeat).
        A kept-alive connection that stays silent until the deadline is closed with every other idle one to
        the member (they may be half-open too), so the caller's next try starts on a new connection.
        Whatever ends a request early (timeout, cancellation, error) closes its connection: a late answer
        must never be read as the next request's.
        """
        deadline = monotonic() + timeout
        link = self._take(member)
        if link is not None:
            try:
                return link, await link.exchange(request, body, deadline), deadline
            except (ConnectionError, ssl.SSLError):
                link.close()
            except TimeoutError:
                link.close()
                self._flush(member)
                raise
            except BaseException:
                link.close()
                raise
        link = _Link(await self._open(member, min(deadline, monotonic() + connect_timeout)))
        try:
            return link, await link.exchange(request, body, deadline), deadline
        except BaseException:
            link.close()
            raise

    async def post(
        self, member: Member, path: str, body: bytes, headers: dict[str, str], timeout: float, connect_timeout: float
    ) -> Answer:
        """One request and its whole answer; the connection goes back to the pool when it can."""
        link, status, deadline = await self._send(
            member, self._request(member, path, body, headers), body, timeout, connect_timeout
        )
        parts: list[bytes] = []
        try:
            while (data := await link.data(deadline)) is not None:
                parts.append(data)
        except BaseException:
            link.close()
            raise
        self._release(member, link)
        return Answer(status, b"".join(parts))

    async def open_stream(
        self, member: Member, path: str, body: bytes, headers: dict[str, str], timeout: float, connect_timeout: float
    ) -> Stream:
        """A request whose answer streams in, for a caller that keeps it open across calls (read it with
        ``Stream.read`` and end it with ``Stream.close``); ``timeout`` bounds the answer's head."""
        link, status, deadline = await self._send(
            member, self._request(member, path, body, headers), body, timeout, connect_timeout
        )
        return Stream(status, link, deadline)

    @contextlib.asynccontextmanager
    async def stream(
        self, member: Member, path: str, body: bytes, headers: dict[str, str], timeout: float, connect_timeout: float
    ) -> AsyncIterator[Stream]:
        """A request whose answer is read as it streams in (``Stream.lines()``); the connection is closed
        afterwards unless the whole answer was read (leaving a watch means dropping its connection)."""
        stream = await self.open_stream(member, path, body, headers, timeout, connect_timeout)
        link = stream._link
        try:
            yield stream
        finally:
            if stream._done:
                self._release(member, link)
            else:
                link.close()

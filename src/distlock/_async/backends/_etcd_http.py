"""A small HTTP/1.1 client for etcd's JSON gateway, written once (the sync twin is generated).

It does only what the gateway needs: ``POST`` a JSON body, read an answer framed by ``Content-Length``
or chunked (the streamed ones: watch, lease keepalive), keep connections alive per member and reuse
them. One request is one ``send`` of a pre-built byte string and buffered reads; a general client
(httpx: ~1 ms of CPU per request here, more than etcd spends on a put on loopback) costs more than the
round trip it makes. The connection itself is the driver twin's (``_etcd_async`` / ``_etcd_sync``).

Errors are ``OSError``: ``TimeoutError`` when the deadline passed, ``ConnectionError`` for a closed or
garbled connection, ``ssl.SSLError`` and the socket's own errors as they come.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from ... import _etcd_async as etcdio
from ..._core.timing import monotonic

#: idle connections kept per member
_MAX_IDLE = 32

Member = tuple[str, int]


@dataclass
class Answer:
    """The head of an answer, and for a plain request its whole body."""

    status: int
    body: bytes = b""
    length: int | None = None  # Content-Length, if framed by it
    chunked: bool = False
    keep_alive: bool = True


@dataclass
class Stream:
    """A streamed answer (watch): ``status`` and its body line by line."""

    status: int
    _client: HTTPClient
    _conn: etcdio.Conn
    _head: Answer
    _deadline: float
    _done: bool = field(default=False)

    async def lines(self) -> AsyncIterator[bytes]:
        """The body split at newlines (one JSON message per line), as it arrives."""
        head, conn, deadline = self._head, self._conn, self._deadline
        if not head.chunked:
            body = await self._client._body(conn, head, deadline)
            for line in body.splitlines():
                yield line
            return
        pending = b""
        while True:
            chunk = await self._client._chunk(conn, deadline)
            if chunk is None:
                break
            pending += chunk
            if b"\n" in pending:
                *ready, pending = pending.split(b"\n")
                for line in ready:
                    yield line
        self._done = True
        if pending:
            yield pending


class HTTPClient:
    """Kept-alive connections to the members of one cluster; safe to share between threads or tasks."""

    def __init__(self, tls: ssl.SSLContext | None) -> None:
        self._tls = tls
        self._idle: dict[Member, list[etcdio.Conn]] = {}
        self._guard = threading.Lock()
        self._closed = False

    # -- connections ---------------------------------------------------------------------------------
    def _take(self, member: Member) -> etcdio.Conn | None:
        with self._guard:
            idle = self._idle.get(member)
            return idle.pop() if idle else None

    def _put(self, member: Member, conn: etcdio.Conn) -> None:
        with self._guard:
            idle = self._idle.setdefault(member, [])
            if not self._closed and len(idle) < _MAX_IDLE:
                idle.append(conn)
                return
        conn.close()

    async def _open(self, member: Member, deadline: float) -> etcdio.Conn:
        return await etcdio.Conn.open(member[0], member[1], self._tls, deadline)

    async def aclose(self) -> None:
        with self._guard:
            self._closed = True
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in conns:
            conn.close()

    # -- requests ------------------------------------------------------------------------------------
    @staticmethod
    def _request(member: Member, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        host = f"[{member[0]}]" if ":" in member[0] else member[0]
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{member[1]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n"
        )
        return head.encode("latin-1") + body

    async def _send(
        self, member: Member, request: bytes, timeout: float, connect_timeout: float
    ) -> tuple[etcdio.Conn, Answer, float]:
        """Send on a kept-alive connection (or a new one) and read the answer's head.

        A kept-alive connection the server closed meanwhile fails before any answer arrives; then the
        request goes once more on a new connection (every request the backend sends is safe to repeat).
        """
        deadline = monotonic() + timeout
        conn = self._take(member)
        if conn is not None:
            try:
                await conn.send(request, deadline)
                return conn, await self._head(conn, deadline), deadline
            except (ConnectionError, ssl.SSLError):
                conn.close()
            except BaseException:
                conn.close()
                raise
        conn = await self._open(member, min(deadline, monotonic() + connect_timeout))
        try:
            await conn.send(request, deadline)
            return conn, await self._head(conn, deadline), deadline
        except BaseException:
            conn.close()
            raise

    async def post(
        self, member: Member, path: str, body: bytes, headers: dict[str, str], timeout: float, connect_timeout: float
    ) -> Answer:
        """One request and its whole answer; the connection goes back to the pool when it can."""
        conn, head, deadline = await self._send(
            member, self._request(member, path, body, headers), timeout, connect_timeout
        )
        try:
            head.body = await self._body(conn, head, deadline)
        except BaseException:
            conn.close()
            raise
        if head.keep_alive:
            self._put(member, conn)
        else:
            conn.close()
        return head

    @contextlib.asynccontextmanager
    async def stream(
        self, member: Member, path: str, body: bytes, headers: dict[str, str], timeout: float, connect_timeout: float
    ) -> AsyncIterator[Stream]:
        """A request whose answer is read as it streams in (``Stream.lines()``); the connection is closed
        afterwards unless the whole answer was read (leaving a watch means dropping its connection)."""
        conn, head, deadline = await self._send(
            member, self._request(member, path, body, headers), timeout, connect_timeout
        )
        stream = Stream(head.status, self, conn, head, deadline)
        try:
            yield stream
        finally:
            if stream._done and head.keep_alive:
                self._put(member, conn)
            else:
                conn.close()

    # -- framing -------------------------------------------------------------------------------------
    async def _head(self, conn: etcdio.Conn, deadline: float) -> Answer:
        status_line = await conn.readline(deadline)
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise ConnectionError("not an HTTP/1.x answer")
        answer = Answer(int(parts[1]), keep_alive=parts[0] == b"HTTP/1.1")
        while True:
            line = await conn.readline(deadline)
            if line in (b"\r\n", b"\n"):
                break
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                answer.length = int(value.strip())
            elif name == b"transfer-encoding":
                answer.chunked = b"chunked" in value.lower()
            elif name == b"connection":
                answer.keep_alive = b"close" not in value.lower()
        if answer.length is None and not answer.chunked:
            answer.keep_alive = False  # the body runs to the end of the connection
        return answer

    async def _body(self, conn: etcdio.Conn, head: Answer, deadline: float) -> bytes:
        if head.chunked:
            parts: list[bytes] = []
            while True:
                chunk = await self._chunk(conn, deadline)
                if chunk is None:
                    return b"".join(parts)
                parts.append(chunk)
        if head.length is not None:
            return await conn.read(head.length, deadline) if head.length else b""
        return await conn.read_to_end(deadline)

    async def _chunk(self, conn: etcdio.Conn, deadline: float) -> bytes | None:
        """The next chunk of a chunked body; None after the last one (trailers read)."""
        size_line = await conn.readline(deadline)
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise ConnectionError("garbled chunked HTTP answer") from exc
        if size == 0:
            while (await conn.readline(deadline)) not in (b"\r\n", b"\n"):
                pass
            return None
        data = await conn.read(size + 2, deadline)
        return data[:size]

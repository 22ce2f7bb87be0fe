"""The asyncio half of the etcd backend's connection driver (``_driver_sync.py`` is its threaded twin).

The etcd backend speaks HTTP/1.1 to the JSON gateway through a small client written once
(``_async/http.py`` next to this module, generated for the sync side; h11 parses the answers); the only thing
that differs between the sides is how a connection is opened, written and read, which lives here: asyncio
streams on this side, a blocking socket on the other. Every step is bounded by a deadline (``time.monotonic()`` seconds);
failures are ``OSError`` (``TimeoutError`` for a deadline that passed, ``ConnectionError`` for a closed
connection).
"""

from __future__ import annotations

import asyncio
import ssl
import time

from ... import _aconn

#: bytes asked for per read: a whole gateway answer, or what a stream has ready, in one call
_READ_SIZE = 65536


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


class Conn:
    """One TCP (or TLS) connection to one member."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        _aconn.small_reads(writer.transport)

    @classmethod
    async def open(cls, host: str, port: int, tls: ssl.SSLContext | None, deadline: float) -> Conn:
        async with asyncio.timeout(_left(deadline)):
            reader, writer = await asyncio.open_connection(
                host, port, ssl=tls, server_hostname=host if tls is not None else None
            )
        return cls(reader, writer)  # asyncio sets TCP_NODELAY on TCP transports

    async def send(self, data: bytes, deadline: float) -> None:
        self._writer.write(data)
        async with asyncio.timeout(_left(deadline)):
            await self._writer.drain()

    async def recv(self, deadline: float) -> bytes:
        """What has arrived (waiting for at least one byte); ``b""`` once the server closed the connection."""
        async with asyncio.timeout(_left(deadline)):
            return await self._reader.read(_READ_SIZE)

    def close(self) -> None:
        try:
            if self._writer.get_extra_info("sslcontext") is not None:
                # a TLS close waits on the event loop for the server's close_notify (up to 30 s): a connection we
                # drop is aborted instead, so its socket closes now, not whenever (or never, if the loop ends
                # first) the handshake finishes. Nothing is lost: every request was drained and answered.
                self._writer.transport.abort()
                return
            self._writer.close()
        except (OSError, RuntimeError):  # the loop is gone or the socket already closed
            pass

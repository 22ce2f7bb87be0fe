"""The threaded half of the etcd backend's connection driver (the same names as :mod:`distlock._etcd_async`)."""

from __future__ import annotations

import socket
import ssl
import time

_MAX_LINE = 65536


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


class Conn:
    """One TCP (or TLS) connection to one member."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._file = sock.makefile("rb")

    @classmethod
    def open(cls, host: str, port: int, tls: ssl.SSLContext | None, deadline: float) -> Conn:
        sock = socket.create_connection((host, port), timeout=_left(deadline))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                sock.settimeout(_left(deadline))
                sock = tls.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    def send(self, data: bytes, deadline: float) -> None:
        self._sock.settimeout(_left(deadline))
        self._sock.sendall(data)

    def readline(self, deadline: float) -> bytes:
        self._sock.settimeout(_left(deadline))
        line = self._file.readline(_MAX_LINE)
        if not line.endswith(b"\n"):
            raise ConnectionError("connection closed by the server" if len(line) < _MAX_LINE else "line too long")
        return line

    def read(self, n: int, deadline: float) -> bytes:
        self._sock.settimeout(_left(deadline))
        data = self._file.read(n)
        if len(data) < n:
            raise ConnectionError("connection closed by the server")
        return data

    def read_to_end(self, deadline: float) -> bytes:
        self._sock.settimeout(_left(deadline))
        return self._file.read()

    def close(self) -> None:
        try:
            self._file.close()
            self._sock.close()
        except OSError:
            pass

"""The threaded half of the etcd backend's connection driver (the same names as ``_driver_async.py``)."""

from __future__ import annotations

import socket
import ssl
import time

_READ_SIZE = 65536


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


class Conn:
    """One TCP (or TLS) connection to one member."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

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

    def recv(self, deadline: float) -> bytes:
        self._sock.settimeout(_left(deadline))
        return self._sock.recv(_READ_SIZE)

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass

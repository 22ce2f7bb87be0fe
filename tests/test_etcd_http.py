"""The etcd backend's HTTP/1.1 client (``_backends/etcd/_async/http.py``, sync twin) against a scripted HTTP server on loopback:
connection reuse, answers that close, a pooled connection the server dropped, chunked streams, garbage.

The etcd suites exercise the same client against real etcd; these cover the framing and connection cases
etcd rarely produces on demand. The server reads requests with h11 and writes its answers as h11 events
(or raw bytes, for the garbled one).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import h11
import pytest

from distlock._backends.etcd._sync.http import HTTPClient

#: what the server does with request ``i`` on connection ``n``: the parts of its answer (h11 events, or raw
#: bytes), and whether the connection stays open afterwards
Script = Callable[[int, int], tuple[list[h11.Event | bytes], bool]]


@dataclass
class Server:
    member: tuple[str, int]
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)


def _ok(body: bytes, *headers: tuple[str, str]) -> list[h11.Event | bytes]:
    return [
        h11.Response(status_code=200, headers=[("Content-Length", str(len(body))), *headers]),
        h11.Data(data=body),
        h11.EndOfMessage(),
    ]


def _serve(sock: socket.socket, n: int, script: Script, server: Server) -> None:
    http = h11.Connection(our_role=h11.SERVER)
    with sock:
        for i in range(1000):
            body = b""
            while True:
                event = http.next_event()
                if event is h11.NEED_DATA:
                    http.receive_data(sock.recv(65536))
                elif type(event) is h11.Data:
                    body += event.data
                elif type(event) in (h11.EndOfMessage, h11.ConnectionClosed):
                    break
            if type(event) is h11.ConnectionClosed:
                return
            server.requests.append(body)
            parts, keep = script(n, i)
            for part in parts:
                sock.sendall(part if isinstance(part, bytes) else http.send(part) or b"")
            if not keep or http.our_state is not h11.DONE:
                return
            http.start_next_cycle()


@contextlib.contextmanager
def scripted(script: Script) -> Iterator[Server]:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    server = Server(("127.0.0.1", listener.getsockname()[1]))
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            server.connections += 1
            threading.Thread(target=_serve, args=(sock, server.connections - 1, script, server), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join()
        listener.close()


def _post(client: HTTPClient, server: Server, body: bytes = b"{}") -> tuple[int, bytes]:
    answer = client.post(server.member, "/v3/kv/range", body, {}, timeout=5, connect_timeout=5)
    return answer.status, answer.body


def test_a_kept_alive_connection_carries_the_next_request() -> None:
    with scripted(lambda n, i: (_ok(b'{"n":%d,"i":%d}' % (n, i)), True)) as server:
        client = HTTPClient(None)
        assert _post(client, server, b'{"a":1}') == (200, b'{"n":0,"i":0}')
        assert _post(client, server, b'{"b":2}') == (200, b'{"n":0,"i":1}')
        client.close()
    assert server.connections == 1
    assert server.requests == [b'{"a":1}', b'{"b":2}']


def test_an_answer_that_closes_the_connection_is_not_pooled() -> None:
    with scripted(lambda n, i: (_ok(b"{}", ("Connection", "close")), False)) as server:
        client = HTTPClient(None)
        assert _post(client, server) == (200, b"{}")
        assert _post(client, server) == (200, b"{}")
        client.close()
    assert server.connections == 2


def test_a_pooled_connection_the_server_dropped_is_replaced_once() -> None:
    # the server closes after each answer without saying so: the next request finds the pooled connection
    # dead before any answer arrives and goes once more on a new one
    with scripted(lambda n, i: (_ok(b'{"n":%d}' % n), False)) as server:
        client = HTTPClient(None)
        assert _post(client, server) == (200, b'{"n":0}')
        assert _post(client, server) == (200, b'{"n":1}')
        client.close()
    assert server.connections == 2


def test_a_chunked_answer_streams_lines_split_across_chunks() -> None:
    pieces = [b'{"a":1}\n{"b', b'":2}\n', b'{"c":3}']
    parts: list[h11.Event | bytes] = [h11.Response(status_code=200, headers=[("Transfer-Encoding", "chunked")])]
    parts += [h11.Data(data=p) for p in pieces] + [h11.EndOfMessage()]
    with scripted(lambda n, i: (parts, True)) as server:
        client = HTTPClient(None)
        with client.stream(server.member, "/v3/watch", b"{}", {}, timeout=5, connect_timeout=5) as stream:
            assert stream.status == 200
            assert list(stream.lines()) == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
        assert _post(client, server) == (200, b"".join(pieces))  # read whole, on the same connection
        client.close()
    assert server.connections == 1


def test_a_garbled_answer_is_a_connection_error() -> None:
    with scripted(lambda n, i: ([b"SPDY/9 what\r\n\r\n"], False)) as server:
        client = HTTPClient(None)
        with pytest.raises(ConnectionError):
            _post(client, server)
        client.close()

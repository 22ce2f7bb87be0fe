"""The kazoo handler of distlock's own ZooKeeper clients: kazoo's ``select`` contract, one poll per call.

The contract is the one kazoo's connection thread relies on (``kazoo.handlers.utils.selector_select``): the
ready objects of each list back, nothing for a timeout, a hang-up readable, ``ValueError`` for a descriptor
closed under the caller. Each case is also run through kazoo's own function, so a difference shows as a
failure here rather than as a connection thread that misreads its socket.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.handlers.utils import selector_select
from kazoo.protocol.states import Callback

from distlock._backends.zookeeper.handler import Handler, on_event_thread

Select = Callable[..., tuple[list[Any], list[Any], list[Any]]]


@pytest.fixture(params=["distlock", "kazoo"])
def sel(request: pytest.FixtureRequest) -> Select:
    return Handler().select if request.param == "distlock" else selector_select  # type: ignore[no-any-return]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_nothing_ready_waits_for_the_timeout(sel: Select, pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    started = time.monotonic()
    assert sel([a], [], [], 0.05) == ([], [], [])
    assert time.monotonic() - started >= 0.045


def test_ready_objects_come_back_in_their_lists(sel: Select, pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    assert sel([], [a], [], 1) == ([], [a], [])  # an idle socket is writable
    b.sendall(b"x")
    assert sel([a], [], [], 1) == ([a], [], [])
    # asked for both: reported readable only, once per list it was given in (as kazoo's version does)
    assert sel([a], [a], [], 1) == ([a, a], [], [])
    # a descriptor given as an int comes back as that int; the read end of a pipe with nothing in it stays out
    r, w = socket.socketpair()
    try:
        assert sel([r.fileno(), a], [], [], 1) == ([a], [], [])
        w.sendall(b"y")
        assert sorted(map(str, sel([r.fileno(), a], [], [], 1)[0])) == sorted(map(str, [r.fileno(), a]))
    finally:
        r.close()
        w.close()


def test_a_hang_up_is_readable(sel: Select, pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    b.close()
    assert sel([a], [], [], 1)[0] == [a]


def test_a_closed_descriptor_is_refused(sel: Select) -> None:
    s = socket.socket()
    fd = s.fileno()
    s.close()
    with pytest.raises(ValueError):
        sel([fd], [], [], 0.01)
    with pytest.raises((TypeError, ValueError)):  # a closed socket object has no descriptor at all
        sel([s], [], [], 0.01)


def test_bad_timeouts_are_refused(sel: Select, pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    with pytest.raises(TypeError):
        sel([a], [], [], "1")
    with pytest.raises(ValueError):
        sel([a], [], [], -1)


def test_one_poll_and_no_epoll_object_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the handler: kazoo's version makes (and closes) an epoll object on every call."""
    made: list[str] = []
    real_poll = select.poll

    def poll() -> Any:
        made.append("poll")
        return real_poll()

    monkeypatch.setattr(select, "poll", poll)
    if hasattr(select, "epoll"):
        real_epoll = select.epoll

        def epoll(*args: Any, **kwargs: Any) -> Any:
            made.append("epoll")
            return real_epoll(*args, **kwargs)

        monkeypatch.setattr(select, "epoll", epoll)
    a, b = socket.socketpair()
    try:
        b.sendall(b"x")
        for _ in range(3):
            assert Handler().select([a], [], [], 1) == ([a], [], [])
    finally:
        a.close()
        b.close()
    assert made == ["poll"] * 3


def test_marked_watch_callbacks_run_where_the_event_is_read(caplog: pytest.LogCaptureFixture) -> None:
    """A callback marked ``on_event_thread`` runs in the dispatching thread (kazoo's connection thread), at
    once; any other callback still goes to kazoo's callback thread; a marked one that fails is logged and
    the dispatching thread goes on."""
    handler = Handler()
    queued: list[Any] = []
    handler.callback_queue.put = queued.append  # type: ignore[method-assign]  # the handler is not started
    ran: list[str] = []

    class Waiting:
        @on_event_thread
        def wake(self, event: Any = None) -> None:
            ran.append(threading.current_thread().name)

    @on_event_thread
    def broken(event: Any = None) -> None:
        raise RuntimeError("boom")

    handler.dispatch_callback(Callback("watch", Waiting().wake, (None,)))
    assert ran == [threading.current_thread().name] and queued == []
    handler.dispatch_callback(Callback("watch", lambda event: ran.append("queued"), (None,)))
    assert len(queued) == 1 and ran == [threading.current_thread().name]
    with caplog.at_level("ERROR", logger="distlock"):
        handler.dispatch_callback(Callback("watch", broken, (None,)))
    assert "watch callback failed" in caplog.text

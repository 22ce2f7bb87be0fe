"""The kazoo handler of the ZooKeeper stores distlock opens itself (both APIs use kazoo's threading model):
a cheaper ``select``, and the wake-ups of waiters run where their watch events are read.

kazoo's connection thread waits on its sockets through the handler's ``select``, about five times per
request (the loop's wait, the check before each write, the checks before the length and the body of each
reply). kazoo 2.11's threading handler serves each such call with a new ``epoll`` object: create it,
register the descriptors, wait, close it, several system calls and some Python work each time, about 30%
of a lock cycle's client CPU on the project's 2-core VM (docs/bench.md, "ZooKeeper: kazoo's select and
thread hops"). A ``poll(2)`` answers the same question in one system call, with no descriptor limit either
(the reason kazoo moved off ``select(2)``). ``Handler.select`` keeps kazoo's contract: the same lists back, a descriptor
reported ready only for what it was asked for (a hang-up or an error counts as readable first, as in
kazoo's version), ``ValueError`` for a closed descriptor, ``TypeError`` / ``ValueError`` for a bad timeout.

kazoo hands every watch event to its callback thread, which then runs the callback; a waiter's callback
only notifies the waiting thread or task, so ``on_event_thread`` lets the connection thread run it
directly. A client given by the caller (``connect(client=...)``) keeps its own handler: there the events take
kazoo's usual path, which is only slower.
"""

from __future__ import annotations

import logging
import math
import select
import ssl
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.handlers.threading import SequentialThreadingHandler
from kazoo.handlers.utils import fileobj_to_fd

log = logging.getLogger("distlock")

_IN, _OUT = select.POLLIN, select.POLLOUT

F = TypeVar("F", bound=Callable[..., None])


def on_event_thread(fn: F) -> F:
    """Mark a watch callback that only raises a flag (never blocks, never calls kazoo and waits): kazoo's
    connection thread runs it as it reads the event, instead of queueing it for kazoo's callback thread,
    which is one thread hop less between a holder's release and its waiter's wake-up. A bound method of a
    marked function is marked too."""
    fn.distlock_on_event_thread = True  # type: ignore[attr-defined]
    return fn


class Handler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's threading handler with a one-system-call ``select`` (module docstring), and closing the
    socket of a failed TLS connect: kazoo 2.11 raises out of its handshake without closing it, and a client
    that retries a refused certificate would leave one open socket (and one ResourceWarning) per attempt
    until the garbage collector finds them."""

    def select(
        self, rlist: list[Any], wlist: list[Any], xlist: list[Any], timeout: float | None = None
    ) -> tuple[list[Any], list[Any], list[Any]]:
        if timeout is not None:
            if not isinstance(timeout, (int, float)):
                raise TypeError("timeout must be a number")
            if timeout < 0:
                raise ValueError("timeout must be non-negative")
        asked: dict[int, int] = {}
        objs: dict[int, list[Any]] = {}
        for flag, given in ((_IN, rlist), (_OUT, wlist)):
            for obj in given:
                fd = fileobj_to_fd(obj)
                asked[fd] = asked.get(fd, 0) | flag
                objs.setdefault(fd, []).append(obj)
        poller = select.poll()
        for fd, flags in asked.items():
            poller.register(fd, flags)
        ms = None if timeout is None else math.ceil(timeout * 1000)
        readable: list[Any] = []
        writable: list[Any] = []
        for fd, got in poller.poll(ms):
            if got & select.POLLNVAL:  # closed under us: kazoo's epoll would have refused to register it
                raise ValueError("Invalid event mask or fd")
            # anything but "writable" (data, hang-up, error) lets a reader find out; anything but "readable"
            # lets a writer find out; a descriptor asked for both is reported readable (as kazoo does)
            if got & ~_OUT and asked[fd] & _IN:
                readable.extend(objs[fd])
            elif got & ~_IN and asked[fd] & _OUT:
                writable.extend(objs[fd])
        return readable, writable, []

    def dispatch_callback(self, callback: Any) -> None:
        if callback.type == "watch" and getattr(callback.func, "distlock_on_event_thread", False):
            try:
                callback.func(*callback.args)
            except Exception:  # the connection thread must go on reading whatever a callback does
                log.exception("a ZooKeeper watch callback failed")
            return
        super().dispatch_callback(callback)

    def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().create_connection(*args, **kwargs)
        except OSError as exc:
            tb = exc.__traceback__
            while tb is not None:
                conn = tb.tb_frame.f_locals.get("conn")
                if isinstance(conn, ssl.SSLSocket):
                    conn.close()
                tb = tb.tb_next
            raise

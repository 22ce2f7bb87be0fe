"""What the hot path no longer redoes per acquire, and that the shortcuts stay correct.

Pure units, no server: the session-mode statements are built once per (name, mode, owner), and the two
per-process values made once (the owner id's ``host:pid:`` prefix, the backoff's random generator) are made
anew in a forked child, so a child never reports its parent's pid nor draws its parent's jitter.
"""

from __future__ import annotations

import os
import sys

import pytest

from distlock._backends.sql import dialects as sql_dialects
from distlock._backends.sql import session as sql_session
from distlock._core import ids, timing
from distlock._core.types import Claim, Mode

DIALECTS = [sql_dialects.mysql("distlock"), sql_dialects.postgres("distlock")]


def _claim(token: str, owner: str = "h:1:thread-1", mode: Mode = Mode.EXCLUSIVE, name: str = "n") -> Claim:
    return Claim(name=name, mode=mode, token=token, owner=owner, ttl=30.0)


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_a_reacquire_reuses_its_statements(dialect: sql_dialects.Dialect) -> None:
    first, again = _claim(ids.new_token()), _claim(ids.new_token())  # a fresh token per acquisition
    acquire = sql_session.session_acquire(dialect, "distlock", first, None, 30.0, True)
    assert sql_session.session_acquire(dialect, "distlock", again, None, 30.0, True) is acquire
    assert sql_session.session_unlock(dialect, again) is sql_session.session_unlock(dialect, first)
    assert sql_session.session_check(dialect, again, 30.0) is sql_session.session_check(dialect, first, 30.0)
    # what the statement depends on still makes another one
    others = [
        sql_session.session_acquire(dialect, "distlock", _claim("t", owner="h:1:thread-2"), None, 30.0, True),
        sql_session.session_acquire(dialect, "distlock", _claim("t", name="m"), None, 30.0, True),
        sql_session.session_acquire(dialect, "distlock", first, 1.5, 30.0, True),
        sql_session.session_acquire(dialect, "distlock", first, None, None, True),
        sql_session.session_acquire(dialect, "other", first, None, 30.0, True),
    ]
    assert all(o != acquire for o in others)
    assert len(set(others)) == len(others)


def _in_child(fn: object) -> str:
    """``fn()`` run in a forked child; what it returned, as text."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer through the pipe, then leave without running the parent's clean-ups
        try:
            os.write(w, str(fn()).encode())  # type: ignore[operator]
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_names_its_own_pid() -> None:
    assert ids.owner_id("x").split(":")[1] == str(os.getpid())
    child = _in_child(lambda: f"{os.getpid()} {ids.owner_id('x')}")
    pid, owner = child.split(" ")
    assert owner.split(":")[1] == pid != str(os.getpid())


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="needs fork")
def test_forked_children_draw_their_own_jitter() -> None:
    def draws() -> str:
        b = timing.Backoff(first=1.0, cap=1.0)
        return ",".join(f"{b.next_delay():.12f}" for _ in range(4))

    assert _in_child(draws) != _in_child(draws)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_background_worker_is_alive_until_its_function_ends_and_never_in_a_forked_child() -> None:
    """``Background.alive`` (asked on every acquire by the lease workers) reads a flag instead of the thread's
    lock: it must still say False once the function has ended, and in a forked child, where the thread does
    not run (the child's lease workers are then started anew)."""
    import threading

    from distlock import _rt_sync

    go = threading.Event()
    worker = _rt_sync.Background(lambda: go.wait(10), "test-worker")
    try:
        assert worker.alive()
        assert _in_child(worker.alive) == "False"
        assert worker.alive()
    finally:
        go.set()
        worker.join(5)
    assert not worker.alive()


def test_tokens_are_fresh_128_bit_hex_and_never_handed_out_twice() -> None:
    """``new_token`` draws its tokens from ``os.urandom`` in batches: each is 32 hex digits, and no two calls,
    from any thread, get the same one (a batch's tokens are each handed out once)."""
    import threading

    got: list[str] = []

    def draw() -> None:
        got.extend(ids.new_token() for _ in range(3000))

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 12000 == len(set(got))
    assert all(len(t) == 32 and int(t, 16) >= 0 for t in got)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_never_hands_out_its_parents_next_token() -> None:
    """A child forked with tokens drawn ahead must not hand out the ones its parent hands out next: a token
    authorises release and renewal, so two holders with one token could release each other's lock."""
    ids.new_token()  # the batch is drawn: its rest is what the parent hands out next
    child = _in_child(lambda: ",".join(ids.new_token() for _ in range(8)))
    mine = [ids.new_token() for _ in range(8)]
    assert not set(child.split(",")) & set(mine)


def test_the_watchdog_keeps_only_running_calls_and_still_ends_a_late_one() -> None:
    """The watchdog thread's heap holds the calls that run, not one entry per call of the last call_timeout (a
    loop of calls left thousands, each push a walk through them); a call with an earlier deadline than the
    thread's next wake-up still wakes it, and its socket is shut down at that deadline."""
    import socket
    import time

    from distlock._backends.sql.watchdog import _Watchdog

    dog = _Watchdog()
    a, b = socket.socketpair()
    try:
        for _ in range(1000):  # a loop of calls, each with a far deadline (call_timeout), each ended in time
            assert not dog.remove(dog.add(a.fileno(), time.monotonic() + 60))
        assert len(dog._heap) <= 1
        ticket = dog.add(a.fileno(), time.monotonic() + 0.2)  # earlier than the thread's wake-up
        a.settimeout(10)
        assert a.recv(1) == b""  # the socket was shut down: a blocked read ends
        assert dog.remove(ticket)  # and the call is told it went past its deadline
    finally:
        a.close()
        b.close()

"""The routing of a Redis store's wake-up messages (``_backends/redis/waiters.py``), without a server: which
message wakes which waiter or observer, the hand-over kept for its waiter's next try, and when a channel nobody
waits on is let go."""

from __future__ import annotations

from distlock._backends.redis import keys as rk
from distlock._backends.redis.calls import HandOver
from distlock._backends.redis.waiters import Waiters


def _registry(woken: list[str]) -> Waiters:
    reg = Waiters()
    reg.add("c", "t1", lambda: woken.append("t1"), observer=False)
    reg.add("c", "t2", lambda: woken.append("t2"), observer=False)
    reg.add("c", "obs", lambda: woken.append("obs"), observer=True)
    reg.add("other", "t3", lambda: woken.append("t3"), observer=False)
    return reg


def _wake(reg: Waiters, name: str, token: str, woken: list[str]) -> list[str]:
    woken.clear()
    for notify in reg.message(name, token):
        notify()
    return sorted(woken)


def test_a_waiter_takes_its_token_or_a_star_and_an_observer_every_message() -> None:
    woken: list[str] = []
    reg = _registry(woken)
    assert _wake(reg, "c", "t1", woken) == ["obs", "t1"]
    assert _wake(reg, "c", "*", woken) == ["obs", "t1", "t2"]
    assert _wake(reg, "c", rk.NOTICE, woken) == ["obs"]  # an election's notice is nobody's turn
    assert _wake(reg, "c", "t3", woken) == ["obs"]  # another channel's waiter is not this one's
    assert _wake(reg, "nobody", "*", woken) == []
    assert sorted(n.__name__ for n in reg.everyone()) == ["<lambda>"] * 4
    woken.clear()
    for notify in reg.of("c"):
        notify()
    assert sorted(woken) == ["obs", "t1", "t2"]


def test_a_hand_over_is_kept_once_for_a_registered_waiter_only() -> None:
    woken: list[str] = []
    reg = _registry(woken)
    assert _wake(reg, "c", "t2|42|1700000000000000", woken) == ["obs", "t2"]
    assert reg.take_grant("t2") == HandOver(42, 1700000000.0)
    assert reg.take_grant("t2") is None  # taken once
    assert _wake(reg, "c", "gone|43|1700000000000000", woken) == ["obs"]
    assert reg.take_grant("gone") is None  # nobody here waits for it: nothing kept
    assert _wake(reg, "c", "t1|x|y", woken) == ["obs"]  # malformed: no grant, and not t1's token either
    assert reg.take_grant("t1") is None


def test_a_channel_with_nobody_left_is_idle_and_let_go_after_the_linger() -> None:
    woken: list[str] = []
    reg = _registry(woken)
    _wake(reg, "c", "t1|7|1", woken)
    reg.remove("c", "t1", observer=False, now=100.0)
    assert reg.take_grant("t1") is None  # a waiter that left takes no hand-over with it
    reg.remove("c", "t2", observer=False, now=100.0)
    assert reg.watched("c") and reg.idle == {}  # the observer is still there
    reg.remove("c", "obs", observer=True, now=101.0)
    assert not reg.watched("c") and reg.idle == {"c": 101.0}
    assert reg.idle_past(105.0, linger=10.0) == []
    assert reg.idle_past(112.0, linger=10.0) == ["c"] and reg.idle == {}
    reg.remove("other", "t3", observer=False, now=0.0)
    reg.add("other", "t4", lambda: None, observer=False)  # came back before the linger ended: not idle
    assert reg.idle == {} and reg.idle_past(1e9, linger=10.0) == []

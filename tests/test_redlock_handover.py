"""Redlock direct hand-over (docs/redis.md, "Redlock"; docs/models/redlock_fence.pml, HANDOVER): a release on a
master where an exclusive waiter heads the queue grants it the name there and pushes ``token|fence|stamp``; the
waiter holds, with no round trip, once pushes from a majority carry their largest fence. Five real masters; the
rule itself (which pushes make a grant, which are void) is also checked alone, with no servers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis

import distlock
from distlock._backends.redis import calls as rc
from distlock._backends.redis import lua
from distlock._backends.redis._sync.attempt import Handed
from distlock._backends.redis._sync.redlock import Backend as RedlockBackend
from distlock._backends.redis._sync.releases import ReleaseLog
from distlock._core.timing import WAITER_TTL, monotonic
from distlock._core.types import Claim, Mode
from distlock._rt_sync import Waker
from tests.waiting import Waiter, until
from tools.servers.proc import ServerProc
from tools.servers.redis import redis_masters, redlock_url


@pytest.fixture(scope="module")
def masters() -> Iterator[list[ServerProc]]:
    with redis_masters(5) as servers:
        yield servers


@pytest.fixture
def raws(masters: list[ServerProc]) -> Iterator[list[redis.Redis]]:
    clients = [redis.Redis.from_url(s.url, socket_timeout=5) for s in masters]
    try:
        yield clients
    finally:
        for c in clients:
            c.close()


def _asleep_in_every_queue(raws: list[redis.Redis], name: str) -> bool:
    """Until the waiter is queued on every master and asleep: subscribed there, and its re-check under the live
    subscriptions has refreshed its queue deadline (a release before that would be confirmed by a try)."""
    q, qd, channel = "{" + name + "}:q", "{" + name + "}:qd", "{" + name + "}:wake"
    if not until(lambda: all(r.zcard(q) >= 1 for r in raws)):
        return False
    first = [r.zrange(qd, 0, 0, withscores=True)[0] for r in raws]
    return until(
        lambda: all(
            r.pubsub_numsub(channel)[0][1] >= 1 and r.zscore(qd, f[0]) != f[1] for r, f in zip(raws, first, strict=True)
        )
    )


def _counting_tries(store: Any) -> list[float]:
    """When each of the backend's acquire rounds (each one a scatter to every master) started."""
    backend = store._backend  # type: ignore[attr-defined]
    calls: list[float] = []
    real = backend.try_once

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(monotonic())
        return real(*args, **kwargs)

    backend.try_once = counted
    return calls


def test_the_release_hands_the_name_over_and_the_waiter_holds_without_a_try(
    masters: list[ServerProc], raws: list[redis.Redis], name: str
) -> None:
    """The waiter asleep in every queue is granted the name by the release itself on every master (no moment
    free there), holds it from the pushes with no acquire round of its own, with the next fence, and a lease
    capped at its queue deadline until its first renewal."""
    url = redlock_url(masters)
    with distlock.connect(url) as a, distlock.connect(url) as b:
        holder = a.lock(name, ttl=30)
        assert holder.acquire()
        tries = _counting_tries(b)
        waiter = Waiter(b.lock(name, ttl=30))
        assert _asleep_in_every_queue(raws, name)
        fence0 = holder.fence
        released = monotonic()
        holder.release()
        tokens = {r.get(name) for r in raws}  # read at once: the release itself set them
        assert len(tokens) == 1 and None not in tokens
        assert waiter.granted()
        # held from the pushes alone: no round of its own from the release on (a re-check of its queue entry
        # that ran before the release, as a slow machine can let one, is not the hand-over)
        assert [t for t in tries if t >= released] == []
        assert waiter.fence == fence0 + 1  # type: ignore[operator]
        assert all(0 < r.pttl(name) <= WAITER_TTL * 1000 for r in raws)  # capped at the queue deadline
        waiter.finish()
        assert waiter.owned
        assert all(r.get(name) is None for r in raws)
        assert all(r.zcard("{" + name + "}:q") == 0 for r in raws)


def _read_by_the_waiter(a: Any, b: Any, raws: list[redis.Redis], name: str) -> tuple[distlock.Lock, Waiter, list[Any]]:
    """A holder of ``name`` in store ``a``, and a waiter of store ``b`` asleep in every queue whose thread
    holds the read role of every master's connection (the group's reader; a background reader in the
    middle of a read, the subscriptions' confirmations, leaves within a slice); and ``b``'s listeners."""
    holder = a.lock(name, ttl=30)
    assert holder.acquire()
    waiter = Waiter(b.lock(name, ttl=30))
    assert _asleep_in_every_queue(raws, name)
    listeners = [n.listener for n in b._backend.masters.nodes]
    assert until(lambda: all(isinstance(one._role, Waker) for one in listeners))
    return holder, waiter, listeners


def _hand_over(holder: distlock.Lock, waiter: Waiter) -> float:
    """Release, and how long until the waiter held the name (which it owned until it let go)."""
    released = monotonic()
    holder.release()
    assert waiter.granted()
    took = monotonic() - released
    waiter.finish()
    assert waiter.owned
    return took


def test_the_waiting_thread_reads_the_masters_pushes_itself(
    masters: list[ServerProc], raws: list[redis.Redis], name: str
) -> None:
    """The threaded waiter holds the read role of every master's pub/sub connection while it waits and reads
    the hand-over pushes itself (``group.Group``): no push passes through a master's reader thread
    (one thread hop per push less; before, all five came that way)."""
    url = redlock_url(masters)
    with distlock.connect(url) as a, distlock.connect(url) as b:
        holder, waiter, listeners = _read_by_the_waiter(a, b, raws, name)
        readers: list[str] = []
        for one in listeners:
            real = one._dispatch

            def dispatch(msg: dict[str, Any], real: Any = real) -> None:
                if msg.get("type") == "message":
                    readers.append(threading.current_thread().name)
                real(msg)

            one._dispatch = dispatch
        _hand_over(holder, waiter)
    assert len(readers) >= 3, readers  # a majority's pushes made the grant
    assert set(readers) == {waiter._thread.name}, readers


def test_several_waiting_threads_of_one_store_are_all_woken_at_once(
    masters: list[ServerProc], raws: list[redis.Redis], name: str
) -> None:
    """Threads of one store wait on names of their own: one of them reads the masters for all (the group's
    reader), the others are told by it, and one that leaves passes the reading on. A wake-up lost on the way
    would cost its waiter its wait slice (up to 2 s; the holders' leases are 30 s): every one comes at once."""
    url = redlock_url(masters)
    names = [f"{name}-{i}" for i in range(3)]
    got: dict[str, float] = {}
    with distlock.connect(url) as a, distlock.connect(url) as b:
        held = [a.lock(n, ttl=30) for n in names]
        for lock in held:
            assert lock.acquire()

        def take(n: str) -> None:
            lock = b.lock(n, ttl=30)
            assert lock.acquire(timeout=20)
            got[n] = monotonic()
            lock.release()

        threads = {n: threading.Thread(target=take, args=(n,), name=n) for n in names}
        group = b._backend.masters.listeners  # type: ignore[attr-defined]
        readers: list[str] = []
        real = group._read

        def read(*args: Any) -> Any:
            readers.append(threading.current_thread().name)
            return real(*args)

        group._read = read
        for t in threads.values():
            t.start()
        for n in names:
            assert _asleep_in_every_queue(raws, n)
        assert until(lambda: bool(readers))
        first = readers[-1]  # the reader's name first: its thread leaves, and passes the reading on
        order = [first] + [n for n in names if n != first]
        released: dict[str, float] = {}
        for n in order:
            released[n] = monotonic()
            held[names.index(n)].release()
            assert until(lambda n=n: n in got, 5)  # type: ignore[misc]
            if n == first:  # the reader left: the next waiting thread reads now, before any push comes
                assert until(lambda: group._reader is not None, 1.0)
        for t in threads.values():
            t.join(30)
    waits = {n: got[n] - released[n] for n in names}
    assert max(waits.values()) < 0.5, waits
    assert len(set(readers)) >= 2, readers  # the reading passed on


def test_the_group_reader_rides_out_dropped_connections_on_a_majority(
    masters: list[ServerProc], raws: list[redis.Redis], name: str
) -> None:
    """Three masters drop the waiting store's pub/sub connections while its thread reads them as the group's
    reader: the failed reads make the waiter look again and its store subscribe anew on those three within a
    second (after the 0.2 s pause of a failed connection), and a release after that reaches the waiter
    through them: it holds at once, not at its 2 s re-check."""
    url = redlock_url(masters)
    with distlock.connect(url) as a, distlock.connect(url) as b:
        holder, waiter, listeners = _read_by_the_waiter(a, b, raws, name)
        for raw, one in list(zip(raws, listeners, strict=True))[:3]:
            port = one._pubsub.connection._sock.getsockname()[1]
            (theirs,) = [c for c in raw.client_list(_type="pubsub") if c["addr"].endswith(f":{port}")]
            raw.client_kill(theirs["addr"])
        killed = monotonic()
        channel = "{" + name + "}:wake"
        # subscribed again on all five
        assert until(lambda: all(r.pubsub_numsub(channel)[0][1] >= 1 for r in raws), 5)
        assert monotonic() - killed < 1.0, monotonic() - killed
        assert _asleep_in_every_queue(raws, name)
        took = _hand_over(holder, waiter)
    assert took < 1.0, took


def test_the_group_reader_reads_a_master_again_as_soon_as_it_is_back(name: str) -> None:
    """A master dies under the group's reader: each failed read pauses its connection for 0.2 s, and the
    reader, still waiting on the other four, reads it again at the end of each pause (redis-py connects anew).
    So once the master is back, the waiting store is subscribed there again within a pause or so, not at the
    end of the waiter's 2 s wait slice; and the next release reaches the waiter at once."""
    with redis_masters(5) as servers:  # its own masters: one of them is restarted empty
        url = redlock_url(servers)
        raws = [redis.Redis.from_url(s.url, socket_timeout=5) for s in servers]
        try:
            with distlock.connect(url) as a, distlock.connect(url) as b:
                holder, waiter, listeners = _read_by_the_waiter(a, b, raws, name)
                servers[0].kill()
                assert until(lambda: listeners[0]._pause_until > monotonic())  # a read failed: paused
                time.sleep(0.5)  # a few pauses, each ended by a read that fails again
                servers[0].restart()
                back = monotonic()
                channel = "{" + name + "}:wake"
                assert until(lambda: raws[0].pubsub_numsub(channel)[0][1] >= 1, 5)
                subscribed = monotonic() - back
                took = _hand_over(holder, waiter)
        finally:
            for r in raws:
                r.close()
    assert subscribed < 1.0, subscribed
    assert took < 1.0, took


def _queue_on(raw: redis.Redis, name: str, token: str, want: str) -> None:
    """A stamped exclusive try that finds the name held: queues ``token`` with its hand-over record."""
    args = rc.acquire_args(token, Mode.EXCLUSIVE, 30, 1, False, "o", WAITER_TTL, want, rc.stamp_of(monotonic()))
    reply = _run(raw, lua.ACQUIRE, name, args)
    assert int(reply[0]) == 0


def _run(raw: redis.Redis, script: str, name: str, args: list[str]) -> Any:
    from distlock._backends.redis import keys as rk

    return raw.eval(script, len(rk.keys(name)), *rk.keys(name), rk.channel(name), *args)


def test_a_master_hands_over_only_under_the_run_both_sides_saw(raws: list[redis.Redis], name: str) -> None:
    """The seeding rule: a Redlock master hands the name over only if its counter is seeded under the run id
    that the waiter's try and the release were both sent under (a master restarted since, or one the
    releaser reaches on a new run, counts toward no fence: the waiter tries instead)."""
    raw = raws[0]
    run = raw.info("server")["run_id"]
    raw.hset("distlock:fences", "e", run)  # seeded, as the first Redlock round leaves it
    holder = ["held-" + name, Mode.EXCLUSIVE.value]
    for releaser_run, handed in (("@other-run", False), ("", False), ("@" + run, True)):
        args = rc.acquire_args(holder[0], Mode.EXCLUSIVE, 30, 1, False, "o", 0, "@" + run)
        assert int(_run(raw, lua.ACQUIRE, name, args)[0]) == 1
        _queue_on(raw, name, "waiter-" + name, "@" + run)
        release = [*holder, releaser_run] if releaser_run else holder
        assert int(_run(raw, lua.RELEASE, name, release)) == 1
        assert (raw.get(name) == ("waiter-" + name).encode()) is handed
        raw.delete(name, "{" + name + "}:q", "{" + name + "}:qd", "{" + name + "}:qa", "{" + name + "}:i")


def test_a_release_removes_the_releasers_own_queue_entry(raws: list[redis.Redis], name: str) -> None:
    """A Redlock holder may still be queued on a master that did not grant it; its release drops that entry,
    so no later release there grants (or wakes) a holder that is gone."""
    raw = raws[0]
    run = raw.info("server")["run_id"]
    raw.hset("distlock:fences", "e", run)
    args = rc.acquire_args("other-" + name, Mode.EXCLUSIVE, 30, 1, False, "o", 0, "@" + run)
    assert int(_run(raw, lua.ACQUIRE, name, args)[0]) == 1
    _queue_on(raw, name, "me-" + name, "@" + run)
    assert raw.zcard("{" + name + "}:q") == 1
    assert int(_run(raw, lua.RELEASE, name, ["me-" + name, Mode.EXCLUSIVE.value, "@" + run])) == 0
    assert raw.zcard("{" + name + "}:q") == 0 and raw.hlen("{" + name + "}:qa") == 0
    assert int(_run(raw, lua.RELEASE, name, ["other-" + name, Mode.EXCLUSIVE.value, "@" + run])) == 1
    assert raw.get(name) is None  # nobody was left to hand it to
    raw.delete("{" + name + "}:i")


# -- the rule alone (no servers) --------------------------------------------------------------------------
def _backend() -> RedlockBackend:
    backend = RedlockBackend.__new__(RedlockBackend)
    backend.masters = SimpleNamespace(nodes=[None] * 5, quorum=3)  # type: ignore[assignment]
    backend.releases = ReleaseLog()
    return backend


def _claim() -> Claim:
    return Claim(name="n", mode=Mode.EXCLUSIVE, token="tok", owner="h:1:t", ttl=30.0)


def _handed(fences: dict[int, int], since: float | None = None) -> Handed:
    handed = Handed(5)
    at = monotonic() if since is None else since
    for i, f in fences.items():
        handed.add(i, rc.HandOver(f, at))
    return handed


def test_pushes_from_a_majority_at_their_largest_fence_are_a_grant() -> None:
    backend = _backend()
    grant = backend.handed_over(_claim(), _handed({0: 8, 2: 8, 4: 8}))
    assert grant is not None and grant.acquired and grant.fence == 8
    lease = rc.handover_lease(30.0, WAITER_TTL)
    assert grant.valid_for is not None and 0 < grant.valid_for <= lease
    # a fourth push behind the others changes nothing: three of four carry the largest fence
    assert backend.handed_over(_claim(), _handed({0: 8, 1: 7, 2: 8, 4: 8})) is not None


def test_pushes_short_of_a_majority_or_at_different_fences_are_no_grant() -> None:
    backend = _backend()
    assert backend.handed_over(_claim(), _handed({0: 8, 1: 8})) is None  # two of five
    # four pushes, but only two carry the largest fence: the largest must be written back first (a try)
    assert backend.handed_over(_claim(), _handed({0: 9, 1: 9, 2: 8, 3: 8})) is None
    # pushes whose lease (counted from the try that queued us) has run out, or has less than half left: a try
    # confirms them for a full lease instead
    lease = rc.handover_lease(30.0, WAITER_TTL)
    for age in (lease + 1, lease * 0.6):
        assert backend.handed_over(_claim(), _handed({0: 8, 1: 8, 2: 8}, since=monotonic() - age)) is None
    assert backend.handed_over(_claim(), _handed({0: 8, 1: 8, 2: 8}, since=monotonic() - lease * 0.4)) is not None


def test_a_hand_over_made_before_our_own_release_there_is_void() -> None:
    """A failed try takes the claim back from the masters that granted it; a push of a grant made there from
    that try's queue entry or an earlier one may still arrive after: it must not count."""
    handed = Handed(5)
    handed.add(0, rc.HandOver(5, 10.0))
    handed.released([0, 1], 20.0)  # the try stamped 20.0 failed and released masters 0 and 1
    assert handed.grants == {}
    handed.add(1, rc.HandOver(6, 20.0))  # made from that very try's entry, pushed late: void
    handed.add(0, rc.HandOver(6, 15.0))  # older still: void
    handed.add(2, rc.HandOver(6, 20.0))  # master 2 was not released: it holds
    handed.add(0, rc.HandOver(7, 30.0))  # from a later try's entry: holds
    assert sorted(handed.grants) == [0, 2]


def test_a_hand_over_with_less_than_half_its_lease_left_is_confirmed_by_a_try() -> None:
    """The single node and Redlock share the rule (``ReleaseLog.handed``): with less than half of the handed lease
    left (a short TTL, a try long ago), nothing is held on the push alone; the waiter's try confirms instead."""
    for ttl in (2.0, 30.0):
        lease = rc.handover_lease(ttl, WAITER_TTL)
        claim = Claim(name="n", mode=Mode.EXCLUSIVE, token="tok", owner="h:1:t", ttl=ttl)
        leases = ReleaseLog()
        assert leases.handed(claim, monotonic() - lease * 0.6) is None
        assert leases.until("tok") == 0.0  # nothing recorded
        left = leases.handed(claim, monotonic() - lease * 0.3)
        assert left is not None and lease * 0.5 < left < lease * 0.7
        assert leases.until("tok") > monotonic()

"""Fair waiters without a herd: a release wakes one waiter of the name per process, and a
waiter that leaves passes the wake-up on (``distlock._wakeup.Wakers``), so a hand-off costs a constant number of
checks however many wait. Before, every release woke every waiter and each ran a transaction reading the whole
queue: O(waiters) per hand-off (``benchmarks/waiters.py --fair`` measures the rates).

Counted here through the stores' operations (``ops.acquire``, ``ops.keep``): SQLite's on real SQLite files, and
the PostgreSQL lease store's on a real server. There waiters register
before their first try, so the store's order need not be the queue's: a try's answer gives the waiter its place
in the server's queue, and a wake-up goes to the store's waiter with the lowest place (``Wakers.place``).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import distlock
from distlock._async import acquirer
from distlock._backends.sqlite._async import attempt as sqlite_attempt
from distlock._backends.sqlite.wake import WakeDir
from distlock._core import arbiter, ids
from distlock._core.arbiter import Held, Queued
from distlock._core.timing import WAITER_TTL
from distlock._core.types import Claim, Mode
from distlock._wakeup import Wakers

WAITERS = 24


@pytest.fixture
def db() -> Iterator[Path]:
    """A database file in a short directory: a UNIX socket's path has ~100 bytes, pytest's tmp_path is longer
    (and the store would then poll instead of listening)."""
    with tempfile.TemporaryDirectory(prefix="dl-", dir="/tmp") as d:
        path = Path(d) / "locks.db"
        assert distlock_wake_usable(path)
        yield path


def distlock_wake_usable(path: Path) -> bool:
    return WakeDir(str(path)).usable


class _Flag:
    def __init__(self) -> None:
        self.count = 0

    def notify(self) -> None:
        self.count += 1


def test_wakers_wake_the_earliest_and_a_leaver_passes_it_on() -> None:
    wakers: Wakers[str] = Wakers()
    first, second, third, observer = _Flag(), _Flag(), _Flag(), _Flag()
    for w in (first, second, third):
        wakers.watch("k", w)
    wakers.watch("k", observer, every=True)
    wakers.wake("k")
    assert (first.count, second.count, third.count, observer.count) == (1, 0, 0, 1)
    wakers.unwatch("k", third)  # not first: it had no wake-up to pass on
    assert second.count == 0
    wakers.unwatch("k", first)  # granted, cancelled or timed out: the next one looks instead
    assert second.count == 1
    wakers.wake("k")
    assert (second.count, observer.count) == (2, 2)
    wakers.unwatch("k", observer)
    wakers.unwatch("k", second)
    assert not wakers
    wakers.wake("k")  # nobody: nothing to do


async def _queued(store: distlock.AsyncStore, name: str, count: int) -> None:
    """Until ``count`` waiters are queued on the server (not a fixed sleep: the machine may be loaded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        info = await store.inspect(name)
        if info is not None and info.waiters >= count:
            return
        assert loop.time() < deadline, f"waiters never all queued: {info}"
        await asyncio.sleep(0.01)


async def _line_up(store: distlock.AsyncStore, name: str, count: int, order: list[int]) -> list[asyncio.Task[None]]:
    """``count`` fair waiters, each its own lock object, queued one after another (so the queue's order is
    known); each appends its number to ``order`` once it holds, then releases."""

    async def waiter(i: int) -> None:
        lock = store.lock(name, ttl=30, fair=True)
        assert await lock.acquire(timeout=60)
        order.append(i)
        await lock.release()

    tasks = []
    for i in range(count):
        tasks.append(asyncio.create_task(waiter(i)))
        await _queued(store, name, i + 1)
    return tasks


async def _fair_chain(store: distlock.AsyncStore, name: str, counted: Callable[[bool], None]) -> list[int]:
    """A holder, then WAITERS fair waiters queued one after another (each its own lock object); the holder
    releases and the lock goes down the chain once. ``counted(True)`` starts the count at that release. The
    waiters' numbers, in the order they got the lock."""
    holder = store.lock(name, ttl=30, fair=True)
    assert await holder.acquire(timeout=30)
    order: list[int] = []
    tasks = await _line_up(store, name, WAITERS, order)
    counted(True)
    await holder.release()
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    counted(False)
    return order


def _count_calls(obj: Any, attr: str) -> tuple[list[int], Callable[[bool], None]]:
    """Wrap ``obj.attr`` to count its calls while switched on."""
    plain = getattr(obj, attr)
    seen = [0]
    on = [False]

    def counting(*args: Any, **kwargs: Any) -> Any:
        if on[0]:
            seen[0] += 1
        return plain(*args, **kwargs)

    setattr(obj, attr, counting)

    def switch(value: bool) -> None:
        on[0] = value

    return seen, switch


async def test_sqlite_fair_hand_offs_cost_a_constant_number_of_checks(db: Path) -> None:
    """Each hand-off: the granted waiter's check, and the next one's (passed on when the first leaves). When
    every release woke every waiter this chain took WAITERS * (WAITERS + 1) / 2 checks (300 here)."""
    async with await distlock.connect_async(f"sqlite:///{db}") as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        tries, switch = _count_calls(store._backend.ops, "acquire")  # type: ignore[attr-defined]
        order = await _fair_chain(store, name, switch)
    assert order == list(range(WAITERS))  # FIFO
    assert tries[0] <= 3 * WAITERS, tries


async def test_sqlite_waiters_of_a_process_share_one_wake_socket(db: Path) -> None:
    """A release sends one datagram per waiting process: the process's waiters of a name share its socket
    (before: one socket, and one datagram, per waiter). It goes away with the last of them."""
    async with await distlock.connect_async(f"sqlite:///{db}") as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        holder = store.lock(name, ttl=30)
        assert await holder.acquire(timeout=30)

        async def waiter() -> None:
            lock = store.lock(name, ttl=30, fair=True)
            assert await lock.acquire(timeout=60)
            await lock.release()

        tasks = [asyncio.create_task(waiter()) for _ in range(8)]
        await _queued(store, name, len(tasks))
        wake_dir = Path(str(db) + ".wake")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while not (wake_dir.exists() and os.listdir(wake_dir)):  # the first waiter binds it after its first look
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # a socket per waiter would be bound by now
        assert len(os.listdir(wake_dir)) == 1, os.listdir(wake_dir)
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert os.listdir(wake_dir) == []


_OTHER_PROCESS = """
import asyncio, sys
import distlock

async def main(url, name, count):
    async with await distlock.connect_async(url) as store:
        async def one():
            lock = store.lock(name, ttl=30, fair=True)
            assert await lock.acquire(timeout=60)
            await lock.release()
        await asyncio.gather(*(one() for _ in range(count)))

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_sqlite_waiters_in_another_process_are_handed_the_lock_down_the_line(db: Path) -> None:
    """The other process's socket reader passes each release on to its earliest waiter, and each grant there
    passes it on in turn: all of them get the lock, through one shared socket, without polling."""
    url = f"sqlite:///{db}"
    async with await distlock.connect_async(url) as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        holder = store.lock(name, ttl=30)
        assert await holder.acquire(timeout=30)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), "src") if p))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _OTHER_PROCESS, url, name, "6", env=env, cwd=Path(__file__).parent.parent
        )
        try:
            await _queued(store, name, 6)
            await holder.release()
            assert await asyncio.wait_for(proc.wait(), 60) == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_sqlite_reader_batch_all_get_in_one_check_each(db: Path) -> None:
    """Readers queued together behind a writer all get in when it releases, one check each (each grant passes
    the wake-up on), and the writers queued behind them are not all woken to look."""
    async with await distlock.connect_async(f"sqlite:///{db}") as store:
        name = f"rw-{uuid.uuid4().hex[:8]}"
        writer = store.rwlock(name, ttl=30, fair=True).write
        assert await writer.acquire(timeout=30)
        readers, writers = 8, 12
        holding = [0]
        go = asyncio.Event()

        async def one(read: bool) -> None:
            rw = store.rwlock(name, ttl=30, fair=True)
            lock = rw.read if read else rw.write
            assert await lock.acquire(timeout=60)
            holding[0] += 1
            if read:
                await go.wait()  # the readers hold together
            await lock.release()

        tasks = []
        for i in range(readers + writers):
            tasks.append(asyncio.create_task(one(i < readers)))
            await _queued(store, name, i + 1)
        tries, switch = _count_calls(store._backend.ops, "acquire")  # type: ignore[attr-defined]
        switch(True)
        await writer.release()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while holding[0] < readers:  # all readers hold at once
            assert loop.time() < deadline, holding
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # any herd of woken writers would look now
        checks = tries[0]
        switch(False)
        go.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert holding[0] == readers + writers
    assert checks <= readers + 3, checks  # before: every reader and writer looked (20 and more)


def test_the_entries_ahead_the_rule_looks_at_decide_as_the_whole_queue() -> None:
    """``arbiter.looks_ahead``: the SQLite store reads only that many entries ahead of a claim (then its own);
    every decision must be the one the whole queue gives. All small queues, every claim kind, queued or not."""
    modes = list(Mode)
    for size in range(4):
        for kinds in itertools.product(modes, repeat=size):
            queue = [Queued(f"q{i}", m, i + 1, 100.0) for i, m in enumerate(kinds)]
            for holders in ([], [Held("h", Mode.READ, 100.0)], [Held("h", Mode.SEMAPHORE, 100.0)]):
                for mode, fair, permits, place in itertools.product(modes, (False, True), (1, 2), range(size + 1)):
                    token = queue[place].token if place < size else "new"
                    whole = arbiter.may_acquire(mode, token, permits, fair, holders, queue)
                    limit = arbiter.looks_ahead(mode, fair, permits)
                    ahead = queue[:place] if place < size else queue
                    read = ahead[: len(ahead) if limit is None else limit] + queue[place : place + 1]
                    assert arbiter.may_acquire(mode, token, permits, fair, holders, read) == whole, (
                        mode, fair, permits, kinds, place, holders,
                    )  # fmt: skip


async def test_sqlite_fair_waiters_behind_the_first_of_their_process_only_keep_their_place(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the lock is held, only the earliest fair waiter of the process re-checks the queue at each wait
    slice; the ones behind it push their queue entries' deadlines on (one UPDATE) and are woken in turn. Before,
    each of N waiters read the whole queue at every slice."""
    monkeypatch.setattr(sqlite_attempt, "LEASE_WAIT_SLICE", 0.05)  # slices pass quickly; the counts tell
    async with await distlock.connect_async(f"sqlite:///{db}") as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        backend: Any = store._backend  # type: ignore[attr-defined]
        holder = store.lock(name, ttl=30, fair=True)
        assert await holder.acquire(timeout=30)
        tries: dict[str, int] = {}
        keeps = [0]
        plain_try, plain_keep = backend.ops.acquire, backend.ops.keep

        def counted_try(claim: Any, *args: Any) -> Any:
            tries[claim.token] = tries.get(claim.token, 0) + 1
            return plain_try(claim, *args)

        def counted_keep(claim: Any) -> Any:
            keeps[0] += 1
            return plain_keep(claim)

        backend.ops.acquire, backend.ops.keep = counted_try, counted_keep
        order: list[int] = []
        tasks = await _line_up(store, name, 8, order)
        first, *others = list(tries)
        before = {t: tries[t] for t in others}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while tries[first] < 6:  # the first re-checked at a few slices
            assert loop.time() < deadline, (tries, keeps)
            await asyncio.sleep(0.01)
        assert {t: tries[t] for t in others} == before  # no queue reads behind the first
        assert keeps[0] > 0  # but their entries kept alive
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert order == list(range(8))


def test_wakers_queued_waiters_take_turns_by_their_place() -> None:
    """``queued`` waiters: until placed, each takes every wake-up (it may be the head); once placed, only the
    lowest place of the key is woken; it passes the turn on when it leaves or when its place moves back; an
    exclusive grant leaves without passing it on."""
    wakers: Wakers[str] = Wakers()
    a, b, c = _Flag(), _Flag(), _Flag()
    for w in (a, b, c):  # registered a, b, c; the server's queue says c, a, b
        wakers.watch("k", w, queued=True)
    wakers.wake("k")
    assert (a.count, b.count, c.count) == (1, 1, 1)  # none placed yet
    wakers.place("k", a, 20)
    wakers.place("k", b, 30)
    wakers.wake("k")
    assert (a.count, b.count, c.count) == (2, 1, 2)  # a is the lowest placed; c still unplaced
    wakers.place("k", c, 10)
    assert wakers.head("k") is c
    wakers.wake("k")
    assert (a.count, b.count, c.count) == (2, 1, 3)
    wakers.place("k", c, 40)  # its entry ran out and it joined again at the back: the turn goes to a
    assert (a.count, b.count, c.count) == (3, 1, 3)
    wakers.unwatch("k", a, pass_on=False)  # granted exclusively: its release wakes the next
    assert (b.count, c.count) == (1, 3)
    assert wakers.head("k") is b
    wakers.unwatch("k", b)  # gave up (timed out): the turn goes on
    assert c.count == 4
    wakers.unwatch("k", c)
    assert not wakers


SQL_LEASE = pytest.mark.parametrize("sql", ["postgres", "mysql"])


@SQL_LEASE
async def test_sql_lease_fair_hand_offs_cost_a_constant_number_of_tries(
    sql: str, request: pytest.FixtureRequest
) -> None:
    """Each hand-off down a chain of fair waiters of one store: the next waiter's try (and at most one or two
    more: PostgreSQL's own NOTIFY arriving after the local wake-up, MySQL's next head looking once before it
    waits on the bell). When every release woke every waiter of the store (each waiter registers before its
    first try, so registration order was no guide) the chain took WAITERS * (WAITERS + 1) / 2 tries (300 here)."""
    async with await distlock.connect_async(request.getfixturevalue(f"{sql}_url")) as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        tries, switch = _count_calls(store._backend.ops, "acquire")  # type: ignore[attr-defined]
        order = await _fair_chain(store, name, switch)
    assert order == list(range(WAITERS))  # FIFO
    assert tries[0] <= 3 * WAITERS, tries


@SQL_LEASE
async def test_sql_lease_fair_waiters_behind_the_first_keep_their_place_in_one_batch(
    sql: str, request: pytest.FixtureRequest
) -> None:
    """A hold longer than the queue entries' deadline (WAITER_TTL): only the store's first queued waiter tries
    at each wait slice; the others keep their entries alive with one UPDATE per slice for all of them, and none
    loses its place (FIFO after the release). Before, each of the N waiters ran a try at every slice."""
    async with await distlock.connect_async(request.getfixturevalue(f"{sql}_url")) as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        ops: Any = store._backend.ops  # type: ignore[attr-defined]
        holder = store.lock(name, ttl=30, fair=True)
        assert await holder.acquire(timeout=30)
        order: list[int] = []
        tasks = await _line_up(store, name, 10, order)
        tries, switch_tries = _count_calls(ops, "acquire")
        keeps, switch_keeps = _count_calls(ops, "keep")
        switch_tries(True)
        switch_keeps(True)
        await asyncio.sleep(WAITER_TTL + 1.5)
        switch_tries(False)
        switch_keeps(False)
        info = await store.inspect(name)
        assert info is not None and info.waiters == 10, info  # every entry outlived its first deadline
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert order == list(range(10))
    # the first waiter: about one try a second; the nine behind it: none (before: about 60 in all)
    assert tries[0] <= 2 * (WAITER_TTL + 2), tries
    assert 0 < keeps[0] <= 4 * (WAITER_TTL + 2), keeps


@SQL_LEASE
async def test_sql_lease_many_waiters_timing_out_together_leave_nothing(
    sql: str, request: pytest.FixtureRequest
) -> None:
    """200 fair waiters of one store time out at once: each acquire returns False within its timeout's reach
    (no "database call timed out" from the clean-ups queueing on the name's lock), and no queue entry is left."""
    async with await distlock.connect_async(request.getfixturevalue(f"{sql}_url")) as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        holder = store.lock(name, ttl=30)
        assert await holder.acquire(timeout=30)
        locks = [store.lock(name, ttl=30, fair=True) for _ in range(200)]
        gathered = asyncio.gather(*(lock.acquire(timeout=1.5) for lock in locks), return_exceptions=True)
        results = await asyncio.wait_for(gathered, 30)
        # A look still in flight at the deadline is cut and said so (docs/operations.md, "One deadline"): on a
        # busy machine one of 200 may be; a clean-up that timed out ("database call timed out") never may
        cut = [r for r in results if isinstance(r, distlock.BackendError) and "Lost connection" in str(r)]
        assert [r for r in results if r is not False and r not in cut] == [], results
        assert len(cut) <= 20, cut
        info = await store.inspect(name)
        assert info is not None and info.waiters == 0, info
        await holder.release()


@SQL_LEASE
async def test_sql_lease_waiters_giving_up_together_clean_up_in_a_few_batches(
    sql: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 waiters of one store time out at once: their clean-ups share a few transactions (each one runs for
    every waiter that came while the one before ran), not one each on the store's four pool connections, which
    kept the last of them waiting past their deadlines (and beyond the clean-up budget, "database call timed
    out"). Each still returns False, and nothing of them is left."""
    # the clean-up's own budget (half a second after the deadline) is not what this checks: on a busy machine
    # 200 clean-ups, batched or not, may outlast it, and the acquires then fail instead of returning False
    monkeypatch.setattr(acquirer, "CLEANUP", 10.0)
    async with await distlock.connect_async(request.getfixturevalue(f"{sql}_url")) as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        ops: Any = store._backend.ops  # type: ignore[attr-defined]
        sizes: list[int] = []
        plain = ops.abandon_settled

        def counted(claims: Any) -> Any:
            sizes.append(len(claims))
            return plain(claims)

        ops.abandon_settled = counted
        holder = store.lock(name, ttl=30)
        assert await holder.acquire(timeout=30)
        locks = [store.lock(name, ttl=30, fair=True) for _ in range(200)]
        started = asyncio.get_running_loop().time()
        results = await asyncio.wait_for(asyncio.gather(*(lock.acquire(timeout=1.5) for lock in locks)), 30)
        took = asyncio.get_running_loop().time() - started
        assert results == [False] * 200
        # a few batches, not one transaction each (how few depends on how busy the machine is)
        assert sum(sizes) == 200 and len(sizes) <= 100 and max(sizes) >= 5, sizes
        info = await store.inspect(name)
        assert info is not None and info.waiters == 0, info
        await holder.release()
    assert took < 1.5 + 10.0 + 1.0, took  # within the clean-up budget after the deadline (a bound, not a speed)


@SQL_LEASE
async def test_sql_lease_a_failed_clean_up_batch_leaves_the_others_to_the_next(
    sql: str, request: pytest.FixtureRequest
) -> None:
    """Fault: a clean-up batch of waiters giving up together fails. The waiter that ran it gets the
    error (as a lone clean-up's failure did); the others, whose claims were in that batch, clean up in the
    next one and return False; only the failed waiter's queue entry is left, to its queue deadline."""
    from distlock import BackendError

    async with await distlock.connect_async(request.getfixturevalue(f"{sql}_url")) as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        ops: Any = store._backend.ops  # type: ignore[attr-defined]
        plain = ops.abandon_settled
        failed: list[int] = []

        def failing_once(claims: Any) -> Any:
            if not failed and len(claims) > 1:  # the first batch that carries others' claims
                failed.append(len(claims))
                raise BackendError("injected: the batch's transaction failed", backend=sql)
            return plain(claims)

        ops.abandon_settled = failing_once
        holder = store.lock(name, ttl=30)
        assert await holder.acquire(timeout=30)
        locks = [store.lock(name, ttl=30, fair=True) for _ in range(20)]
        results = await asyncio.wait_for(
            asyncio.gather(*(lock.acquire(timeout=1.0) for lock in locks), return_exceptions=True), 30
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        assert failed and failed[0] > 1, failed
        assert len(errors) == 1 and "injected" in str(errors[0]), results
        assert results.count(False) == 19, results
        info = await store.inspect(name)
        assert info is not None and info.waiters <= 1, info
        await holder.release()


@SQL_LEASE
async def test_sql_lease_a_waiter_whose_entry_vanishes_while_it_keeps_its_place_queues_again(
    sql: str, request: pytest.FixtureRequest
) -> None:
    """Fault: the queue entry of a waiter that only keeps its place is deleted under it (what an expiry or an
    operator does). Its next keep finds the entry gone, it runs a full try and joins again at the back, and
    every waiter still gets the lock: the middle one now last."""
    from distlock._backends.sql import names as sn
    from distlock._backends.sql import stmt as st

    async with await distlock.connect_async(request.getfixturevalue(f"{sql}_url")) as store:
        name = f"fair-{uuid.uuid4().hex[:8]}"
        backend: Any = store._backend  # type: ignore[attr-defined]
        holder = store.lock(name, ttl=30, fair=True)
        assert await holder.acquire(timeout=30)
        order: list[int] = []
        tasks = await _line_up(store, name, 3, order)
        rows = await backend._tx(
            lambda: st.single(
                st.Stmt("SELECT token FROM distlock_queue WHERE name_key = %s ORDER BY seq", (sn.name_key(name),))
            ),
            tx=False,
        )
        middle = str(rows.rows[1][0])
        await backend._tx(
            lambda: st.single(st.Stmt("DELETE FROM distlock_queue WHERE token = %s", (middle,))), tx=False
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while True:  # back in the queue within a slice or two, behind the third
            rows = await backend._tx(
                lambda: st.single(
                    st.Stmt("SELECT token FROM distlock_queue WHERE name_key = %s ORDER BY seq", (sn.name_key(name),))
                ),
                tx=False,
            )
            tokens = [str(r[0]) for r in rows.rows]
            if middle in tokens:
                break
            assert loop.time() < deadline, tokens
            await asyncio.sleep(0.05)
        assert tokens[-1] == middle, tokens
        await holder.release()
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    assert order == [0, 2, 1]


class _Calls:
    """An attempt that notes, in order, which of its methods the acquirer calls; its waits last ``extra``
    seconds past the timeout they are given (a wait that surely ends after the acquire's deadline)."""

    def __init__(self, inner: Any, calls: list[str], extra: float) -> None:
        self._inner, self._calls, self._extra = inner, calls, extra

    async def try_acquire(self) -> Any:
        self._calls.append("try_acquire")
        return await self._inner.try_acquire()

    async def try_late(self) -> Any:
        self._calls.append("try_late")
        return await self._inner.try_late()

    async def wait(self, grant: Any, timeout: float | None) -> None:
        self._calls.append("wait")
        await self._inner.wait(grant, timeout)
        await asyncio.sleep(self._extra)

    async def abandon(self) -> None:
        self._calls.append("abandon")
        await self._inner.abandon()


async def test_the_look_after_a_wait_that_ended_past_the_deadline_is_the_attempts_late_one(db: Path) -> None:
    """The acquirer's part: after a wait that ended past the deadline comes ``try_late`` (the backend's look
    that sends as little as it can), then the clean-up, never an ordinary try."""
    async with await distlock.connect_async(f"sqlite:///{db}") as store:
        name = f"late-{uuid.uuid4().hex[:8]}"
        holder = store.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        backend: Any = store._backend  # type: ignore[attr-defined]
        plain = backend.attempt
        calls: list[str] = []
        backend.attempt = lambda claim: _Calls(plain(claim), calls, 0.05)
        assert not await store.lock(name, ttl=30).acquire(timeout=0.3)
        assert calls[0] == "try_acquire" and calls[-3:] == ["wait", "try_late", "abandon"], calls
        assert "try_late" not in calls[:-2], calls
        await holder.release()


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
async def test_the_late_look_sends_nothing_where_a_try_locks_the_name(
    backend: str, db: Path, request: pytest.FixtureRequest
) -> None:
    """Where a try is a write on the name's lock (SQLite's file lock, the SQL lease tables' name lock), the look
    at the deadline (``try_late``) sends nothing without a hand-over received: a crowd of waiters timing out
    together used to run one more try each there, one after another on that lock, and came back up to a
    second past their deadlines. The clean-up after it leaves nothing."""
    url = f"sqlite:///{db}" if backend == "sqlite" else request.getfixturevalue(f"{backend}_url")
    async with await distlock.connect_async(url) as owner, await distlock.connect_async(url) as store:
        name = f"late-{uuid.uuid4().hex[:8]}"
        holder = owner.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        target: Any = store._backend  # type: ignore[attr-defined]
        claim = Claim(name, Mode.EXCLUSIVE, ids.new_token(), ids.owner_id("late"), ttl=30, fair=True)
        attempt = target.attempt(claim)
        grant = await attempt.try_acquire()
        assert not grant.acquired
        await attempt.wait(grant, 0.2)
        tries, switch = _count_calls(target.ops, "acquire")
        switch(True)
        assert not (await attempt.try_late()).acquired
        switch(False)
        assert tries[0] == 0, tries
        await attempt.abandon()
        info = await owner.inspect(name)
        assert info is not None and not info.waiters, info
        await holder.release()

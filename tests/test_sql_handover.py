"""PostgreSQL lease mode: the direct hand-over (``docs/sql.md``, direct hand-over).

A release promotes the first queued exclusive waiter (a holder row whose lease end is the waiter's queue
deadline, a fence drawn) and its NOTIFY names that waiter with the lease end as a stamp. The waiter holds on
the NOTIFY alone when the stamp is the deadline its last refused try wrote, with a lease counted from that
try's send time, and its first renewal extends the row to the TTL; any other NOTIFY is only a wake-up, and the
try that follows confirms the promoted row. Counted here through the store's operations on a real server;
two stores in one process reach each other only through the server (LISTEN/NOTIFY), as two processes do.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import distlock
from distlock._backends.sql import lease_autocommit as ac
from distlock._backends.sql import names as sn
from distlock._backends.sql import stmt as st
from distlock._core import ids
from distlock._core.timing import WAITER_TTL
from distlock._core.types import Claim, Mode
from tests.test_fair_wakeups import _queued

ROOT = Path(__file__).resolve().parent.parent


def _counting(ops: Any, attr: str) -> list[int]:
    """Count the calls of ``ops.attr`` from now on."""
    plain = getattr(ops, attr)
    seen = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        return plain(*args, **kwargs)

    setattr(ops, attr, counting)
    return seen


class _Waiter:
    """A lock's acquire in a task of its own (a holding belongs to its task): ``got`` is set once it holds,
    ``fence`` and ``owned`` are read there, and it releases when ``done`` is set."""

    def __init__(self, lock: distlock.AsyncLock) -> None:
        self.lock = lock
        self.got = asyncio.Event()
        self.done = asyncio.Event()
        self.fence: int | None = None
        self.owned_at_end = False
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        assert await self.lock.acquire(timeout=30)
        self.fence = self.lock.fence
        self.got.set()
        await self.done.wait()
        self.owned_at_end = await self.lock.owned()
        await self.lock.release()

    async def holds(self) -> None:
        await asyncio.wait_for(self.got.wait(), 10)

    async def let_go(self) -> None:
        self.done.set()
        await asyncio.wait_for(self.task, 10)


async def _listening(store: distlock.AsyncStore) -> None:
    """Until the store's LISTEN is on, and a moment more: before it, its waiter polls (a try in flight at the
    release would be counted)."""
    backend: Any = store._backend  # type: ignore[attr-defined]
    deadline = time.monotonic() + 20
    while not backend._listening:
        assert time.monotonic() < deadline, "the store never listened"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)


async def _row(store: distlock.AsyncStore, sql: str, *params: object) -> list[tuple[Any, ...]]:
    backend: Any = store._backend  # type: ignore[attr-defined]
    r = await backend._tx(lambda: st.single(st.Stmt(sql, params)), tx=False)
    return list(r.rows)


@pytest.mark.parametrize("prefix", ["", "Caps"])
async def test_a_release_hands_the_name_to_the_queued_waiter_which_holds_without_a_try(
    postgres_url: str, prefix: str
) -> None:
    """``Caps``: a ``table_prefix`` with capitals. PostgreSQL folds the channel of an unquoted ``LISTEN`` to lower
    case and ``pg_notify`` does not, so the LISTENs are quoted (such a store was never pushed and took every
    hand-over by polling: p50 4.5 ms, up to a second)."""
    url = postgres_url
    if prefix:
        url += ("&" if "?" in url else "?") + f"table_prefix={prefix}{uuid.uuid4().hex[:8]}"
    name = f"ho-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(url) as a, await distlock.connect_async(url) as b:
        holder, waiter = a.lock(name, ttl=30), b.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        first = holder.fence
        w = _Waiter(waiter)
        await _queued(a, name, 1)  # a waiter that is not fair queues too: a release can hand it the name
        await _listening(b)
        tries = _counting(b._backend.ops, "acquire")  # type: ignore[attr-defined]
        await holder.release()
        await w.holds()
        assert tries[0] == 0, "the woken waiter ran a try: the hand-over was not trusted"
        assert first is not None and w.fence is not None and w.fence > first
        info = await b.inspect(name)
        assert info is not None and info.waiters == 0 and len(info.holders) == 1, info
        # the promoted row lasts until the waiter's queue deadline, not a TTL (a dead waiter: F12) ...
        left = info.holders[0].ttl_left
        assert left is not None and left <= WAITER_TTL, info
        # ... and the first renewal, due within a third of the lease the waiter counts, extends it to the TTL
        deadline = time.monotonic() + WAITER_TTL
        while (left := (await b.inspect(name)).holders[0].ttl_left) <= WAITER_TTL:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the handed-over lease was never renewed"
            await asyncio.sleep(0.05)
        assert left > WAITER_TTL
        await w.let_go()
        assert w.owned_at_end


async def test_a_hand_over_is_told_to_the_waiters_store_alone(postgres_url: str) -> None:
    """Each store LISTENs on the prefix's channel and on a channel of its own, which its waiters' queue rows
    name (``reply``): the release that hands one of them the name NOTIFYs that store alone. On the shared
    channel every listening store read every hand-over (8 processes on one lock: 7.9 notifications read
    per acquisition)."""
    name = f"ho-{uuid.uuid4().hex[:8]}"
    key = sn.name_key(name)
    async with (
        await distlock.connect_async(postgres_url) as a,
        await distlock.connect_async(postgres_url) as b,
        await distlock.connect_async(postgres_url) as c,
    ):
        holder = a.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        first = _Waiter(b.lock(name, ttl=30))
        await _queued(a, name, 1)
        second = _Waiter(c.lock(name, ttl=30))
        await _queued(a, name, 2)
        deadline = time.monotonic() + 20
        # both entries name their store's channel (written by a try made once that store listened)
        while len(await _row(a, "SELECT 1 FROM distlock_queue WHERE name_key = %s AND reply IS NOT NULL", key)) < 2:
            assert time.monotonic() < deadline, "the waiters' entries never named their stores' channels"
            await asyncio.sleep(0.02)
        told: list[sn.HandOver] = []
        backend: Any = c._backend  # type: ignore[attr-defined]
        plain = backend._handed_on

        def seen(k: str, handed: sn.HandOver) -> None:
            told.append(handed)
            plain(k, handed)

        backend._handed_on = seen
        await holder.release()
        await first.holds()
        await asyncio.sleep(0.1)  # a NOTIFY to every store would have reached c's by now
        assert told == [], "the other waiting store was told of the hand-over"
        await first.let_go()
        await second.holds()
        assert len(told) == 1  # its own
        await second.let_go()


async def test_a_stale_stamp_is_only_a_wake_up_and_the_try_confirms_the_row(postgres_url: str) -> None:
    """The waiter's queue deadline is rewritten after its try (as its store's batched keep would): the release's
    stamp then differs from the deadline the waiter knows, so it does not hold on the NOTIFY; its try finds the
    promoted row and CONFIRMS it (lease end now + TTL), one round trip."""
    name = f"ho-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(postgres_url) as a, await distlock.connect_async(postgres_url) as b:
        holder, waiter = a.lock(name, ttl=30), b.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        w = _Waiter(waiter)
        await _queued(a, name, 1)
        await _listening(b)
        await _row(a, "UPDATE distlock_queue SET expires_at = expires_at + 0.5 WHERE name_key = %s", sn.name_key(name))
        tries = _counting(b._backend.ops, "acquire")  # type: ignore[attr-defined]
        await holder.release()
        await w.holds()
        assert tries[0] == 1, tries
        info = await b.inspect(name)
        assert info is not None and info.holders[0].ttl_left is not None and info.holders[0].ttl_left > WAITER_TTL
        await w.let_go()


async def test_a_claim_with_a_ttl_shorter_than_the_queue_deadline_is_woken_not_handed_over(postgres_url: str) -> None:
    """A promoted row lasts until the queue deadline (WAITER_TTL): for a claim with a shorter TTL a dead waiter
    would block the name longer than a dead holder, so such a claim does not queue (not fair) and takes the
    name with its own try."""
    name = f"ho-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(postgres_url) as a, await distlock.connect_async(postgres_url) as b:
        holder, waiter = a.lock(name, ttl=30), b.lock(name, ttl=2)
        assert await holder.acquire(timeout=10)
        w = _Waiter(waiter)
        await asyncio.sleep(0.3)
        info = await a.inspect(name)
        assert info is not None and info.waiters == 0, info
        tries = _counting(b._backend.ops, "acquire")  # type: ignore[attr-defined]
        await holder.release()
        await w.holds()
        assert tries[0] >= 1
        info = await a.inspect(name)
        assert info is not None and info.holders[0].ttl_left is not None and info.holders[0].ttl_left > 1.5, info
        await w.let_go()


async def test_an_entry_without_an_owner_record_is_not_promoted(postgres_url: str) -> None:
    """A queue entry written without the owner record (a client from before the hand-over) is never promoted:
    that client would take its row for a plain grant and not confirm it. The release leaves the name free."""
    name = f"ho-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(postgres_url) as a:
        holder = a.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        old = uuid.uuid4().hex
        await _row(
            a,
            "INSERT INTO distlock_queue (token, name_key, name, mode, expires_at) "
            "VALUES (%s, %s, %s, 'lock', extract(epoch from now()) + 5)",
            old,
            sn.name_key(name),
            name,
        )
        await holder.release()
        assert await _row(a, "SELECT 1 FROM distlock_holders WHERE token = %s", old) == []
        other = a.lock(name, ttl=30)
        assert await other.acquire(timeout=0)  # not fair: the old client's entry does not hold it back
        await other.release()
        await _row(a, "DELETE FROM distlock_queue WHERE token = %s", old)


async def test_a_hand_over_received_before_the_deadline_is_taken_at_it(postgres_url: str) -> None:
    """The look after a wait that ended at the acquire's deadline sends no try (a crowd timing out together
    would queue on the name's lock), but a hand-over that has already arrived is taken: it needs no round trip,
    and the lock was granted within the timeout."""
    name = f"ho-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(postgres_url) as a, await distlock.connect_async(postgres_url) as b:
        holder = a.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        first = holder.fence
        backend: Any = b._backend  # type: ignore[attr-defined]
        claim = Claim(name, Mode.EXCLUSIVE, ids.new_token(), ids.owner_id("late"), ttl=30)
        attempt = backend.attempt(claim)
        await backend._arm_push()  # LISTEN (a waiting acquire starts it)
        assert not (await attempt.try_acquire()).acquired  # queued, with the deadline its try wrote
        await _listening(b)
        tries = _counting(backend.ops, "acquire")
        await holder.release()
        deadline = time.monotonic() + 10
        while claim.token not in backend._handed:
            assert time.monotonic() < deadline, "the hand-over never arrived"
            await asyncio.sleep(0.01)
        grant = await attempt.try_late()
        assert grant.acquired and grant.fence is not None and first is not None and grant.fence > first, grant
        assert tries[0] == 0
        info = await b.inspect(name)
        assert info is not None and [h.fence for h in info.holders] == [grant.fence], info
        assert await backend.release(claim)
        assert await b.inspect(name) is None


async def test_at_the_deadline_without_a_hand_over_nothing_is_sent(postgres_url: str) -> None:
    name = f"ho-{uuid.uuid4().hex[:8]}"
    async with await distlock.connect_async(postgres_url) as a, await distlock.connect_async(postgres_url) as b:
        holder = a.lock(name, ttl=30)
        assert await holder.acquire(timeout=10)
        backend: Any = b._backend  # type: ignore[attr-defined]
        claim = Claim(name, Mode.EXCLUSIVE, ids.new_token(), ids.owner_id("late"), ttl=30)
        attempt = backend.attempt(claim)
        assert not (await attempt.try_acquire()).acquired
        tries = _counting(backend.ops, "acquire")
        assert not (await attempt.try_late()).acquired
        assert tries[0] == 0
        await attempt.abandon()
        info = await a.inspect(name)
        assert info is not None and info.waiters == 0, info
        await holder.release()


def test_a_waiter_killed_while_queued_blocks_the_name_no_longer_than_its_queue_deadline(
    postgres_url: str, tmp_path: Path
) -> None:
    """kill -9 of a queued waiter: the release promotes it all the same (it cannot know), and the dead waiter's
    row ends at its queue deadline, at most WAITER_TTL after its last try: the name is free again by then."""
    name = f"ho-{uuid.uuid4().hex[:8]}"
    with distlock.connect(postgres_url) as store:
        holder = store.lock(name, ttl=30)
        assert holder.acquire(timeout=10)
        first = holder.fence
        assert first is not None
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.proc_worker", "hold", postgres_url, name, "30", str(tmp_path)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 20
            while (info := store.inspect(name)) is None or info.waiters < 1:
                assert time.monotonic() < deadline, "the child never queued"
                time.sleep(0.01)
            child.send_signal(signal.SIGKILL)
            child.wait(10)
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(10)
            assert child.stdout is not None
            child.stdout.close()
        killed = time.monotonic()
        holder.release()
        info = store.inspect(name)
        assert info is not None and len(info.holders) == 1 and (info.holders[0].fence or 0) > first, info
        assert info.holders[0].ttl_left is not None and info.holders[0].ttl_left <= WAITER_TTL
        taker = store.lock(name, ttl=30)
        assert taker.acquire(timeout=WAITER_TTL + 5)
        assert time.monotonic() - killed <= WAITER_TTL + 2
        taker.release()


@pytest.mark.parametrize("settled", [True, False])
@pytest.mark.parametrize("first", ["abandon", "release"])
def test_a_waiter_giving_up_while_it_is_promoted_leaves_no_row(postgres_url: str, first: str, settled: bool) -> None:
    """A waiter gives up (its abandon with or without the name's lock: the release takes none) while a release
    promotes it. Both orders, each transaction held open at the entry's row lock from a second connection:
    the abandon first -> the release's DELETE of the entry finds nothing and promotes nobody; the release
    first -> the abandon finds its entry gone and deletes, in a later statement (a later snapshot), the row the
    release made. Deleting only in the first statement's snapshot left that row until the queue deadline."""
    import threading

    import psycopg

    from distlock._backends.sql.dialects import postgres
    from distlock._core.types import Claim, Mode

    prefix = "distlock"
    ops = ac.AutocommitOps(postgres(prefix), prefix, f"{prefix}_wake")
    name = f"ho-{uuid.uuid4().hex[:8]}"
    key = sn.name_key(name)

    def claim() -> Claim:
        return Claim(name=name, token=uuid.uuid4().hex, owner="o", mode=Mode.EXCLUSIVE, ttl=30.0, permits=1)

    def run(conn: Any, stmt: st.Stmt) -> st.Result:
        """As the driver sends it: several statements as one Query (client-side binding), else one."""
        cur = psycopg.ClientCursor(conn)
        cur.execute(stmt.sql, stmt.params)
        sets = [st.Result(cur.fetchall() if cur.description is not None else [], cur.rowcount)]
        while cur.nextset():
            sets.append(st.Result(cur.fetchall() if cur.description is not None else [], cur.rowcount))
        return sets[stmt.batch or 0]

    def drive(conn: Any, gen: Any, first: st.Result | None = None) -> Any:
        try:
            stmt = next(gen) if first is None else gen.send(first)
            while True:
                stmt = gen.send(run(conn, stmt))
        except StopIteration as stop:
            return stop.value

    with distlock.connect(postgres_url):  # the tables
        pass
    a = psycopg.connect(postgres_url, autocommit=True)
    b = psycopg.connect(postgres_url, autocommit=True)
    try:
        holder, waiter = claim(), claim()
        assert drive(a, ops.acquire(holder, key)).acquired
        assert not drive(a, ops.acquire(waiter, key)).acquired  # queued, with its owner record

        def settled_abandon() -> Any:  # what a waiter whose last try was answered sends (batched, here alone)
            found = yield from ops.abandon_settled([(waiter, key)])
            return found[waiter.token]

        abandon = settled_abandon() if settled else ops.abandon(waiter, key)
        release = ops.release(holder, key)
        done = threading.Event()
        if first == "abandon":
            a.execute("BEGIN")
            answer = run(a, next(abandon))  # holds the entry's row lock

            def second() -> None:
                drive(b, release)
                done.set()

            t = threading.Thread(target=second)
            t.start()
            assert not done.wait(0.5)  # the release waits for the entry's row lock
            a.execute("COMMIT")
            assert drive(a, abandon, answer)
        else:
            b.execute("BEGIN")
            answer = run(b, next(release))  # promoted the waiter; holds its entry's row lock
            assert answer.rows[0][2] is not None, answer.rows

            def second() -> None:
                assert drive(a, abandon)
                done.set()

            t = threading.Thread(target=second)
            t.start()
            assert not done.wait(0.5)  # the abandon waits for the entry's row lock
            b.execute("COMMIT")
        t.join(10)
        assert done.is_set()
        rows = a.execute(f"SELECT token FROM {prefix}_holders WHERE name_key = %s", (key,)).fetchall()
        assert rows == [], rows
        assert a.execute(f"SELECT 1 FROM {prefix}_queue WHERE token = %s", (waiter.token,)).fetchall() == []
    finally:
        a.close()
        b.close()


def test_a_notify_payload_is_a_grant_only_when_whole() -> None:
    """The listener's parse: the name key alone is a wake-up; ``key|digest|fence|stamp`` a hand-over; anything
    malformed after the key only wakes (a payload another program sent on the channel never grants)."""
    assert sn.handover_of("abc") == ("abc", None)
    assert sn.handover_of("abc|d1|42|1795813519.564185") == ("abc", sn.HandOver("d1", 42, 1795813519.564185))
    for bad in ("abc|d1|x|1.5", "abc|d1|42", "abc|d1|42|1.5|more", "abc|", "abc|d1|42|nan-ish"):
        assert sn.handover_of(bad) == ("abc", None), bad
    assert sn.token_digest("t") == sn.token_digest("t") and len(sn.token_digest("t")) == 32

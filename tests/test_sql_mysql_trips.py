"""MySQL/MariaDB lease mode: what one try of the acquire sends: two round trips, to keep a hand-off near the raw one.

The try is one transaction on a pooled connection: the name's ``GET_LOCK`` goes in the same round trip as the
read of its holders and queue (its answer and the clock carried in session variables), and the writes of the
decision in the same round trip as the COMMIT. Counted here on a real server by wrapping PyMySQL's
``Cursor.execute`` (one call is one round trip) on the calling thread; the bell thread's calls are not counted.
Also what the variables carry when the name's lock is NOT granted: the try decides nothing and writes nothing.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql
import pymysql.cursors
import pytest

import distlock
from distlock._backends.sql import names as sn
from distlock._backends.sql import stmt as st
from distlock._core import ids
from distlock._core.timing import drift_margin
from distlock._core.types import Claim, Mode
from tests.waiting import until


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements PyMySQL sends from this thread from now on, one entry per round trip."""
    seen: list[str] = []
    me = threading.get_ident()
    plain = pymysql.cursors.Cursor.execute

    def execute(self: Any, query: str, args: Any = None) -> Any:
        if threading.get_ident() == me:
            seen.append(query)
        return plain(self, query, args)

    monkeypatch.setattr(pymysql.cursors.Cursor, "execute", execute)
    yield seen


def _raw(url: str) -> Any:
    cfg = distlock._url.parse_url(url)
    host, port = cfg.hosts[0]
    return pymysql.connect(
        host=host, port=port, user=cfg.username, password=cfg.password, database=cfg.path.lstrip("/"), autocommit=True
    )


def test_an_acquire_is_two_round_trips(mysql_url: str, calls: list[str]) -> None:
    name = f"trips-{uuid.uuid4().hex[:8]}"
    with distlock.connect(mysql_url) as a, distlock.connect(mysql_url) as b:
        assert a.inspect(name) is None  # both stores open (tables made, pools warm) before counting
        assert b.inspect(name) is None
        held = a.lock(name, ttl=10)
        calls.clear()
        assert held.acquire(timeout=5)
        granted = list(calls)
        # a fair waiter refused: it joins the queue and reads its place, in as many round trips
        calls.clear()
        assert not b.lock(name, ttl=10, fair=True).acquire(timeout=0)
        queued = [c for c in calls if "_queue" in c and "SELECT 2," not in c]
        refused = list(calls)
        held.release()
    assert len(granted) == 2, granted
    assert "GET_LOCK" in granted[0] and "_holders" in granted[0], "the name's lock goes with the read"
    assert "INSERT INTO" in granted[1] and "COMMIT; DO RELEASE_ALL_LOCKS()" in granted[1], granted[1]
    # the transaction cut the session's idle timeout while it lasted, and its last round trip puts it back
    assert "wait_timeout" in granted[0] and granted[1].endswith("AS UNSIGNED)"), granted
    assert "GET_LOCK" in refused[0]
    assert any("ON DUPLICATE KEY UPDATE" in c and "SELECT seq" in c and "COMMIT" in c for c in queued), refused


def test_a_try_whose_name_lock_is_not_granted_decides_and_writes_nothing(mysql_url: str) -> None:
    """Another transaction keeps the name's lock (a stuck one): the try's read ran anyway, in the same round trip,
    but the try must not act on it. It reports "not acquired" and writes no row; once the lock is free, the
    next try takes the name."""
    name = f"stuck-{uuid.uuid4().hex[:8]}"
    blocker = _raw(mysql_url)
    try:
        with distlock.connect(mysql_url) as store:
            backend: Any = store._backend  # type: ignore[attr-defined]
            backend.ops.name_wait = 0.05
            with blocker.cursor() as cur:  # what the store's own acquires take first (``Ops._lock_name``)
                cur.execute("SELECT GET_LOCK(%s, 1)", (f"{backend.ops.p}:{sn.name_key(name)}"[:64],))
            lock = store.lock(name, ttl=10, fair=True)
            assert not lock.acquire(timeout=0.5)
            with blocker.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM {backend.ops.p}_holders WHERE name = %s", (name,))
                assert cur.fetchone() == (0,), "a holder row written without the name's lock"
                cur.execute("DO RELEASE_ALL_LOCKS()")
            assert lock.acquire(timeout=5)
            info = store.inspect(name)
            assert info is not None and len(info.holders) == 1
            lock.release()
    finally:
        blocker.close()


def _drained(backend: Any) -> None:
    """Wait until the bell worker has made every call asked for so far."""
    done = threading.Event()
    backend._ring(done.set)
    assert done.wait(5), "the bell worker is stuck"


def test_a_holding_that_ended_before_its_bell_was_taken_takes_none(mysql_url: str) -> None:
    """The bell worker makes a holding's companion GET_LOCK and its let-go after acquire() and release()
    returned. When it comes to a take whose holding has already ended (it lags behind a store looping on the
    lock), it takes nothing: no round trip for a bell nobody needs, none held late while the name is free."""
    name = f"late-bell-{uuid.uuid4().hex[:8]}"
    with distlock.connect(mysql_url) as store:
        backend: Any = store._backend  # type: ignore[attr-defined]
        lock = store.lock(name, ttl=10)
        assert lock.acquire(timeout=5)  # the bell connection is open, the bell line idle afterwards
        lock.release()
        _drained(backend)
        sent: list[str] = []
        plain = backend._bell_call

        def counting(sql: str, params: tuple[object, ...]) -> Any:
            sent.append(sql)
            return plain(sql, params)

        backend._bell_call = counting
        hold_back = threading.Event()
        backend._ring(hold_back.wait, 10)
        assert lock.acquire(timeout=5)  # its take is queued behind hold_back ...
        lock.release()  # ... and so is its let-go
        hold_back.set()
        _drained(backend)
        assert sent == [], sent
        assert lock.acquire(timeout=5)  # a holding whose take comes in time still takes its bell
        _drained(backend)
        assert any("GET_LOCK" in s for s in sent), sent
        lock.release()


def test_a_waiter_that_finds_no_bell_looks_again_before_it_polls(
    mysql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new holder takes its bell just after its acquire returned (the bell worker), so a waiter its try
    refused may look before that. Finding nobody ringing, the bell wait looks once more ``BELL_LATE`` later
    and then waits on the bell it finds; only a second miss sends the waiter to polling. (Stretched to 0.5 s
    here so that the order is certain.)"""
    from distlock._backends.mysql._sync import lease_mode as mysql_lease

    monkeypatch.setattr(mysql_lease, "BELL_LATE", 0.5)
    name = f"bell-late-{uuid.uuid4().hex[:8]}"
    companion = sn.bell_name(sn.name_key(name))
    ringer = _raw(mysql_url)
    with distlock.connect(mysql_url) as store:
        backend: Any = store._backend  # type: ignore[attr-defined]
        conn = backend._borrow_dedicated()

        def holder_takes_its_bell_late() -> None:
            time.sleep(0.15)
            with ringer.cursor() as cur:
                cur.execute("SELECT GET_LOCK(%s, 1)", (companion,))
            time.sleep(0.65)  # held past the second look (at 0.5 s), then let go: the holder's release
            with ringer.cursor() as cur:
                cur.execute("SELECT RELEASE_LOCK(%s)", (companion,))

        claim = Claim(name, Mode.EXCLUSIVE, ids.new_token(), ids.owner_id("waiter"), ttl=10)
        late = threading.Thread(target=holder_takes_its_bell_late)
        t0 = time.monotonic()
        late.start()
        rang, tried = backend._bell_wait(conn, claim, 3.0)
        waited = time.monotonic() - t0
        late.join(5)
        assert rang == 1 and 0.7 <= waited < 2.0, (rang, waited)  # woken by that holder's let-go
        assert tried is not None and tried.acquired  # and tried at once (nobody holds the name's row)
        assert store.inspect(name) is not None
        with ringer.cursor() as cur:  # the new holder kept the bell it was granted, on this connection
            cur.execute("SELECT IS_USED_LOCK(%s) = %s", (companion, conn.conn.thread_id()))
            assert cur.fetchone() == (1,)
        # as its release would: the holding and its bell go
        backend.driver.run(conn, backend.ops.release_ringing(claim, companion), False)
        t0 = time.monotonic()
        assert backend._bell_wait(conn, claim, 3.0) == (-1, None)  # nobody rings: poll (and no try made)
        assert time.monotonic() - t0 < 1.5
        with ringer.cursor() as cur:  # somebody rings, but not within the wait: no try either
            cur.execute("SELECT GET_LOCK(%s, 1)", (companion,))
        assert backend._bell_wait(conn, claim, 0.2) == (0, None)
        assert store.inspect(name) is None  # nothing written (no queue entry, no holder)
        with ringer.cursor() as cur:
            cur.execute("DO RELEASE_ALL_LOCKS()")
        backend._give_back_dedicated(conn)
    ringer.close()


def test_a_bell_call_that_fails_does_not_stop_the_bell_worker(mysql_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The bell's calls are hints made by one worker; one that raises (in a way the bell calls do not catch
    themselves) is logged, and the calls after it are still made: a holding taken later still takes its bell."""
    name = f"bell-fails-{uuid.uuid4().hex[:8]}"
    with distlock.connect(mysql_url) as store:
        backend: Any = store._backend  # type: ignore[attr-defined]

        def fails() -> None:
            raise RuntimeError("unforeseen")

        backend._ring(fails)
        _drained(backend)
        assert "a bell call failed" in caplog.text
        lock = store.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        _drained(backend)
        assert len(backend._bells) == 1  # the holding's bell was taken after the failure
        lock.release()


def _holder_releases_after(lock: Any, seconds: float) -> threading.Thread:
    """A thread that takes ``lock`` (the owner is the thread), holds it ``seconds`` and lets it go; returns once
    it holds and its bell is taken (the bell worker takes it after acquire() returned: on a busy machine a short
    holding could end before that, and its waiter then had no bell to wait on)."""
    held = threading.Event()

    def run() -> None:
        assert lock.acquire(timeout=5)
        _drained(lock._acquirer.backend)
        held.set()
        time.sleep(seconds)
        lock.release()

    t = threading.Thread(target=run)
    t.start()
    assert held.wait(5)
    return t


def test_a_woken_waiter_is_granted_in_its_bell_waits_round_trip(mysql_url: str, calls: list[str]) -> None:
    """The waiter blocks in its bell wait; when the holder lets the bell go, the try is already on its way
    behind it, in the same multi-statement: the name's lock, the server's conditional grant (an exclusive
    claim: no holder row) with its COMMIT, and the read. Nothing but the answer follows the wake-up (it was
    a second round trip for the writes and the COMMIT, and three before that)."""
    name = f"fold-{uuid.uuid4().hex[:8]}"
    with distlock.connect(mysql_url) as a, distlock.connect(mysql_url) as b:
        assert b.inspect(name) is None  # the waiter's store open before counting
        releaser = _holder_releases_after(a.lock(name, ttl=10), 0.3)
        lock = b.lock(name, ttl=10)
        calls.clear()
        assert lock.acquire(timeout=5)  # on this thread: its round trips are counted
        sent = list(calls)
        releaser.join(5)
        lock.release()
    bells = [i for i, c in enumerate(sent) if "@distlock_rang" in c]
    assert bells, sent
    last = bells[-1]
    assert "GET_LOCK" in sent[last] and "_holders" in sent[last], "the try's lock and look ride on the bell"
    assert "INSERT INTO" in sent[last] and "COMMIT" in sent[last], "and so do its grant and COMMIT"
    assert sent[last + 1 :] == [], sent[last + 1 :]


def _waiter_conn(store: Any, name: str, fair: bool = False) -> tuple[Any, Any, Claim]:
    backend: Any = store._backend  # type: ignore[attr-defined]
    claim = Claim(name, Mode.EXCLUSIVE, ids.new_token(), ids.owner_id("waiter"), ttl=10, fair=fair)
    return backend, backend._borrow_dedicated(), claim


def _ring_after(raw: Any, companion: str, seconds: float) -> threading.Thread:
    """Hold the bell now, let it go ``seconds`` later (a holder's release) from another thread."""
    with raw.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, 1)", (companion,))

    def let_go() -> None:
        time.sleep(seconds)
        with raw.cursor() as cur:
            cur.execute("SELECT RELEASE_LOCK(%s)", (companion,))

    t = threading.Thread(target=let_go)
    t.start()
    return t


def _session(backend: Any, conn: Any, name: str) -> tuple[bool, bool, int]:
    """Read on the dedicated connection (a bell wait just ended): whether it holds the name's bell, whether it
    holds the name's lock, and its idle timeout."""
    key = sn.name_key(name)
    with conn.conn.cursor() as cur:
        cur.execute(
            "SELECT COALESCE(IS_USED_LOCK(%s) = CONNECTION_ID(), 0), COALESCE(IS_USED_LOCK(%s) = CONNECTION_ID(), 0), "
            "@@session.wait_timeout",
            (sn.bell_name(key), f"{backend.ops.p}:{key}"[:64]),
        )
        bell, name_lock, idle = cur.fetchone()
        return bool(bell), bool(name_lock), int(idle)


def test_the_servers_grant_keeps_only_the_bell_and_puts_the_idle_timeout_back(mysql_url: str, calls: list[str]) -> None:
    """A grant made on the server behind the bell wait, in that one round trip, commits there and lets go of
    the name's lock, keeps the bell for the new holder, and puts back the session's idle timeout (the
    connection holds the bell for as long as the holding lasts: the cut one would end it, and the bell,
    after a few seconds)."""
    name = f"server-grant-{uuid.uuid4().hex[:8]}"
    companion = sn.bell_name(sn.name_key(name))
    raw = _raw(mysql_url)
    with distlock.connect(mysql_url) as store:
        backend, conn, claim = _waiter_conn(store, name)
        before = _session(backend, conn, name)[2]
        ringer = _ring_after(raw, companion, 0.2)
        calls.clear()
        rang, tried = backend._bell_wait(conn, claim, 3.0)
        sent = list(calls)
        ringer.join(5)
        assert rang == 1 and tried is not None and tried.acquired and tried.fence
        assert len(sent) == 1, sent
        assert _session(backend, conn, name) == (True, False, before)  # the bell only, the session's own timeout
        info = store.inspect(name)
        assert info is not None and info.holders[0].fence == tried.fence
        backend.driver.run(conn, backend.ops.release_ringing(claim, companion), False)
        backend._give_back_dedicated(conn)
    raw.close()


def test_a_fair_waiter_with_a_live_entry_ahead_is_refused_and_lets_everything_go(
    mysql_url: str, calls: list[str]
) -> None:
    """The server's grant is the arbiter's rule: a fair claim with a live queue entry ahead of it is refused
    even with no holder (the try goes on as any does: it reads, ``decide`` refuses as well and it queues),
    and the refusal lets go of the name's lock and the bell, as any refused try does. Once the entry ahead
    is gone, the server grants it."""
    name = f"server-refuse-{uuid.uuid4().hex[:8]}"
    companion = sn.bell_name(sn.name_key(name))
    raw = _raw(mysql_url)
    with distlock.connect(mysql_url) as store:
        backend, conn, claim = _waiter_conn(store, name, fair=True)
        with raw.cursor() as cur:  # a live queue entry of another waiter, ahead of anyone who joins later
            cur.execute(
                f"INSERT INTO {backend.ops.p}_queue (token, name_key, name, mode, expires_at) "
                "VALUES (%s, %s, %s, %s, UNIX_TIMESTAMP(NOW(6)) + 30)",
                ("ahead-" + uuid.uuid4().hex, sn.name_key(name), name, Mode.EXCLUSIVE.value),
            )
        before = _session(backend, conn, name)[2]
        ringer = _ring_after(raw, companion, 0.2)
        rang, tried = backend._bell_wait(conn, claim, 3.0)
        ringer.join(5)
        assert rang == 1 and tried is not None and not tried.acquired and tried.place is not None
        assert store.inspect(name) is None  # nobody holds it
        assert _session(backend, conn, name) == (False, False, before)
        with raw.cursor() as cur:  # the waiter ahead leaves: our entry is first, the next server grant is ours
            cur.execute(f"DELETE FROM {backend.ops.p}_queue WHERE token LIKE 'ahead-%%' AND name = %s", (name,))
        ringer = _ring_after(raw, companion, 0.2)
        calls.clear()
        rang, tried = backend._bell_wait(conn, claim, 3.0)
        sent = list(calls)
        ringer.join(5)
        assert rang == 1 and tried is not None and tried.acquired
        assert len(sent) == 1, sent  # its queue entry deleted in the same round trip
        info = store.inspect(name)
        assert info is not None and info.waiters == 0
        backend.driver.run(conn, backend.ops.release_ringing(claim, companion), False)
        backend._give_back_dedicated(conn)
    raw.close()


def test_an_expired_holder_row_leaves_the_grant_to_the_try_in_python(mysql_url: str) -> None:
    """The server grants only where the name has no holder row at all; an expired one (a crashed holder) is
    deleted by the try in Python, under the renewal's row lock, which then grants: the same answer, one round
    trip later."""
    name = f"server-expired-{uuid.uuid4().hex[:8]}"
    companion = sn.bell_name(sn.name_key(name))
    raw = _raw(mysql_url)
    with distlock.connect(mysql_url) as store:
        dead = store.lock(name, ttl=10)
        assert dead.acquire(timeout=5)
        backend, conn, claim = _waiter_conn(store, name)
        with raw.cursor() as cur:  # its lease ran out on the server (a holder that crashed)
            cur.execute(f"UPDATE {backend.ops.p}_holders SET expires_at = expires_at - 60 WHERE name = %s", (name,))
        ringer = _ring_after(raw, companion, 0.2)
        rang, tried = backend._bell_wait(conn, claim, 3.0)
        ringer.join(5)
        assert rang == 1 and tried is not None and tried.acquired
        info = store.inspect(name)
        assert info is not None and [h.fence for h in info.holders] == [tried.fence]
        assert _session(backend, conn, name)[:2] == (True, False)  # it keeps the bell
        backend.driver.run(conn, backend.ops.release_ringing(claim, companion), False)
        backend._give_back_dedicated(conn)
        with contextlib.suppress(distlock.LockError):
            dead.release()
    raw.close()


def _grant_behind_a_bell(mysql_url: str, name: str) -> tuple[float, float]:
    """A waiter's grant by the try behind its bell wait, after a holder that let go 0.6 s into that wait:
    (the holder's local lease left, the server's lease left), read together."""
    with distlock.connect(mysql_url) as a, distlock.connect(mysql_url) as b:
        backend: Any = b._backend  # type: ignore[attr-defined]
        # the holder lets go inside the waiter's first bell wait (at most 1 s)
        releaser = _holder_releases_after(a.lock(name, ttl=10), 0.6)
        lock = b.lock(name, ttl=10)
        assert lock.acquire(timeout=5)
        releaser.join(5)
        holding = lock._own_holding()  # type: ignore[attr-defined]
        r = backend._tx(
            lambda: st.single(
                st.Stmt(
                    f"SELECT expires_at - UNIX_TIMESTAMP(NOW(6)) FROM {backend.ops.p}_holders WHERE token = %s",
                    (holding.claim.token,),
                )
            ),
            tx=False,
        )
        local_left = holding.expires_at - time.monotonic()
        server_left = float(r.rows[0][0])
        lock.release()
    return local_left, server_left


def test_a_grant_behind_a_long_bell_wait_counts_its_lease_from_the_try(mysql_url: str) -> None:
    """The try behind a bell wait reads the server's clock when the bell rings, up to a wait slice after the
    request went out. The holder's local lease must end no later than the server's (counting from the
    request's send plus the server's own time for the wait, never from when the answer came), and not a
    wait's length earlier either (counting from the send alone would give away the whole wait)."""
    local_left, server_left = _grant_behind_a_bell(mysql_url, f"fold-lease-{uuid.uuid4().hex[:8]}")
    assert local_left <= server_left, (local_left, server_left)
    assert local_left >= server_left - drift_margin(10) - 0.1, (local_left, server_left)


def test_a_server_clock_that_jumps_during_the_bell_wait_does_not_lengthen_the_lease(
    mysql_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As if the server's clock jumped 30 s forward while the waiter waited on the bell (its start is read 30 s
    early): the server's time for the wait is then longer than it can have been, and the lease counted must
    still end no later than the server's. (What bounds it: a grant's lease never ends later than the TTL
    counted from the caller's own start of the try that returned it, here after the answer came.)"""
    from distlock._backends.mysql._sync import lease_mode as mysql_lease

    jumped = mysql_lease._BELL_SQL.replace(
        "@distlock_bell_at = UNIX_TIMESTAMP(NOW(6))", "@distlock_bell_at = UNIX_TIMESTAMP(NOW(6)) - 30"
    )
    assert jumped != mysql_lease._BELL_SQL
    monkeypatch.setattr(mysql_lease, "_BELL_SQL", jumped)
    local_left, server_left = _grant_behind_a_bell(mysql_url, f"fold-jump-{uuid.uuid4().hex[:8]}")
    assert local_left <= server_left, (local_left, server_left)


class _Taker:
    """A thread with its own store that takes ``name`` (exclusive), holds it until told, then lets it go;
    it records when it got it and every bell wait of its store that returned (time, rang, acquired)."""

    def __init__(self, url: str, name: str, ttl: float = 10) -> None:
        self.store = distlock.connect(url)
        backend: Any = self.store._backend  # type: ignore[attr-defined]
        self.bells: list[tuple[float, int, bool | None]] = []
        plain = backend._bell_wait

        def counted(c: Any, claim: Any, timeout: float) -> Any:
            rang, grant = plain(c, claim, timeout)
            self.bells.append((time.monotonic(), rang, None if grant is None else grant.acquired))
            return rang, grant

        backend._bell_wait = counted
        self.lock = self.store.lock(name, ttl=ttl)
        self.got: float | None = None
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        if self.lock.acquire(timeout=20):
            self.got = time.monotonic()
            self.release.wait(20)
            with contextlib.suppress(distlock.LockError):  # lost, or its store closed under it
                self.lock.release()

    def close(self) -> None:
        self.release.set()
        self.thread.join(20)
        self.store.close()


def test_the_waiter_that_takes_the_name_keeps_the_bell_and_the_others_sleep(mysql_url: str) -> None:
    """Two waiters block on the bell; the holder lets go. The one whose try takes the name keeps the bell it
    was granted (it is the new holder's at once), so the other is not woken to send a try the new holder
    refuses: it wakes when that holder lets go, and then takes the name. Before, every release woke every
    waiter of the name (each sent a try), and a woken loser found no bell taken yet and polled."""
    name = f"keep-{uuid.uuid4().hex[:8]}"
    first = _Taker(mysql_url, name)
    assert until(lambda: first.got is not None)
    b, c = _Taker(mysql_url, name), _Taker(mysql_url, name)
    try:
        time.sleep(0.5)  # both are refused and wait on the bell
        released = time.monotonic()
        first.release.set()
        assert until(lambda: (b.got is not None) != (c.got is not None), 5), "one of them took the name"
        winner, other = (b, c) if b.got is not None else (c, b)
        time.sleep(0.4)  # the winner holds
        woken = [w for w in other.bells if w[0] > released and w[1] == 1]
        assert woken == [], f"the other waiter was woken while the new holder held: {woken}"
        handed = time.monotonic()
        winner.release.set()
        assert until(lambda: other.got is not None, 5)
        assert other.got is not None and other.got - handed < 0.5, other.got - handed
    finally:
        for t in (first, b, c):
            t.close()


def test_a_kept_bell_goes_when_its_holding_is_lost_and_when_its_store_closes(mysql_url: str) -> None:
    """A holding whose bell its waiter's connection kept ends without a release: broken by an admin (its
    renewal finds it gone), the bell must be let go, or the next waiter sleeps on it until its slice; and a
    store closed with such a holding lets go of its bell with the connection."""
    name = f"keep-lost-{uuid.uuid4().hex[:8]}"
    companion = sn.bell_name(sn.name_key(name))
    first = _Taker(mysql_url, name, ttl=3)
    assert until(lambda: first.got is not None)
    second = _Taker(mysql_url, name, ttl=3)
    third: _Taker | None = None
    raw = _raw(mysql_url)
    try:
        time.sleep(0.3)
        first.release.set()
        assert until(lambda: second.got is not None, 5)
        backend: Any = second.store._backend  # type: ignore[attr-defined]
        assert len(backend._carried) == 1, "the new holder kept the bell its wait was granted"
        third = _Taker(mysql_url, name, ttl=3)
        time.sleep(0.3)  # refused: it waits on the bell the second holder kept
        with distlock.connect(mysql_url) as admin:
            assert admin.break_lock(name)
        broken = time.monotonic()
        assert until(lambda: second.lock.lost.is_set(), 5), "the holder's renewal found the holding gone"
        assert until(lambda: third is not None and third.got is not None, 5)
        assert third.got is not None and third.got - broken < 2.5, third.got - broken
        assert not backend._carried
        third.store.close()  # closed while holding with a kept bell: the bell goes with the connection
        with raw.cursor() as cur:
            assert until(lambda: cur.execute("SELECT IS_USED_LOCK(%s)", (companion,)) and cur.fetchone() == (None,), 5)
    finally:
        raw.close()
        for t in (first, second, third):
            if t is not None:
                t.release.set()
                t.thread.join(20)
                t.store.close()


def test_readers_woken_by_the_bell_all_come_in_together(mysql_url: str) -> None:
    """Readers do not keep the bell (an exclusive waiter does): when the writer lets go, every reader
    waiting on the bell is woken and they all hold the name at once, none waiting for another's release."""
    name = f"keep-readers-{uuid.uuid4().hex[:8]}"
    writer_store = distlock.connect(mysql_url)
    stores = [distlock.connect(mysql_url) for _ in range(2)]
    got: list[float] = []
    done = threading.Event()

    def read(store: Any) -> None:
        lock = store.rwlock(name, ttl=10).read
        if lock.acquire(timeout=10):
            got.append(time.monotonic())
            done.wait(10)
            lock.release()

    try:
        writer = writer_store.rwlock(name, ttl=10).write
        assert writer.acquire(timeout=5)
        readers = [threading.Thread(target=read, args=(s,)) for s in stores]
        for t in readers:
            t.start()
        time.sleep(0.25)  # both refused: they wait on the bell (its slice ends ~1 s after they began)
        released = time.monotonic()
        writer.release()
        assert until(lambda: len(got) == 2, 5), got
        assert max(got) - released < 0.5, [g - released for g in got]
        done.set()
        for t in readers:
            t.join(10)
    finally:
        done.set()
        for s in (writer_store, *stores):
            s.close()

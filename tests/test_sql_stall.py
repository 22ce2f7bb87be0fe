"""MySQL/MariaDB and PostgreSQL lease mode: no stalled client holds a name.

A client whose link goes silent in the middle of an acquire (a loopback FaultProxy holds what it sends after
the name's lock was asked for) blocks the name for the others no longer than the documented bound
(docs/sql.md, "A client that goes silent mid-acquire"): on PostgreSQL not at all, since a try is one Query the
server reads whole before it takes the lock; on MySQL/MariaDB until the server ends the session that idles in
its transaction (``call_timeout`` + 1 s). And a name's lock that another session keeps (a stuck transaction)
is "busy" to an ``acquire(timeout=T)``, which returns False at its deadline, never a BackendError.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import distlock
from distlock._backends.sql import dialects as sd
from distlock._backends.sql import lease as sq
from distlock._backends.sql import names as sn
from distlock.checker.proxy import FaultProxy
from tests.test_sql_faults import raw_conn
from tests.test_sql_gray import via, with_options

DBS = ["mysql", "postgres"]
#: the stores' call bound here: the MySQL bound is this + 1 s (whole seconds)
CALL = 2
#: how long the proxy keeps the silent client's bytes: far past every bound, so a name blocked by the silent
#: session would be blocked for the whole of each test
SILENCE = 60.0
#: where the link goes silent: inside the acquire, after the name's lock was asked for (PostgreSQL: at the
#: try's second statement, the stale-row DELETE; MySQL: at the COMMIT of its second round trip, mid-packet)
AFTER_THE_LOCK = {"postgres": b"WITH h AS (DELETE FROM", "mysql": b"COMMIT; DO RELEASE_ALL_LOCKS"}
#: the server has run what reached it before the silence (the name's lock) this long after
SETTLE = 0.5
#: the longest the others may be kept from the name: the bound (MySQL: CALL + 1 s, after the silent
#: client's first round trip; PostgreSQL: none), the silent try's own call (CALL), and generous slack for
#: a loaded 2-core machine
BOUND = 2 * CALL + 1 + 8.0


@pytest.fixture(params=DBS)
def db(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def url(db: str, request: pytest.FixtureRequest) -> str:
    return with_options(str(request.getfixturevalue(f"{db}_url")), call_timeout=CALL)


@pytest.fixture
def proxy(url: str) -> Iterator[FaultProxy]:
    host, port = distlock._url.parse_url(url).hosts[0]
    with FaultProxy(host, port) as p:
        yield p


def _silent_acquire(store: distlock.Store, name: str) -> threading.Thread:
    """The silent client's acquire, in a thread: it fails or gives up, whatever it answers is not the point."""

    def run() -> None:
        try:
            store.lock(name, ttl=10).acquire(timeout=1)
        except distlock.LockError:
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _go_silent(proxy: FaultProxy, db: str, how: str) -> threading.Event:
    """Make the link silent in the acquire after its name's lock: ``within`` a message (mid-packet; for
    PostgreSQL the middle of a pipeline too: a message the lock's statement was written with) or ``between``
    two messages (MySQL: its second round trip held whole, while the server waits for the next command)."""
    if how == "within":
        return proxy.silence_at(AFTER_THE_LOCK[db], SILENCE)
    return proxy.delay_next(AFTER_THE_LOCK[db], SILENCE)


#: PostgreSQL "between": before the fix its result depended on whether the client's writes reached the proxy
#: in one chunk or two (the server reads a try as one Query now, so the two cases are the same)
SILENT_CASES = [("mysql", "between"), ("mysql", "within"), ("postgres", "within")]


@pytest.mark.parametrize(("db", "how"), SILENT_CASES)
def test_a_client_silent_mid_acquire_blocks_the_name_at_most_the_bound(
    db: str, how: str, url: str, proxy: FaultProxy, name: str
) -> None:
    with distlock.connect(via(url, proxy)) as silent, distlock.connect(url) as other:
        assert silent.inspect(name) is None  # the silent store's pool is warm: its acquire starts at once
        held = _go_silent(proxy, db, how)
        thread = _silent_acquire(silent, name)
        assert held.wait(10), "the acquire's bytes after the name's lock went through the proxy"
        time.sleep(SETTLE)
        t0 = time.monotonic()
        lock = other.lock(name, ttl=10)
        errors = 0
        got = False
        while not got and time.monotonic() - t0 < BOUND + 5:
            try:
                got = lock.acquire(timeout=BOUND + 5 - (time.monotonic() - t0))
            except distlock.BackendError:
                errors += 1  # counted, not raised: the time it took is checked too
        elapsed = time.monotonic() - t0
        assert got, f"the name was still blocked {elapsed:.1f} s into the silence"
        assert elapsed < BOUND, f"another client got the name only after {elapsed:.1f} s"
        assert errors == 0, f"acquire raised BackendError {errors} times while the name was blocked"
        lock.release()
        proxy.heal()
        thread.join(10)


@pytest.mark.parametrize(("db", "how"), [("mysql", "between"), ("postgres", "within")])
def test_async_client_silent_mid_acquire_blocks_the_name_at_most_the_bound(
    db: str, how: str, url: str, proxy: FaultProxy, name: str
) -> None:
    async def main() -> tuple[bool, float]:
        silent = await distlock.connect_async(via(url, proxy))
        other = await distlock.connect_async(url)
        try:
            assert await silent.inspect(name) is None
            held = _go_silent(proxy, db, how)

            async def quiet() -> None:
                try:
                    await silent.lock(name, ttl=10).acquire(timeout=1)
                except distlock.LockError:
                    pass

            task = asyncio.create_task(quiet())
            while not held.is_set():
                await asyncio.sleep(0.01)
            await asyncio.sleep(SETTLE)
            t0 = time.monotonic()
            lock = other.lock(name, ttl=10)
            got = await lock.acquire(timeout=BOUND + 5)  # an error here fails the test
            elapsed = time.monotonic() - t0
            if got:
                await lock.release()
            proxy.heal()
            await task
            return got, elapsed
        finally:
            proxy.heal()
            await silent.aclose()
            await other.aclose()

    got, elapsed = asyncio.run(asyncio.wait_for(main(), 120))
    assert got, f"the name was still blocked {elapsed:.1f} s into the silence"
    assert elapsed < BOUND, f"another client got the name only after {elapsed:.1f} s"


def _hold_name_lock(db: str, url: str, name: str, prefix: str = "distlock") -> Any:
    """A raw session that keeps the name's lock the lease-mode acquire takes first (a stuck transaction)."""
    conn = raw_conn(db, url)
    key = sn.name_key(name)
    if db == "postgres":
        a, b = sq.LeaseOps(sd.postgres(prefix), prefix, "")._lock_name(key).params
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (a, b))
    else:
        with conn.cursor() as cur:
            cur.execute("SELECT GET_LOCK(%s, 1)", (f"{prefix}:{key}"[:64],))
    return conn


#: acquire(timeout=T) on a name whose lock is kept: T, one try begun just before the deadline (its server-side
#: wait is half the call bound), and slack
BUSY_T = 2 * CALL + 1.0
BUSY_BOUND = BUSY_T + CALL + 4.0


#: the busy tests' link: each chunk forwarded this late in each direction (a WAN's latency, which also makes the
#: end of a server-side wait as long as the call's bound reach the client after that bound, every time)
LATENCY = 0.05


# MySQL on the threaded API is left out: PyMySQL's socket timeout bounds each read, not the call, so its
# tries were never cut off at the server-side wait's end (they are checked by the asyncio test's driver)
@pytest.mark.parametrize("db", ["postgres"])
def test_a_name_lock_kept_by_a_stuck_transaction_is_busy_not_an_error(
    db: str, url: str, proxy: FaultProxy, name: str
) -> None:
    blocker = _hold_name_lock(db, url, name)
    try:
        with distlock.connect(via(url, proxy)) as store:
            proxy.delay(LATENCY)
            t0 = time.monotonic()
            got = store.lock(name, ttl=10).acquire(timeout=BUSY_T)  # an error here fails the test
            elapsed = time.monotonic() - t0
        assert not got
        assert BUSY_T - 0.5 < elapsed < BUSY_BOUND, f"acquire(timeout={BUSY_T}) returned after {elapsed:.1f} s"
    finally:
        blocker.close()


def test_async_name_lock_kept_by_a_stuck_transaction_is_busy_not_an_error(
    db: str, url: str, proxy: FaultProxy, name: str
) -> None:
    async def main() -> tuple[bool, float]:
        store = await distlock.connect_async(via(url, proxy))
        try:
            proxy.delay(LATENCY)
            t0 = time.monotonic()
            got = await store.lock(name, ttl=10).acquire(timeout=BUSY_T)
            return got, time.monotonic() - t0
        finally:
            await store.aclose()

    blocker = _hold_name_lock(db, url, name)
    try:
        got, elapsed = asyncio.run(main())
        assert not got
        assert BUSY_T - 0.5 < elapsed < BUSY_BOUND, f"acquire(timeout={BUSY_T}) returned after {elapsed:.1f} s"
    finally:
        blocker.close()

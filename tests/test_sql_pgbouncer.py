"""PostgreSQL through a real PgBouncer (started here, in front of the test PostgreSQL), in each pooling mode.

Session mode needs its server connection for the life of a holding: refused in transaction and statement
pooling (a one-line ConfigError pointing to lease mode), accepted in session pooling. Lease mode works in
session and transaction pooling (no session state, no server-side prepared statements; in transaction pooling
no LISTEN, waiters poll) and in statement pooling (AutocommitOps: autocommit read, decision in Python, one
multi-statement apply; waiters poll). Fences come from the one sequence whoever's connection
draws them. docs/operations.md ("Connection poolers") says the same for users.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import distlock
from distlock._backends.sql.lease_autocommit import AutocommitOps
from distlock._backends.sql.names import name_key
from distlock._backends.sql.stmt import Result
from distlock._core.types import Claim, Mode
from tools.servers.pgbouncer import available, pgbouncer, url
from tools.servers.proc import ServerProc


@pytest.fixture(scope="module")
def bouncer(postgres_url: str) -> Iterator[ServerProc]:
    if not available():
        pytest.skip("pgbouncer is not installed (scripts/install_servers.sh installs it)")
    with pgbouncer(postgres_url.split("?")[0]) as srv:
        yield srv


def via(bouncer: ServerProc, pooling: str, query: str = "") -> str:
    return url(bouncer, pooling) + (f"?{query}" if query else "")


def pooler(store: Any) -> str | None:
    return store._backend.pooler  # type: ignore[no-any-return]


def test_plain_postgresql_is_not_taken_for_a_pooler(postgres_url: str) -> None:
    for query in ("", "?mode=session"):
        with distlock.connect(postgres_url + query) as store:
            assert pooler(store) is None


@pytest.mark.parametrize("pooling", ["transaction", "statement"])
def test_session_mode_refuses_transaction_and_statement_pooling(bouncer: ServerProc, pooling: str) -> None:
    target = via(bouncer, pooling, "mode=session")
    with pytest.raises(distlock.ConfigError) as info:
        distlock.connect(target)
    msg = str(info.value)
    assert "\n" not in msg and f"in {pooling} pooling" in msg and "mode=lease" in msg
    assert distlock._url.parse_url(target).password not in msg


def test_lease_mode_through_statement_pooling(bouncer: ServerProc, postgres_url: str, name: str) -> None:
    """Statement pooling (no BEGIN): AutocommitOps, the protocol of docs/models/sql_lease_statement.pml."""
    target = via(bouncer, "statement")
    with distlock.connect(target) as a, distlock.connect(target) as b, distlock.connect(postgres_url) as direct:
        assert pooler(a) == "statement" and isinstance(a._backend.ops, AutocommitOps)  # type: ignore[attr-defined]
        assert isinstance(direct._backend.ops, AutocommitOps)  # type: ignore[attr-defined]  # direct ones too
        fences: list[int] = []
        # exclusive contention across two stores: never two holders at once, fences increasing
        inside: list[int] = []
        overlap: list[bool] = []
        errors: list[BaseException] = []

        def churn(store: distlock.Store) -> None:
            try:
                for _ in range(6):
                    lock = store.lock(f"{name}-x", ttl=3.0)
                    assert lock.acquire(timeout=10)
                    inside.append(1)
                    overlap.append(len(inside) > 1)
                    fences.append(lock.fence or 0)
                    time.sleep(0.005)
                    inside.pop()
                    lock.release()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=churn, args=(s,)) for s in (a, b, a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors[0]
        assert not any(overlap) and len(fences) == 24 and fences == sorted(set(fences)), fences
        # a waiter of another store is handed the lock (it polls)
        held = a.lock(name, ttl=3.0)
        assert held.acquire(timeout=5)
        assert not b.lock(name).acquire(blocking=False) and not direct.lock(name).acquire(blocking=False)
        got: dict[str, Any] = {}

        def wait() -> None:
            waiter = b.lock(name, ttl=3.0)
            got["ok"] = waiter.acquire(timeout=5)
            got["fence"] = waiter.fence
            waiter.release()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.2)
        held.release()
        t.join(10)
        assert got["ok"] and got["fence"] > (held.fence or 0)
        # renewal past 3 TTLs
        lock = a.lock(name, ttl=0.6)
        assert lock.acquire(timeout=5)
        time.sleep(2.0)
        assert lock.owned() and not lock.lost.is_set() and not direct.lock(name).acquire(blocking=False)
        lock.release()
        # rwlock: readers share, a writer excludes them
        rw_a, rw_b = a.rwlock(f"{name}-rw", ttl=3.0), b.rwlock(f"{name}-rw", ttl=3.0)
        assert rw_a.read.acquire(timeout=5) and rw_b.read.acquire(timeout=5)
        assert not a.rwlock(f"{name}-rw").write.acquire(blocking=False)
        rw_a.read.release()
        rw_b.read.release()
        w = b.rwlock(f"{name}-rw", ttl=3.0).write
        assert w.acquire(timeout=5)
        assert not a.rwlock(f"{name}-rw").read.acquire(blocking=False)
        w.release()
        # a semaphore of 2: two holders, a third refused
        s1, s2, s3 = (st.semaphore(f"{name}-sem", 2, ttl=3.0) for st in (a, b, a))
        assert s1.acquire(timeout=5) and s2.acquire(timeout=5)
        assert not s3.acquire(blocking=False)
        s1.release()
        assert s3.acquire(timeout=5)
        s2.release()
        s3.release()
        # abandon (a waiter that gives up) and release leave nothing
        h = a.lock(name, ttl=3.0)
        assert h.acquire(timeout=5)
        assert not b.lock(name, ttl=3.0).acquire(timeout=0.3)
        h.release()
        for n in (name, f"{name}-x", f"{name}-rw", f"{name}-sem"):
            info = direct.inspect(n)
            assert info is None or (not info.holders and not info.waiting), info
        # fences from one sequence with a direct client
        last = h.fence or 0
        d = direct.lock(name)
        assert d.acquire(timeout=5) and (d.fence or 0) > last
        d.release()
        e = a.lock(name)
        assert e.acquire(timeout=5) and (e.fence or 0) > (d.fence or 0)
        e.release()


def _drive(conn: psycopg.Connection[Any], script: Any) -> Any:
    """Run an AutocommitOps script as the driver does (each Stmt one Query; a batch's chosen result set)."""
    cur = psycopg.ClientCursor(conn)
    try:
        stmt = next(script)
        while True:
            cur.execute(stmt.sql, stmt.params)
            sets = []
            while True:
                sets.append(Result(cur.fetchall() if cur.description is not None else [], cur.rowcount))
                if not cur.nextset():
                    break
            stmt = script.send(sets[stmt.batch or 0])
    except StopIteration as stop:
        return stop.value


def test_statement_pooling_guard_refuses_a_changed_name(bouncer: ServerProc, postgres_url: str, name: str) -> None:
    """The apply inserts only if the name's live holders and queue are still what the read saw: a holder that
    came in between (another store's grant) makes it insert nothing (read again), through the pooler."""
    target = via(bouncer, "statement")
    with distlock.connect(target) as a, psycopg.connect(target.split("?")[0], autocommit=True) as conn:
        ops = a._backend.ops  # type: ignore[attr-defined]
        assert isinstance(ops, AutocommitOps)
        key = name_key(name)

        def claim(mode: Mode = Mode.EXCLUSIVE) -> Claim:
            return Claim(name, mode, uuid.uuid4().hex, "test", 3.0)

        # a blind first try while another store holds: nothing granted, the answer reads the holder
        other = a.lock(name, ttl=3.0)
        assert other.acquire(timeout=5)
        assert not _drive(conn, ops.acquire(claim(), key)).acquired
        other.release()
        # a reader finds a reader: the second try expects exactly that holder; it left in between (the name
        # changed since the read): the guard inserts nothing, and the caller is told to try again
        r0, mine = claim(Mode.READ), claim(Mode.READ)
        assert _drive(conn, ops.acquire(r0, key)).acquired
        cur = psycopg.ClientCursor(conn)
        script = ops.acquire(mine, key)
        result = Result([], 0)
        for expect_granted in (False, None):
            stmt = next(script) if expect_granted is False else script.send(result)
            cur.execute(stmt.sql, stmt.params)
            sets = [Result(cur.fetchall() if cur.description is not None else [], cur.rowcount)]
            while cur.nextset():
                sets.append(Result(cur.fetchall() if cur.description is not None else [], cur.rowcount))
            result = sets[stmt.batch or 0]
            if expect_granted is False:  # the blind try: a live holder, so nothing inserted
                assert any(row[1] == r0.token for row in result.rows)
                assert _drive(conn, ops.release(r0, key))[0]
        with pytest.raises(StopIteration) as stop:
            script.send(result)
        assert not stop.value.value.acquired and stop.value.value.retry_after == 0.0
        assert conn.execute("SELECT COUNT(*) FROM distlock_holders WHERE token = %s", (mine.token,)).fetchone() == (0,)
        # readers: the digest of live holders built in SQL matches Python's (a reader joins two readers)
        r1, r2, r3 = claim(Mode.READ), claim(Mode.READ), claim(Mode.READ)
        assert _drive(conn, ops.acquire(r1, key)).acquired and _drive(conn, ops.acquire(r2, key)).acquired
        # a queued writer (waiting behind the readers) keeps a reader out (fair to writers), then goes first
        w = claim(Mode.WRITE)
        assert not _drive(conn, ops.acquire(w, key)).acquired
        assert not _drive(conn, ops.acquire(r3, key)).acquired
        for c in (r1, r2):
            assert _drive(conn, ops.release(c, key))[0]
        g = _drive(conn, ops.acquire(w, key))
        assert g.acquired and g.fence
        assert conn.execute("SELECT COUNT(*) FROM distlock_queue WHERE token = %s", (w.token,)).fetchone() == (0,)
        assert _drive(conn, ops.renew([w])) == [(True, None)]  # renewed, no release request
        assert _drive(conn, ops.abandon(w, key))
        assert _drive(conn, ops.acquire(r3, key)).acquired
        assert _drive(conn, ops.break_lock(name)) == [r3.token]


def test_session_mode_in_session_pooling(bouncer: ServerProc, postgres_url: str, name: str) -> None:
    """Accepted; the advisory lock is PostgreSQL's (a direct client is excluded), renewals pass through the
    pooler, and a server connection terminated behind the pooler makes the holder lost."""
    with (
        distlock.connect(via(bouncer, "session", "mode=session")) as store,
        distlock.connect(postgres_url + "?mode=session") as direct,
    ):
        assert pooler(store) == "session"
        lock = store.lock(name, ttl=1.0)
        assert lock.acquire(timeout=5)
        assert not direct.lock(name).acquire(blocking=False)
        time.sleep(1.3)  # past the TTL: the renewer's checks kept the session (and its idle timeout) alive
        assert lock.owned() and not lock.lost.is_set()
        pid = direct.inspect(name).holders[0].owner  # type: ignore[union-attr]
        assert pid  # our record: the holder is known by its owner id
        with psycopg.connect(postgres_url.split("?")[0], autocommit=True) as admin:
            row = admin.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> pg_backend_pid()"
            ).fetchall()
            for (p,) in row:
                admin.execute("SELECT pg_terminate_backend(%s)", (p,))
        assert lock.lost.wait(1.0 + 2.0), "a holder whose server connection ended must be told"
        other = direct.lock(name, ttl=2)
        assert other.acquire(timeout=5)
        other.release()


@pytest.mark.parametrize("pooling", ["session", "transaction"])
def test_lease_mode_through_the_pooler(bouncer: ServerProc, postgres_url: str, name: str, pooling: str) -> None:
    target = via(bouncer, pooling)
    with distlock.connect(target) as a, distlock.connect(target) as b, distlock.connect(postgres_url) as direct:
        assert pooler(a) == pooling
        fences: list[int] = []
        held = a.lock(name, ttl=3.0)
        assert held.acquire(timeout=5)
        fences.append(held.fence or 0)
        assert not b.lock(name).acquire(blocking=False)
        assert not direct.lock(name).acquire(blocking=False)
        # hand-offs to a waiter of another store: pushed by NOTIFY in session pooling, polled in transaction pooling
        for i in range(3):
            if i:
                held = a.lock(name, ttl=3.0)
                assert held.acquire(timeout=5)
                fences.append(held.fence or 0)
            got: dict[str, Any] = {}

            def wait(got: dict[str, Any] = got) -> None:
                waiter = b.lock(name, ttl=3.0)
                got["ok"] = waiter.acquire(timeout=10)
                got["at"] = time.monotonic()
                got["fence"] = waiter.fence
                waiter.release()  # the owner is this thread

            t = threading.Thread(target=wait)
            t.start()
            time.sleep(0.3)
            released = time.monotonic()
            held.release()
            t.join(15)
            assert got["ok"] and got["at"] - released < 0.8, got["at"] - released
            fences.append(got["fence"])
        if pooling == "transaction":  # a LISTEN there would sit on a pooled server connection
            assert not a._backend._listening and not b._backend._listening  # type: ignore[attr-defined]
        d = direct.lock(name)
        assert d.acquire(timeout=5)
        fences.append(d.fence or 0)
        d.release()
        assert fences == sorted(set(fences)), fences  # one sequence, whichever connection drew from it


def test_many_statements_through_transaction_pooling(bouncer: ServerProc, name: str) -> None:
    """Every statement runs again and again on client connections whose server connection changes under
    them: a statement prepared server-side (psycopg does after 5 runs) would be missing on the next one."""
    target = via(bouncer, "transaction")
    errors: list[BaseException] = []

    def churn(store: distlock.Store, n: str) -> None:
        try:
            for _ in range(25):
                lock = store.lock(n, ttl=2.0)
                assert lock.acquire(timeout=10)
                assert lock.owned()
                lock.release()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with distlock.connect(target) as a, distlock.connect(target) as b:
        threads = [threading.Thread(target=churn, args=(s, f"{name}-{i}")) for i, s in enumerate((a, b, a, b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors, errors[0]


def test_async_lease_mode_through_transaction_pooling(bouncer: ServerProc, name: str) -> None:
    async def main() -> None:
        target = via(bouncer, "transaction")
        a = await distlock.connect_async(target)
        b = await distlock.connect_async(target)
        try:
            assert pooler(a) == "transaction"
            first = a.lock(name, ttl=2.0)
            assert await first.acquire(timeout=5)
            before = first.fence or 0
            second = b.lock(name, ttl=2.0)

            async def take() -> int:  # the holder is the task that acquires: it reads its fence and releases
                assert await second.acquire(timeout=10)
                fence = second.fence or 0
                await second.release()
                return fence

            waiting = asyncio.ensure_future(take())
            await asyncio.sleep(0.2)
            await first.release()
            assert await asyncio.wait_for(waiting, 5) > before
            with pytest.raises(distlock.ConfigError, match="transaction pooling"):
                await distlock.connect_async(target + "?mode=session")
        finally:
            await a.aclose()
            await b.aclose()

    asyncio.run(main())

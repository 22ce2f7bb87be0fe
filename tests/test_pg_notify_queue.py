"""PostgreSQL lease mode with a full NOTIFY queue (``docs/sql.md``, "When PostgreSQL's NOTIFY queue is full").

PostgreSQL keeps each notification until every LISTEN session has read it; one session that stops reading (a
stopped process, a LISTEN left idle in a transaction, any application's) fills the queue (8 GB), and from then
on every transaction that notifies fails at COMMIT with SQLSTATE 54000. A release, an abandon, a break and an
election's grant all notify: each must still do its work, the store then notifies nobody for a while, and its
waiters poll.

Filling 8 GB takes hours, so the fault is injected on the real server instead: this module's role finds
``public.pg_notify`` before ``pg_catalog``'s (its ``search_path``), a function that raises exactly that error
while the table ``notify_full`` has a row, and passes the call on to the real one otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

import distlock
from distlock._backends.postgres._sync import driver as sync_driver
from tools.servers import postgres as pg_srv
from tools.servers.proc import LOOPBACK, ServerProc

PASSWORD = "nq-Secret-42"
SHADOW = """CREATE OR REPLACE FUNCTION public.pg_notify(channel text, payload text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.notify_full) THEN
        RAISE EXCEPTION 'too many notifications in the NOTIFY queue' USING ERRCODE = '54000';
    END IF;
    PERFORM pg_catalog.pg_notify(channel, payload);
END$$"""


class Fault:
    """The switch of the full queue, flipped from an admin connection."""

    def __init__(self, srv: ServerProc) -> None:
        self.srv = srv

    def _sql(self, sql: str) -> None:
        conn = pg_srv.admin(self.srv, pg_srv.DATABASE)
        try:
            conn.execute(sql)
        finally:
            conn.close()

    def on(self) -> None:
        self._sql("INSERT INTO public.notify_full VALUES (1)")

    def off(self) -> None:
        self._sql("DELETE FROM public.notify_full")


@pytest.fixture(scope="module")
def role(postgres_servers: ServerProc) -> Iterator[tuple[str, Fault]]:
    """A role of its own (its own table prefix, the shadowing ``search_path``): other tests on this server
    never see the shadow."""
    user = f"nq_{uuid.uuid4().hex[:8]}"
    conn = pg_srv.admin(postgres_servers, pg_srv.DATABASE)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS public.notify_full (x int)")
        conn.execute("GRANT SELECT ON public.notify_full TO PUBLIC")
        conn.execute(SHADOW)
        conn.execute(f"CREATE ROLE {user} LOGIN PASSWORD '{PASSWORD}'")
        conn.execute(f"GRANT CREATE, USAGE ON SCHEMA public TO {user}")
        conn.execute(f"ALTER ROLE {user} SET search_path = public, pg_catalog")
    finally:
        conn.close()
    url = f"postgresql://{user}:{PASSWORD}@{LOOPBACK}:{postgres_servers.port}/{pg_srv.DATABASE}?table_prefix={user}"
    fault = Fault(postgres_servers)
    yield url, fault
    fault.off()


@pytest.fixture
def fault(role: tuple[str, Fault]) -> Iterator[Fault]:
    yield role[1]
    role[1].off()


@pytest.fixture
def url(role: tuple[str, Fault]) -> str:
    return role[0]


def test_the_shadow_is_the_real_error_and_passes_calls_on(url: str, fault: Fault) -> None:
    """The injected fault is what PostgreSQL raises (54000, the message ``notify_queue_full`` reads), and
    with the switch off the shadow notifies for real."""
    import psycopg

    conn = psycopg.connect(url.split("?")[0], autocommit=True)
    listener = psycopg.connect(url.split("?")[0], autocommit=True)
    try:
        listener.execute("LISTEN nq_probe")
        conn.execute("SELECT pg_notify('nq_probe', 'x')")
        assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["x"]
        fault.on()
        with pytest.raises(psycopg.errors.ProgramLimitExceeded) as err:
            conn.execute("SELECT pg_notify('nq_probe', 'y')")
        assert sync_driver.notify_queue_full(err.value)
    finally:
        conn.close()
        listener.close()


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused a NOTIFY" in r.getMessage()]


def test_release_frees_the_name_and_the_store_warns_once(
    url: str, fault: Fault, caplog: pytest.LogCaptureFixture
) -> None:
    name = f"nq-{uuid.uuid4().hex[:8]}"
    with distlock.connect(url) as a, distlock.connect(url) as b:
        lock, other = a.lock(name, ttl=30), b.lock(name, ttl=30)
        fault.on()
        with caplog.at_level(logging.WARNING, logger="distlock"):
            for _ in range(2):
                assert lock.acquire(timeout=5)
                lock.release()  # before: BackendError, and the name held for the whole TTL
                assert other.acquire(blocking=False)
                assert not lock.acquire(blocking=False)
                other.release()
        warned = _warnings(caplog)
        assert len(warned) == 2, warned  # one per store, not one per release
        assert all(PASSWORD not in w for w in warned)


def test_a_waiter_elsewhere_gets_the_name_within_its_poll(url: str, fault: Fault) -> None:
    name = f"nq-{uuid.uuid4().hex[:8]}"
    with distlock.connect(url) as a, distlock.connect(url) as b:
        holder = a.lock(name, ttl=30)
        assert holder.acquire(timeout=5)
        got: list[float] = []

        def wait() -> None:
            lock = b.lock(name, ttl=30)
            if lock.acquire(timeout=15):
                got.append(time.monotonic())
                lock.release()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.5)  # b is queued and waits on its push
        fault.on()
        released = time.monotonic()
        holder.release()
        t.join(20)
        assert got, "the waiter never got the name"
        # no push came: it looked again within its slice (1 s), far from the holder's 30 s lease
        assert got[0] - released < 5.0, got[0] - released


def test_muted_for_a_while_then_notifying_again(url: str, fault: Fault, monkeypatch: pytest.MonkeyPatch) -> None:
    """While muted a release sends no NOTIFY even once the queue has room again; after the pause it does."""
    import psycopg

    monkeypatch.setattr(sync_driver, "NOTIFY_PAUSE", 1.0)
    name = f"nq-{uuid.uuid4().hex[:8]}"
    prefix = url.rsplit("table_prefix=", 1)[1]
    listener = psycopg.connect(url.split("?")[0], autocommit=True)
    try:
        listener.execute(f'LISTEN "{prefix}_wake"')
        with distlock.connect(url) as a:
            lock = a.lock(name, ttl=30)
            fault.on()
            assert lock.acquire(timeout=5)
            lock.release()
            fault.off()
            assert lock.acquire(timeout=5)
            lock.release()  # muted still: nothing sent
            assert list(listener.notifies(timeout=0.3)) == []
            time.sleep(1.1)
            assert lock.acquire(timeout=5)
            lock.release()
            assert len(list(listener.notifies(timeout=2, stop_after=1))) == 1
    finally:
        listener.close()


def test_break_lock_reports_what_it_broke(url: str, fault: Fault) -> None:
    name = f"nq-{uuid.uuid4().hex[:8]}"
    with distlock.connect(url) as a, distlock.connect(url) as b:
        lock = a.lock(name, ttl=3)
        assert lock.acquire(timeout=5)
        fault.on()
        assert b.break_lock(name) is True  # before: BackendError, with the row already deleted
        assert b.inspect(name) is None
        assert lock.lost.wait(5)


def test_an_election_grant_and_proclaim(url: str, fault: Fault) -> None:
    """A new leader's grant and a proclaim notify the observers: both go through, muted."""
    name = f"nq-{uuid.uuid4().hex[:8]}"
    with distlock.connect(url) as a:
        fault.on()
        election = a.election(name, ttl=30)
        assert election.campaign("one", timeout=5)
        election.proclaim("two")
        info = a.leader(name)
        assert info is not None and info.value == "two"
        election.resign()


def test_async_release_frees_the_name(url: str, fault: Fault) -> None:
    async def main() -> None:
        name = f"nq-{uuid.uuid4().hex[:8]}"
        async with await distlock.connect_async(url) as a, await distlock.connect_async(url) as b:
            lock = a.lock(name, ttl=30)
            assert await lock.acquire(timeout=5)
            fault.on()
            await lock.release()
            other = b.lock(name, ttl=30)
            assert await other.acquire(blocking=False)
            await other.release()

    asyncio.run(main())

"""MariaDB lease mode: a bell wait its client gave up on leaves no holding past the store's next answered call.

An exclusive waiter's grant rides on its bell wait (``TxOps._server_grant``): the server runs it when the bell
rings, whether or not the client still waits for the answer. Here the link of the waiting store freezes during
that wait (a loopback FaultProxy), the holder lets go (the bell rings: the server commits a holding for the
waiter, its answer held by the proxy), and the waiter is cancelled: its KILL of the wait's connection and its
abandon do not reach the server. Once the link is back, the store's next call that the server answers ends
that connection and deletes the holding by the attempt's token; another client's holding is not touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import distlock
from distlock._backends.sql import names as sn
from distlock.checker.proxy import FaultProxy
from tests.test_sql_cancel_in_flight import cancel_held_back, direct_and_slow
from tests.test_sql_faults import one, raw_conn
from tests.test_sql_gray import via, with_options
from tests.waiting import until

#: the stores' call bound (the frozen client's KILL and abandon each give up within it)
CALL = 2
#: a bell wait found younger than this still waits on the server when the holder lets go right after (a wait
#: lasts LEASE_WAIT_SLICE, 1 s, at most)
FRESH_MS = 300


def _fresh_bell_wait(raw: Any) -> bool:
    """A bell wait has just begun on the server (waiting for the companion's GET_LOCK)."""
    found = one(
        raw,
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() "
        "AND INFO LIKE '%@distlock_rang%' AND STATE LIKE '%lock%' AND TIME_MS < " + str(FRESH_MS),
    )
    return bool(found)


def test_a_cancelled_bell_wait_behind_a_frozen_link_leaves_no_holding(mysql_url: str, name: str) -> None:
    url = with_options(mysql_url, call_timeout=CALL)
    other_name = f"{name}-other"
    host, port = distlock._url.parse_url(url).hosts[0]
    raw = raw_conn("mysql", url)

    async def main() -> tuple[bool, Any, bool]:
        with FaultProxy(host, port) as proxy:
            direct = await distlock.connect_async(url)
            frozen = await distlock.connect_async(via(url, proxy))
            try:
                assert await frozen.inspect(name) is None  # its pool warm, its tables there
                holder = direct.lock(name, ttl=60)
                bystander = direct.lock(other_name, ttl=60)
                assert await holder.acquire()
                assert await bystander.acquire()
                await asyncio.sleep(0.5)  # the holder's bell taken (its store's bell worker)
                task = asyncio.create_task(frozen.lock(name, ttl=60).acquire(timeout=30))
                deadline = time.monotonic() + 20
                while not _fresh_bell_wait(raw):
                    assert time.monotonic() < deadline, "the waiter never waited on the bell"
                    await asyncio.sleep(0.005)
                proxy.freeze()
                await holder.release()  # the bell rings: the server grants the frozen waiter
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, distlock.LockError):
                    await task
                orphan_before = await direct.inspect(name)
                proxy.heal()
                assert await frozen.inspect(other_name) is not None  # the next call the server answers
                left = await direct.inspect(name)
                kept = await bystander.owned()
                await bystander.release()
                return orphan_before is not None, left, kept
            finally:
                proxy.heal()
                await frozen.aclose()
                await direct.aclose()

    try:
        made, left, kept = asyncio.run(asyncio.wait_for(main(), 120))
    finally:
        raw.close()
    assert made, "the frozen waiter's grant did not run on the server (the scenario did not happen)"
    assert left is None, f"the cancelled attempt's holding survived the store's next call: {left}"
    assert kept, "another client's holding was touched"


def test_the_late_kill_ends_only_a_bell_wait_of_that_name(mysql_url: str, name: str) -> None:
    """A KILL made after the link came back names a connection id, which a restarted server gives out again:
    it ends the connection only while that one waits on the name's bell or holds its bell or lock."""
    key = sn.name_key(name)
    bell = sn.bell_name(key)
    with distlock.connect(mysql_url) as store:
        backend: Any = store._backend
        bystander = raw_conn("mysql", mysql_url)  # another client's connection, idle
        ringer = raw_conn("mysql", mysql_url)  # holds the name's bell, as a bell wait granted it does
        try:
            assert one(ringer, "SELECT GET_LOCK(%s, 1)", bell) == 1
            assert backend._kill(bystander.thread_id(), key)
            assert one(bystander, "SELECT 1") == 1, "another client's connection was ended"
            assert backend._kill(ringer.thread_id(), key)
            assert until(lambda: one(bystander, "SELECT IS_USED_LOCK(%s)", bell) is None), "the bell's holder lives"
        finally:
            bystander.close()
            ringer.close()


def _bell_waits(raw: Any) -> int:
    """Connections running a bell wait on the server now."""
    found = one(
        raw,
        "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND INFO LIKE '%@distlock_rang%'",
    )
    return int(found)


def test_a_bell_wait_cancelled_before_the_server_began_it_leaves_no_holding(mysql_url: str, name: str) -> None:
    """The waiter is cancelled after it sent its bell wait and before the server began it (a busy server, a slow
    link): the KILL that looks for the wait finds nothing to end, and the wait begins afterwards. Its clean-up
    waits until that connection is gone before it deletes, so nothing the wait would grant outlives it."""
    url = with_options(mysql_url, call_timeout=CALL)
    raw = raw_conn("mysql", url)

    async def main() -> tuple[int, Any]:
        async with direct_and_slow(url, name) as (proxy, direct, slow):
            holder = direct.lock(name, ttl=60)
            assert await holder.acquire()
            await asyncio.sleep(0.5)  # the holder's bell taken (its store's bell worker)
            await cancel_held_back(proxy, b"@distlock_rang", slow.lock(name, ttl=60).acquire(timeout=30))
            waits = _bell_waits(raw)  # a wait left running blocks on the holder's bell now
            await holder.release()  # which would ring it: its grant would commit a holding nobody has
            await asyncio.sleep(0.5)
            return waits, await direct.inspect(name)

    try:
        waits, left = asyncio.run(asyncio.wait_for(main(), 120))
    finally:
        raw.close()
    assert waits == 0, "the cancelled waiter's bell wait still runs on the server"
    assert left is None, f"the cancelled attempt's holding survived its clean-up: {left}"

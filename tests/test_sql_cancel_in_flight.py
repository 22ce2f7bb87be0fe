"""PostgreSQL lease mode: an acquire cancelled while its try is on its way to the server.

The try was sent and the task cancelled before the answer came; the server may not have begun the try yet (a
busy server, a link that holds the bytes back). The cancelled acquire's clean-up (the abandon: deletes by the
attempt's token) must not look before that try is over on the server, or the try grants afterwards a holding
nobody has, which blocks the name for its whole lease. A loopback proxy holds the try's bytes past the cancel.
(PostgreSQL's try grants in one Query; MySQL's decides in its second round trip, which a cancelled client never
sends, and its bell wait's grant has tests/test_sql_bell_orphan.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any

import pytest

import distlock
from distlock._async import acquirer
from distlock.checker.proxy import FaultProxy
from tests.test_sql_gray import via, with_options

#: how long the proxy holds the try on its way to the server: far longer than the clean-up's first look takes,
#: far shorter than the clean-up's budget the test gives it (CLEANUP)
HELD = 0.2
CLEANUP = 10.0


@contextlib.asynccontextmanager
async def direct_and_slow(
    url: str, name: str
) -> AsyncIterator[tuple[FaultProxy, distlock.AsyncStore, distlock.AsyncStore]]:
    """A store straight to the server, and one through a loopback proxy: its connections warm, and (SQL) its
    clean-up given CLEANUP, to see a call arrive however late a busy machine runs the proxy (its own
    budget, 1 s, is not what these tests are about)."""
    host, port = distlock._url.parse_url(url).hosts[0]
    with FaultProxy(host, port) as proxy:
        direct = await distlock.connect_async(url)
        slow = await distlock.connect_async(via(url, proxy))
        try:
            assert await slow.inspect(name) is None
            backend: Any = slow._acquirer.backend
            if hasattr(backend, "cleanup_timeout"):  # a SQL store's
                backend.cleanup_timeout = CLEANUP
            yield proxy, direct, slow
        finally:
            proxy.heal()
            await slow.aclose()
            await direct.aclose()


async def cancel_held_back(
    proxy: FaultProxy | Sequence[FaultProxy], pattern: bytes, acquire: Coroutine[Any, Any, bool]
) -> None:
    """Run ``acquire`` while ``proxy`` (or each of several: Redlock's masters) holds back its next bytes that
    contain ``pattern`` for HELD seconds; cancel it once those were sent everywhere, and return once its
    clean-up is over and the proxies have let them go."""
    proxies = [proxy] if isinstance(proxy, FaultProxy) else list(proxy)
    held = [p.delay_next(pattern, HELD) for p in proxies]
    task = asyncio.create_task(acquire)
    deadline = time.monotonic() + 20
    while not all(h.is_set() for h in held):
        assert time.monotonic() < deadline, f"the acquire never sent {pattern!r} (everywhere)"
        await asyncio.sleep(0.002)
    since = time.monotonic()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, distlock.LockError):
        await task
    await asyncio.sleep(max(0.0, since + HELD + 0.5 - time.monotonic()))


def test_an_acquire_cancelled_before_the_server_began_its_try_leaves_no_holding(
    postgres_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = with_options(postgres_url, call_timeout=5)
    monkeypatch.setattr(acquirer, "CLEANUP", CLEANUP)  # the whole clean-up's bound (the abandon's share, half)

    async def main() -> Any:
        async with direct_and_slow(url, name) as (proxy, direct, slow):
            await cancel_held_back(proxy, b"EXECUTE distlock_", slow.lock(name, ttl=60).acquire(timeout=30))
            return await direct.inspect(name)

    left = asyncio.run(asyncio.wait_for(main(), 120))
    assert left is None, f"the cancelled acquire's try granted a holding after its clean-up: {left}"

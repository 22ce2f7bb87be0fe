"""Redis (one node): an acquire cancelled while its try is on its way to the server.

The try was sent and the task cancelled before the answer came; the server may not have run it yet (a busy
server, a link that holds the bytes back). The abandon goes on another connection and may run first: the try
would then grant afterwards a holding nobody has, for its whole lease. The abandon of a claim whose try was
let go of mid-call leaves a cut mark that such a try finds: it grants and queues nothing. A loopback proxy holds
the try's bytes past the cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

import distlock
from distlock._async import acquirer
from distlock._backends.redis import lua
from distlock.checker.proxy import FaultProxy
from tests.test_sql_cancel_in_flight import CLEANUP, cancel_held_back, direct_and_slow


def test_an_acquire_cancelled_before_the_server_ran_its_try_leaves_no_holding(
    redis_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acquirer, "CLEANUP", CLEANUP)

    async def main() -> tuple[Any, Any]:
        async with direct_and_slow(redis_url, name) as (proxy, direct, slow):
            acquire = lua.SHA["acquire"].encode()
            await cancel_held_back(proxy, acquire, slow.lock(name, ttl=60).acquire(timeout=30))
            left = await direct.inspect(name)
            # the mark counts as no waiter, and another client takes the name at once
            other = direct.lock(name, ttl=60)
            assert await other.acquire(timeout=5)
            await other.release()
            return left, await direct.inspect(name)

    left, after = asyncio.run(asyncio.wait_for(main(), 120))
    assert left is None or (not left.holders and left.waiters == 0), f"the cancelled try granted or queued: {left}"
    assert after is None or (not after.holders and after.waiters == 0), after


def test_a_redlock_acquire_cancelled_before_the_masters_ran_its_try_leaves_no_holding(
    redlock_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on Redlock: the try held back on every master, the abandon (with its cut mark) ahead of it."""
    monkeypatch.setattr(acquirer, "CLEANUP", CLEANUP)
    parsed = distlock._url.parse_url(redlock_url)

    async def main() -> tuple[Any, Any]:
        with contextlib.ExitStack() as stack:
            proxies = [stack.enter_context(FaultProxy(h, p)) for h, p in parsed.hosts]
            slow_url = redlock_url
            for (h, p), proxy in zip(parsed.hosts, proxies, strict=True):
                slow_url = slow_url.replace(f"{h}:{p}", f"127.0.0.1:{proxy.port}", 1)
            direct = await distlock.connect_async(redlock_url)
            slow = await distlock.connect_async(slow_url)
            try:
                assert await slow.inspect(name) is None  # its connections warm
                await cancel_held_back(proxies, lua.SHA["acquire"].encode(), slow.lock(name, ttl=60).acquire(timeout=30))
                left = await direct.inspect(name)
                other = direct.lock(name, ttl=60)
                assert await other.acquire(timeout=5)
                await other.release()
                return left, await direct.inspect(name)
            finally:
                for proxy in proxies:
                    proxy.heal()
                await slow.aclose()
                await direct.aclose()

    left, after = asyncio.run(asyncio.wait_for(main(), 120))
    assert left is None or (not left.holders and left.waiters == 0), f"the cancelled try granted or queued: {left}"
    assert after is None or (not after.holders and after.waiters == 0), after

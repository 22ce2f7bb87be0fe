"""The asyncio API on uvloop, the event loop of ``uvicorn[standard]`` and of many asyncio servers.

A waiter is woken by the release's push and holds within a few milliseconds, not at its fallback re-check
(1.5 s or more with these TTLs). Before the fix, a Redis wake-up read by the waiting task itself (the one
hop of docs/redis.md) was delivered a loop turn late on uvloop, after the waiter had gone back to reading,
so every Redis hand-off waited out its re-check; ten tasks on one name managed a few acquisitions a second.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import distlock

uvloop = pytest.importorskip("uvloop")  # in the dev dependency group

HANDOFF_BOUND = 0.5  # s: well below the fallback re-check, well above a loaded VM's hand-off


def _on_uvloop(url: str, name: str) -> tuple[float, int]:
    """(seconds from the holder's release to the waiter's grant, acquisitions by ten contending tasks)."""

    async def main() -> tuple[float, int]:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        store = await distlock.connect_async(url)
        try:
            holder, waiter = store.lock(name, ttl=30), store.lock(name, ttl=30)
            assert await holder.acquire()

            async def wait() -> float:  # a task of its own: the owner of its holding
                assert await waiter.acquire(timeout=10)
                granted = time.monotonic()
                await waiter.release()
                return granted

            waiting = asyncio.ensure_future(wait())
            await asyncio.sleep(0.3)  # the waiter has tried, subscribed and waits
            released = time.monotonic()
            await holder.release()
            took = await waiting - released

            done = 0

            async def worker() -> None:
                nonlocal done
                lock = store.lock(name, ttl=30)
                for _ in range(5):
                    async with lock:
                        await asyncio.sleep(0.001)
                    done += 1

            await asyncio.wait_for(asyncio.gather(*(worker() for _ in range(10))), 20)
            return took, done
        finally:
            await store.aclose()

    result: tuple[float, int] = uvloop.run(main())
    return result


@pytest.mark.parametrize("backend", ["redis", "redlock", "postgres", "sqlite"])
def test_a_waiter_on_uvloop_is_woken_by_the_release(backend: str, request: pytest.FixtureRequest, name: str) -> None:
    url = str(request.getfixturevalue(f"{backend}_url"))
    took, done = _on_uvloop(url, name)
    assert took < HANDOFF_BOUND, f"the hand-off took {took * 1000:.0f} ms: the waiter was not woken by the push"
    assert done == 50

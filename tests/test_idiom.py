"""The API guides its user to the idiom: ``connect_async()`` both awaited and entered, one line that names the form
when ``with`` / ``async with`` is used on the other side's objects, a warning when a sync store blocks a running
event loop, and types that fit (``with lock as held`` gives an ``int`` fence to mypy --strict).

Real SQLite stores (these are the API's shape, the same on every backend: the code under test is above the
backend).
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import distlock


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/locks.db"


def _free(url: str, name: str) -> bool:
    with distlock.connect(url) as other:
        return other.inspect(name) is None


# -- connect_async(): awaited, or entered ---------------------------------------------------------------------
async def test_connect_async_entered_directly_opens_and_closes_the_store(url: str) -> None:
    async with distlock.connect_async(url) as store:
        assert isinstance(store, distlock.AsyncStore)
        lock = store.lock("idiom/entered", ttl=10)
        assert await lock.acquire(timeout=5)
        assert not await asyncio.to_thread(_free, url, "idiom/entered")
    assert await asyncio.to_thread(_free, url, "idiom/entered")  # the exit closed the store: released
    with pytest.raises(distlock.LockError, match="closed"):
        store.lock("idiom/after")


async def test_connect_async_entered_closes_the_store_when_the_body_raises(url: str) -> None:
    with pytest.raises(KeyError):
        async with distlock.connect_async(url) as store:
            await store.lock("idiom/raises", ttl=10).acquire(timeout=5)
            raise KeyError("body")
    assert await asyncio.to_thread(_free, url, "idiom/raises")


async def test_connect_async_awaited_still_gives_an_open_store(url: str) -> None:
    store = await distlock.connect_async(url)
    try:
        async with store.lock("idiom/awaited", ttl=10) as lock:
            assert lock.fence is not None
        assert isinstance(await asyncio.wait_for(distlock.connect_async(url), 30), distlock.AsyncStore)
    finally:
        await store.aclose()
    async with await distlock.connect_async(url) as again:  # the form the docs showed until now
        assert await again.inspect("idiom/awaited") is None


def test_connect_async_is_still_a_coroutine_for_asyncio_run(url: str) -> None:
    store = asyncio.run(distlock.connect_async(url))  # asyncio.run() takes coroutines only
    asyncio.run(store.aclose())

    async def in_a_task() -> None:
        opened = await asyncio.create_task(distlock.connect_async(url))
        await opened.aclose()

    asyncio.run(in_a_task())


# -- the wrong form: one line that names the right one ----------------------------------------------------------
def _kinds(store: Any) -> list[tuple[str, Any]]:
    return [
        ("store", store),
        ("lock", store.lock("idiom/k-lock")),
        ("rlock", store.rlock("idiom/k-rlock")),
        ("read", store.rwlock("idiom/k-rw").read),
        ("write", store.rwlock("idiom/k-rw").write),
        ("semaphore", store.semaphore("idiom/k-sem")),
        ("multilock", store.multilock(["idiom/k-m1", "idiom/k-m2"])),
        ("election", store.election("idiom/k-elect")),
        ("once", store.once("idiom/k-once")),
    ]


async def test_with_on_an_asyncio_store_or_lock_says_use_async_with(url: str) -> None:
    async with distlock.connect_async(url) as store:
        for kind, obj in _kinds(store):
            with pytest.raises(TypeError, match="use `async with`") as err:
                with obj:
                    pytest.fail(f"the body ran under `with` on the asyncio {kind}")
            assert "\n" not in str(err.value), kind
        assert await store.list("idiom/") == []  # nothing was taken


def test_async_with_on_a_sync_store_or_lock_says_use_with(url: str) -> None:
    async def wrong(obj: Any) -> None:
        async with obj:
            pytest.fail("the body ran under `async with` on a sync object")

    with distlock.connect(url) as store:
        for kind, obj in _kinds(store):
            with pytest.raises(TypeError, match="this is a sync store: use `with`") as err:
                asyncio.run(wrong(obj))
            assert "connect_async()" in str(err.value) and "\n" not in str(err.value), kind
        assert store.list("idiom/") == []


async def test_with_on_connect_async_says_use_async_with_and_leaves_no_coroutine_behind(url: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError, match=r"use `async with distlock.connect_async\(\.\.\.\) as store:`"):
            with distlock.connect_async(url):  # type: ignore[attr-defined]
                pytest.fail("the body ran")
        gc.collect()
    assert [str(w.message) for w in caught] == []  # no "coroutine ... was never awaited" on top


# -- a sync store on a running event loop -----------------------------------------------------------------------
def _blocking_warnings(caught: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in caught if "running asyncio event loop" in str(w.message)]


def _held(lock: Any) -> None:
    with lock:
        pass


def _acquired(lock: Any) -> Callable[[], object]:
    """Taken off the loop (same thread, so same owner): what the loop then calls is ``extend``, then release."""
    lock.acquire(timeout=5)

    def extend_and_release() -> None:
        try:
            lock.extend()
        finally:
            lock.release()

    return extend_and_release


def _campaign(election: distlock.Election) -> None:
    if election.campaign(timeout=5):
        election.resign()


#: every kind of call that waits on the backend: given the store, what to call on the running loop
BLOCKING_CALLS: dict[str, Callable[[distlock.Store], Callable[[], object]]] = {
    "lock": lambda s: lambda: _held(s.lock("idiom/loop-lock", ttl=10, timeout=5)),
    "rwlock": lambda s: lambda: _held(s.rwlock("idiom/loop-rw", ttl=10, timeout=5).read),
    "semaphore": lambda s: lambda: _held(s.semaphore("idiom/loop-sem", ttl=10, timeout=5)),
    "multilock": lambda s: lambda: _held(s.multilock(["idiom/loop-m1", "idiom/loop-m2"], ttl=10, timeout=5)),
    "once": lambda s: lambda: _held(s.once("idiom/loop-once")),
    "extend": lambda s: _acquired(s.lock("idiom/loop-extend", ttl=10)),
    "campaign": lambda s: lambda: _campaign(s.election("idiom/loop-elect", ttl=10)),
    "leader": lambda s: lambda: s.leader("idiom/loop-elect"),
    "locked": lambda s: s.lock("idiom/loop-locked").locked,
    "inspect": lambda s: lambda: s.inspect("idiom/loop-lock"),
    "list": lambda s: lambda: s.list("idiom/"),
    "break_lock": lambda s: lambda: s.break_lock("idiom/loop-lock"),
}


@pytest.mark.parametrize("call", list(BLOCKING_CALLS))
def test_a_sync_store_called_on_a_running_loop_warns_once_per_store(url: str, call: str) -> None:
    async def on_the_loop(blocking: Callable[[], object]) -> None:
        blocking()

    with distlock.connect(url) as first, distlock.connect(url) as second:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for store in (first, first, second):
                asyncio.run(on_the_loop(BLOCKING_CALLS[call](store)))
            for other in BLOCKING_CALLS.values():  # every other call of a store that warned: nothing more
                asyncio.run(on_the_loop(other(first)))
        found = _blocking_warnings(caught)
        assert len(found) == 2, [str(w.message) for w in caught]  # once per store
        assert all(w.category is RuntimeWarning for w in found)
        assert "connect_async(" in str(found[0].message) and "to_thread" in str(found[0].message)


def test_opening_and_closing_a_sync_store_on_a_running_loop_warns_once(url: str) -> None:
    async def open_use_close() -> None:
        with distlock.connect(url) as store:  # connect warns; the calls after it, and close, say nothing more
            with store.lock("idiom/loop-open", ttl=10, timeout=5):
                pass

    async def close_only(store: distlock.Store) -> None:
        store.close()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(open_use_close())
        opened = len(_blocking_warnings(caught))
        line = Path(__file__).read_text().splitlines()[_blocking_warnings(caught)[0].lineno - 1]
        store = distlock.connect(url)  # off the loop: no warning
        asyncio.run(close_only(store))
    assert opened == 1, [str(w.message) for w in caught]
    assert "distlock.connect(url)" in line  # at the open, not at the first lock
    assert len(_blocking_warnings(caught)) == 2, [str(w.message) for w in caught]  # the close on the loop


def test_the_warning_points_at_the_callers_line(url: str) -> None:
    async def on_the_loop(store: distlock.Store) -> None:
        with store.lock("idiom/loop-line", ttl=10, timeout=5):
            pass

    with distlock.connect(url) as store, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(on_the_loop(store))
    (found,) = _blocking_warnings(caught)
    assert found.filename == __file__ and "with store.lock" in Path(__file__).read_text().splitlines()[found.lineno - 1]


def test_a_sync_store_off_the_loop_thread_or_with_no_loop_does_not_warn(url: str) -> None:
    def use(store: distlock.Store, name: str) -> None:
        with store.lock(name, ttl=10, timeout=5):
            store.inspect(name)

    async def from_a_thread(store: distlock.Store) -> None:
        await asyncio.to_thread(use, store, "idiom/thread")  # the loop's thread stays free: the right way

    async def asyncio_side() -> None:
        async with distlock.connect_async(url) as astore:
            async with astore.lock("idiom/async", ttl=10, timeout=5):
                await astore.inspect("idiom/async")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with distlock.connect(url) as store:
            use(store, "idiom/plain")
            asyncio.run(from_a_thread(store))
            asyncio.run(asyncio_side())
            use(store, "idiom/plain-again")
    assert _blocking_warnings(caught) == []


# -- types that fit the idiom -----------------------------------------------------------------------------------
TYPED = """
    from __future__ import annotations

    import asyncio
    import sys
    from typing import assert_type

    import distlock


    def sync_side(url: str) -> int:
        with distlock.connect(url) as store:
            lock = store.lock("typed/a")
            assert_type(lock.fence, int | None)  # outside a holding: maybe none
            with lock as held:
                assert_type(held.fence, int)
                fence: int = held.fence
            with store.rlock("typed/r") as r, store.rwlock("typed/rw").write as w:
                assert_type(r.fence + w.fence, int)
            with store.semaphore("typed/s", permits=2) as permit:
                assert_type(permit.fence, int)
                semaphore: distlock.Semaphore = permit
            with store.multilock(["typed/m1", "typed/m2"]) as both:
                assert_type(both.fence, int)
            with store.election("typed/e") as leading:
                assert_type(leading, distlock.Election)  # a lost leadership's term is None, inside the block too

            @store.at_most_once("typed/job", at_most=5)
            def job(n: int) -> int:
                return n * 2

            assert_type(job(3), int | None)  # None: another process ran it (the decorator says so to mypy)
            with store.once("typed/once", at_most=5) as ran:
                if ran:
                    assert_type(ran.fence, int)  # narrowed by the truth test: a job that runs has its fence
                else:
                    assert_type(ran.fence, None)
            return fence + (semaphore.permits or 0)  # None: the semaphore follows the stored capacity


    async def async_side(url: str) -> int:
        async with distlock.connect_async(url) as store:
            assert_type(store, distlock.AsyncStore)
            async with store.lock("typed/a") as held:
                assert_type(held.fence, int)
                fence = held.fence
            async with store.multilock(["typed/m1"]) as both:
                assert_type(both.fence, int)
            async with store.election("typed/e") as leading:
                assert_type(leading, distlock.AsyncElection)

            @store.at_most_once("typed/ajob", at_most=5)
            async def ajob(n: int) -> str:
                return str(n)

            assert_type(await ajob(1), str | None)
        opened = await distlock.connect_async(url)
        assert_type(opened, distlock.AsyncStore)
        async with opened:
            assert_type(opened.lock("typed/b").fence, int | None)
        return fence


    def wrong_forms(store: distlock.Store, astore: distlock.AsyncStore) -> None:
        # still type errors (hidden from type checkers, the runtime's one-line errors do not make them valid)
        with astore.lock("typed/x"):  # type: ignore[attr-defined]
            pass

        async def body() -> None:
            async with store.lock("typed/x"):  # type: ignore[attr-defined]
                pass


    if __name__ == "__main__":
        print(sync_side(sys.argv[1]), asyncio.run(async_side(sys.argv[1])))
"""


def test_held_fences_are_ints_to_mypy_strict_and_both_connect_async_forms_type_check(tmp_path: Path, url: str) -> None:
    sample = tmp_path / "typed_sample.py"
    sample.write_text(textwrap.dedent(TYPED))
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
         str(sample)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = subprocess.run([sys.executable, str(sample), url], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr  # and it runs: the typed sample is real code

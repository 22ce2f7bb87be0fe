"""The asyncio runtime's cancellation rules (``distlock._rt_async``), without a server: ``shielded`` finishes its
work before a cancellation is raised and costs one loop turn over the work; ``offload`` interrupts a step on
cancellation and raises only once the step has ended."""

from __future__ import annotations

import asyncio
import threading

import pytest

from distlock import _rt_async as rt


async def _turns_of(aw_factory: object) -> int:
    """How many loop turns a concurrent counter saw while ``aw_factory()`` was awaited."""
    turns = 0
    stop = False

    async def count() -> None:
        nonlocal turns
        while not stop:
            await asyncio.sleep(0)
            turns += 1

    counter = asyncio.ensure_future(count())
    await asyncio.sleep(0)  # the counter runs
    start = turns
    await aw_factory()  # type: ignore[operator]
    spent = turns - start
    stop = True
    await counter
    return spent


async def test_shielded_costs_one_loop_turn_over_its_work() -> None:
    async def nothing() -> int:
        return 1

    # the work's task starts (one turn), its end wakes the caller (one turn); asyncio.shield took three
    assert await _turns_of(lambda: rt.shielded(nothing())) <= 2


async def test_shielded_finishes_the_work_then_raises_the_cancellation() -> None:
    gate = asyncio.Event()
    finished: list[str] = []
    interrupted: list[bool] = []

    async def work() -> str:
        await gate.wait()
        finished.append("done")
        return "done"

    async def caller() -> str:
        return await rt.shielded(work(), lambda: interrupted.append(True))

    task = asyncio.ensure_future(caller())
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done() and interrupted == [True]  # told, still waiting for the work
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == ["done"]


async def _bounded_work(seconds: float) -> str:
    try:
        async with asyncio.timeout(seconds):
            await asyncio.Event().wait()
    except TimeoutError:
        return "timed out"
    return "never"


async def test_a_timeout_inside_the_shielded_work_still_fires() -> None:
    """The work's own bounds cancel the work's task: that cancellation is not refused (only the caller's)."""
    async with asyncio.timeout(30):  # generous: only a refused inner timeout runs into it
        assert await rt.shielded(_bounded_work(0.05)) == "timed out"


async def test_a_cancelled_caller_still_lets_the_work_time_out() -> None:
    task = asyncio.ensure_future(rt.shielded(_bounded_work(0.1)))
    await asyncio.sleep(0.01)
    task.cancel()
    async with asyncio.timeout(30):
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_shielded_passes_the_work_s_failure_and_logs_none_when_cancelled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fails() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await rt.shielded(fails())

    gate = asyncio.Event()

    async def fails_later() -> None:
        await gate.wait()
        raise ValueError("late")

    task = asyncio.ensure_future(rt.shielded(fails_later()))
    await asyncio.sleep(0.01)
    task.cancel()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    del task
    import gc

    gc.collect()
    assert "never retrieved" not in caplog.text


async def test_offload_returns_and_raises_the_step_s_outcome() -> None:
    assert await rt.offload(lambda a, b: a + b, 2, 3) == 5

    def fails() -> None:
        raise KeyError("k")

    with pytest.raises(KeyError):
        await rt.offload(fails, pool="test-rt")


async def test_offload_interrupts_the_step_and_raises_only_once_it_ended() -> None:
    release = threading.Event()
    ended = threading.Event()
    started = threading.Event()

    def step() -> str:
        started.set()
        release.wait(30)
        ended.set()
        return "late"

    task = asyncio.ensure_future(rt.offload(step, interrupt=release.set))
    while not started.is_set():
        await asyncio.sleep(0.005)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended.is_set()  # the interrupt ended the step, and the cancellation came after it


async def test_offload_without_interrupt_waits_for_the_step() -> None:
    go = threading.Event()
    ended = threading.Event()

    def step() -> None:
        go.wait(30)
        ended.set()

    task = asyncio.ensure_future(rt.offload(step))
    await asyncio.sleep(0.01)
    task.cancel()
    await asyncio.sleep(0.05)
    assert not task.done()  # still waiting for the step, which nothing interrupts
    go.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended.is_set()

"""The asyncio runtime's cancellation rules (``distlock._rt_async``), without a server: ``shielded`` finishes its
work before a cancellation is raised and costs one loop turn over the work; ``offload`` interrupts a step on
cancellation and raises only once the step has ended."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from typing import Any

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

    async def one_turn() -> int:
        await asyncio.sleep(0)
        return 1

    assert await _turns_of(one_turn) == 1
    if sys.version_info >= (3, 12):
        # the work's task starts in its constructor (``eager_start``): work done there costs no turn at all,
        # work that waits costs its own turns and one for its end to wake the caller
        assert await _turns_of(lambda: rt.shielded(nothing())) == 0
        assert await _turns_of(lambda: rt.shielded(one_turn())) == 2
    else:
        # the work's task starts (one turn), its end wakes the caller (one turn); asyncio.shield took three
        assert await _turns_of(lambda: rt.shielded(nothing())) == 2
        assert await _turns_of(lambda: rt.shielded(one_turn())) == 3


async def test_in_shielded_step_is_true_inside_shielded_work_only() -> None:
    async def where() -> bool:
        return rt.in_shielded_step()

    assert not rt.in_shielded_step()
    assert not await asyncio.ensure_future(where())  # a task, but one the caller's cancellation reaches
    assert await rt.shielded(where())


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
        await rt.offload(fails)


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


class _Hanging:
    """Runs that each take ``hang`` seconds and then fail, as a request to a silent server does at the end of
    its own budget; the items of each run, in order."""

    def __init__(self, hang: float, fail: bool = True) -> None:
        self.hang, self.fail = hang, fail
        self.runs: list[list[int]] = []

    def make(self, side: str) -> object:
        from distlock._async.batch import Batched as AsyncBatched
        from distlock._sync.batch import Batched as SyncBatched

        outer = self

        if side == "async":

            class A(AsyncBatched[int, str, str]):
                async def run(self, items: list[tuple[int, str]]) -> dict[int, str]:
                    outer.runs.append([k for k, _ in items])
                    await asyncio.sleep(outer.hang)
                    if outer.fail:
                        raise RuntimeError("silent server")
                    return {k: v.upper() for k, v in items}

            return A()

        class S(SyncBatched[int, str, str]):
            def run(self, items: list[tuple[int, str]]) -> dict[int, str]:
                outer.runs.append([k for k, _ in items])
                time.sleep(outer.hang)
                if outer.fail:
                    raise RuntimeError("silent server")
                return {k: v.upper() for k, v in items}

        return S()


async def test_batched_callers_that_came_together_share_a_run_and_each_gets_its_answer() -> None:
    runs = _Hanging(0.05, fail=False)
    batched: Any = runs.make("async")
    deadline = time.monotonic() + 5
    answers = await asyncio.gather(*(batched(i, f"v{i}", deadline) for i in range(20)))
    assert answers == [f"V{i}" for i in range(20)]
    assert len(runs.runs) <= 3 and sorted(k for r in runs.runs for k in r) == list(range(20)), runs.runs
    assert not batched._waiting and not batched._answered and not batched._gone


async def test_batched_callers_behind_a_hanging_run_give_up_at_their_own_deadline() -> None:
    """A run that hangs until its budget ends (a silent server): the callers behind it return at their own
    deadlines, not after one failed run each (before: the last of 20 waited for 20 runs)."""
    runs = _Hanging(1.0)
    batched: Any = runs.make("async")
    started = time.monotonic()
    outcomes = await asyncio.gather(*(batched(i, "v", started + 0.3) for i in range(20)), return_exceptions=True)
    took = time.monotonic() - started
    assert isinstance(outcomes[0], RuntimeError)  # the caller that made the run
    assert all(isinstance(o, TimeoutError) for o in outcomes[1:]), outcomes
    assert took < 1.5, took  # the hanging run's 1 s, not 20 of them
    assert len(runs.runs) == 1, runs.runs
    assert not batched._waiting and not batched._answered and not batched._gone


def test_batched_threads_behind_a_hanging_run_give_up_at_their_own_deadline() -> None:
    runs = _Hanging(1.0)
    batched: Any = runs.make("sync")
    started = time.monotonic()
    outcomes: list[object] = [None] * 8

    def call(i: int) -> None:
        try:
            outcomes[i] = batched(i, "v", started + 0.3)
        except BaseException as exc:  # noqa: BLE001 - checked below
            outcomes[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
        time.sleep(0.01)  # the first one makes the run
    for t in threads:
        t.join(10)
    assert time.monotonic() - started < 1.5
    assert isinstance(outcomes[0], RuntimeError) and all(isinstance(o, TimeoutError) for o in outcomes[1:]), outcomes
    assert not batched._waiting and not batched._answered and not batched._gone


async def test_batched_an_answer_for_a_caller_that_gave_up_is_dropped() -> None:
    """B's item goes into C's run, which outlasts B's deadline: B gives up (TimeoutError), C gets its answer,
    and B's answer is not kept for a caller that will never come for it."""
    runs = _Hanging(0.3, fail=False)
    batched: Any = runs.make("async")
    now = time.monotonic()
    a = asyncio.create_task(batched(1, "a", now + 5))  # run 1: A alone
    await asyncio.sleep(0.05)
    c = asyncio.create_task(batched(3, "c", now + 5))  # queued first for the turn after A's run
    await asyncio.sleep(0.01)
    b = asyncio.create_task(batched(2, "b", now + 0.45))  # its item goes into C's run, which ends after 0.6 s
    assert await a == "A" and await c == "C"
    with pytest.raises(TimeoutError):
        await b
    assert runs.runs == [[1], [3, 2]], runs.runs
    assert not batched._waiting and not batched._answered and not batched._gone

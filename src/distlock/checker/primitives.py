"""The barrier, latch and double barrier workloads of ``distlock check`` (``--algorithm barrier`` / ``latch`` /
``double-barrier``), worker side.

A worker of these kinds does not lock: it waits on the primitive, and sends each step the moment it starts,
before the call, so that a step of a worker killed or paused in its call is in the history all the same (a
killed participant's arrival still counts until its lease runs out; a killed worker's count-down may have
been applied). The judgement is ``primitive_analysis.analyse_primitive``'s.

* ``barrier``: every worker waits on one barrier of ``parties(workers)`` parties, again and again; each wait
  is bounded (``wait_timeout``), so a generation short of live participants ends in withdrawn arrivals
  instead of a stuck run. Events: ``arrive`` (the wait starts), then the wait's ``op`` with its outcome.
* ``latch``: time is cut into rounds of ``round_seconds``; in each round every worker opens the round's latch
  (``count(workers)``, the first opener creates it), counts down once at a random moment of the round's
  first third, then waits until the round's end. Events: ``count`` (the count-down starts), then the
  round's ``op``: what ``count_down`` returned and how the wait ended.
* ``double-barrier``: time is cut into rounds as for the latch; in each round every worker enters the round's
  double barrier of ``double_parties(workers)`` members (all of them: one generation per round), runs a short
  body, and leaves, both bounded by the round's end. A worker started mid-round (a replacement of a killed one)
  waits for the next round, as does one whose call raised, so no round sees a member twice. Events: ``enter``
  then its ``op`` (``phase`` ``enter``), ``leave`` then its ``op`` (``phase`` ``leave``).

The injector sees a worker in its wait or its count-down as in its critical section (``HOLD_SLEEP``): ``kill``,
``pause`` and the server faults land there. A gray link fault asks the target to linger; the wait already
is its lingering, so a watcher thread says so (``LINGER``) while the worker is in its call.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from .._errors import LockError

#: the kinds this module runs
DOUBLE_BARRIER = "double-barrier"
PRIMITIVES = ("barrier", "latch", DOUBLE_BARRIER)
#: how long a double barrier member stays between its enter and its leave (seconds)
BODY = 0.05


def parties(workers: int) -> int:
    """A barrier's parties for a run: half the workers (at least 2), so generations trip often, and faults
    that take a worker out still leave enough live participants for the next one."""
    return max(2, workers // 2)


def count(workers: int) -> int:
    """A latch round's count: half the workers (at least 1), so a round still reaches zero with a worker
    killed or paused in it."""
    return max(1, workers // 2)


def double_parties(workers: int) -> int:
    """A double barrier's members per round: every worker, so a round is one generation (a trip needs every
    entry of the round that was not withdrawn) and a leave waits for every member of the round."""
    return workers


def wait_timeout(ttl: float) -> float:
    """How long one barrier wait waits (past a lease, so an arrival that stalls can come back)."""
    return max(1.0, 2.0 * ttl)


def round_seconds(ttl: float) -> float:
    """A latch or double barrier round's length (also the double barrier's ``linger``)."""
    return max(1.0, ttl)


def run_primitive(
    kind: str, index: int, store: Any, name: str, ttl: float, workers: int, events: Any, states: Any, end: Any,
    busy: int, idle: int,
) -> None:  # fmt: skip
    """The worker loop of ``kind`` until the run's end; ``busy``/``idle``: the states to publish around a call."""
    step = {"barrier": _barrier_step, "latch": _latch_step, DOUBLE_BARRIER: _double_barrier_step}[kind]
    if kind == DOUBLE_BARRIER:  # the round under way may have members already: join from the next one
        _, round_end = _round(round_seconds(ttl), end)
        time.sleep(max(0.0, round_end - time.monotonic()))
    seq = 0
    while time.monotonic() < end.value:
        op_id = f"{index}.{seq}"
        seq += 1
        try:
            step(index, op_id, store, name, ttl, workers, events, states, end, busy, idle)
        except LockError as err:  # BackendError included: reported, and the loop goes on
            states[index] = idle
            events.put({"kind": "error", "worker": index, "error": f"{kind}: {err}"})
            time.sleep(0.05)


def _recorded(
    step: str, index: int, op_id: str, fields: dict[str, Any], call: Callable[[], bool], events: Any, states: Any,
    busy: int, idle: int,
) -> bool | None:  # fmt: skip
    """Run ``call`` (a wait) as the worker's critical section: ``step`` is sent before it (so a worker killed or
    paused in it is judged all the same), its ``op`` with the outcome after (None: it raised)."""
    t_start = time.monotonic()
    events.put({"kind": step, "worker": index, "op": op_id, "t": t_start, **fields})
    outcome: bool | None = None
    try:
        states[index] = busy
        outcome = call()
    finally:
        states[index] = idle
        events.put({"kind": "op", "worker": index, "op": op_id, "t_start": t_start, "t_done": time.monotonic(),
                    "released": outcome, **fields})  # fmt: skip
    return outcome


def _barrier_step(
    index: int, op_id: str, store: Any, name: str, ttl: float, workers: int, events: Any, states: Any, end: Any,
    busy: int, idle: int,
) -> None:  # fmt: skip
    barrier = store.barrier(name, parties(workers), ttl=ttl)
    timeout = min(wait_timeout(ttl), max(0.1, end.value - time.monotonic()))
    _recorded("arrive", index, op_id, {}, lambda: barrier.wait(timeout=timeout), events, states, busy, idle)


def _round(span: float, end: Any) -> tuple[int, float]:
    """The round under way: its number (rounds are counted down to the run's end, so every worker agrees) and
    when it ends."""
    number = math.floor((end.value - time.monotonic()) / span)
    return number, end.value - number * span


def _double_barrier_step(
    index: int, op_id: str, store: Any, name: str, ttl: float, workers: int, events: Any, states: Any, end: Any,
    busy: int, idle: int,
) -> None:  # fmt: skip
    span = round_seconds(ttl)
    if end.value - time.monotonic() < 0.2:
        time.sleep(max(0.0, end.value - time.monotonic()))
        return
    number, round_end = _round(span, end)
    gate = store.double_barrier(f"{name}/round-{number}", double_parties(workers), ttl=ttl, linger=span)
    # entering may take half the round, leaving the rest: a member that missed the trip is out by the round's end
    enter_by = time.monotonic() + (round_end - time.monotonic()) / 2
    try:
        entered = _recorded("enter", index, op_id, {"round": number, "phase": "enter"},
                            lambda: gate.enter(timeout=max(0.05, enter_by - time.monotonic())),
                            events, states, busy, idle)  # fmt: skip
        if entered:
            states[index] = busy  # the body is in the critical section too: kill and pause land there as well
            time.sleep(BODY)
            _recorded("leave", index, op_id, {"round": number, "phase": "leave"},
                      lambda: gate.leave(timeout=max(0.05, round_end - time.monotonic())),
                      events, states, busy, idle)  # fmt: skip
    finally:  # after an error too: a member enters each round once
        time.sleep(max(0.0, round_end - time.monotonic()))


def _latch_step(
    index: int, op_id: str, store: Any, name: str, ttl: float, workers: int, events: Any, states: Any, end: Any,
    busy: int, idle: int,
) -> None:  # fmt: skip
    span = round_seconds(ttl)
    left = end.value - time.monotonic()
    if left < 0.2:
        time.sleep(max(0.0, left))
        return
    number, round_end = _round(span, end)
    latch = store.latch(f"{name}/round-{number}", count(workers))
    time.sleep(random.uniform(0.0, span / 3))
    t_down = time.monotonic()
    events.put({"kind": "count", "worker": index, "op": op_id, "round": number, "t": t_down})
    remaining: int | None = None
    outcome: bool | None = None
    t_wait = t_down
    try:
        states[index] = busy
        remaining = latch.count_down()
        t_wait = time.monotonic()
        outcome = latch.wait(timeout=max(0.0, round_end - t_wait))
    finally:
        states[index] = idle
        events.put({"kind": "op", "worker": index, "op": op_id, "round": number, "t_start": t_down,
                    "left": remaining, "t_wait": t_wait, "t_done": time.monotonic(), "released": outcome})  # fmt: skip
    time.sleep(max(0.0, round_end - time.monotonic()))


def linger_watch(index: int, states: Any, linger: Any, busy: int, lingering: int, stay: int) -> Callable[[], None]:
    """A gray link fault asks the worker to linger in its critical section: its wait is that already. A thread
    says so (``lingering``) while the worker is in its call; returns how to stop the thread."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(0.002):
            if linger[index] == stay and states[index] == busy:
                states[index] = lingering

    threading.Thread(target=watch, name="checker-linger", daemon=True).start()
    return stop.set

# GENERATED from src/distlock/_async/batch.py by scripts/gen_sync.py: edit that file, not this one.
"""Calls that arrive while one like them is running go together in the next run (``Batched``).

What a crowd of callers does at once (a thousand waiters of a store giving up at the same moment, each
cleaning up after itself) then costs a few requests, not one each on the store's few connections.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Generic, TypeVar

from .. import _rt_sync as rt
from .._core import forks
from .._core.timing import monotonic

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")


class Batched(Generic[K, V, R]):
    """``await batched(key, item, deadline)``: ``run`` for ``item`` and every item that came while an earlier
    run was in flight, one run at a time; each caller gets the answer for its own key. A run that fails raises
    in the caller that made it, and hands the others' items to the next run. Every caller is bounded by its
    own ``deadline`` (monotonic), also while it waits for its turn: a run that hangs until its own budget ends
    (a silent server) must not make the callers behind it wait for one failed run each; a caller that gives
    up is forgotten (``TimeoutError``), and an answer that still comes for it is dropped. A subclass says
    what a run is; it bounds the run itself."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._turn = rt.Mutex()
        self._waiting: dict[K, V] = {}  # items no run has taken yet
        self._answered: dict[K, R] = {}  # answers a run got for other callers, until they come for them
        self._gone: set[K] = set()  # callers that gave up while a run had their item
        forks.track(self)

    def after_fork(self) -> None:
        """In a forked child: none of the parent's callers or runs (a run of the parent's may hold the turn)."""
        self._mutex = threading.Lock()
        self._turn = rt.Mutex()
        self._waiting, self._answered, self._gone = {}, {}, set()

    def run(self, items: list[tuple[K, V]]) -> dict[K, R]:
        """One request for all ``items``; an answer for each key."""
        raise NotImplementedError

    def __call__(self, key: K, item: V, deadline: float | None) -> R:
        with self._mutex:
            self._waiting[key] = item
        if not rt.acquire_within(self._turn, None if deadline is None else deadline - monotonic()):
            with self._mutex:
                if self._waiting.pop(key, None) is None:  # a run has it: drop what it answers for us
                    if self._answered.pop(key, None) is None:
                        self._gone.add(key)
            raise TimeoutError("no turn before the deadline")
        try:
            with self._mutex:
                if key in self._answered:  # a run made while we waited took ours
                    return self._answered.pop(key)
                items = list(self._waiting.items())
                self._waiting.clear()
            try:
                answers = self.run(items)
            except BaseException:
                with self._mutex:
                    for k, v in items:
                        if k != key and k not in self._gone:
                            self._waiting.setdefault(k, v)
                    self._gone.difference_update(k for k, _ in items)
                raise
            with self._mutex:
                for k, r in answers.items():
                    if k == key:
                        continue
                    if k in self._gone:
                        self._gone.discard(k)
                    else:
                        self._answered[k] = r
            return answers[key]
        finally:
            self._turn.release()

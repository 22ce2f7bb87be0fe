"""Calls that arrive while one like them is running go together in the next run (:class:`Batched`).

What a crowd of callers does at once (a thousand waiters of a store giving up at the same moment, each
cleaning up after itself) then costs a few requests, not one each on the store's few connections.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from typing import Generic, TypeVar

from .. import _rt_async as rt

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
R = TypeVar("R")


class Batched(Generic[K, V, R]):
    """``await batched(key, item)``: :meth:`run` for ``item`` and every item that came while an earlier run was
    in flight, one run at a time; each caller gets the answer for its own key. A run that fails raises in the
    caller that made it, and hands the others' items to the next run (each of them makes one when its turn
    comes, within its own budget). A subclass says what a run is."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._turn = rt.Mutex()
        self._waiting: dict[K, V] = {}  # items no run has taken yet
        self._answered: dict[K, R] = {}  # answers a run got for other callers, until they come for them

    async def run(self, items: list[tuple[K, V]]) -> dict[K, R]:
        """One request for all ``items``; an answer for each key."""
        raise NotImplementedError

    async def __call__(self, key: K, item: V) -> R:
        with self._guard:
            self._waiting[key] = item
        async with self._turn:
            with self._guard:
                if key in self._answered:  # a run made while we waited took ours
                    return self._answered.pop(key)
                items = list(self._waiting.items())
                self._waiting.clear()
            try:
                answers = await self.run(items)
            except BaseException:
                with self._guard:
                    for k, v in items:
                        if k != key:
                            self._waiting.setdefault(k, v)
                raise
            with self._guard:
                self._answered.update((k, r) for k, r in answers.items() if k != key)
        return answers[key]

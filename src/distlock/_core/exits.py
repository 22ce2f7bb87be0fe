"""What the process still holds when the interpreter exits normally (shared by both runtimes' exit hooks)."""

from __future__ import annotations

import atexit
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar


class Held(Protocol):
    def _held_at_exit(self) -> int:
        """How many holdings of this process it has (a forked child's own only)."""


H = TypeVar("H", bound=Held)


class AtExit(Generic[H]):
    """The holders (a store's acquirer) with something held, and one exit hook that gets those that still hold
    something then. Held strongly: a store dropped without ``close`` may still hold locks. The hook is
    registered when distlock is imported: the hooks run last-registered-first, so a program's own clean-up
    registered later (``atexit.register(store.close)``, a release) runs first, and this one is the last resort.
    """

    def __init__(self, hook: Callable[[list[H]], None]) -> None:
        self._hook = hook
        self._held: set[H] = set()
        atexit.register(self._run)

    def hold(self, holder: H) -> None:
        """``holder`` holds something now (called under its holdings' guard, as ``drop``: the two never cross)."""
        self._held.add(holder)

    def drop(self, holder: H) -> None:
        """``holder`` holds nothing any more."""
        self._held.discard(holder)

    def _run(self) -> None:
        holders = [holder for holder in list(self._held) if holder._held_at_exit()]
        if holders:
            self._hook(holders)

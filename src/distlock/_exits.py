"""What the process still holds when the interpreter exits normally, and what each side does about it then:
the threaded side releases it and closes every store left open (``SYNC_EXIT``), the asyncio side can only say
so (``ASYNC_EXIT``). A store's acquirer tells its side's hook when it opens, starts and stops holding
something, and closes (``rt.opened_at_exit``, ``rt.hold_at_exit`` / ``rt.drop_at_exit``,
``rt.closed_at_exit``).
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from ._core.text import seconds

log = logging.getLogger("distlock")


class Held(Protocol):
    def _held_at_exit(self) -> int:
        """How many holdings of this process it has (a forked child's own only)."""

    def _open_at_exit(self) -> bool:
        """Whether it is open with something to close (not a database that ends with the process)."""


H = TypeVar("H", bound=Held)


class AtExit(Generic[H]):
    """The holders (a store's acquirer) with something held, and one exit hook that gets those that still hold
    something then. Held strongly: a store dropped without ``close`` may still hold locks. The hook is
    registered when distlock is imported: the hooks run last-registered-first, so a program's own clean-up
    registered later (``atexit.register(store.close)``, a release) runs first, and this one is the last resort.

    ``idle_too``: the hook also gets every store still open then, holding or not (held weakly: a store nobody
    refers to any more has no thread left either). The threaded side closes them: a store's threads (the lease
    clock's, a SQL bell's) asleep in a timed wait that wakes during the interpreter's teardown, with the
    driver's connections still open, crashed the process at exit (SIGSEGV; MariaDB, about 1 exit in 10).
    """

    def __init__(self, hook: Callable[[list[H]], None], idle_too: bool = False) -> None:
        self._hook = hook
        self._held: set[H] = set()
        self._idle_too = idle_too
        self._open: weakref.WeakSet[H] = weakref.WeakSet()
        atexit.register(self._run)

    def opened(self, holder: H) -> None:
        """``holder``'s store is open (kept for the exit only with ``idle_too``)."""
        if self._idle_too:
            self._open.add(holder)

    def hold(self, holder: H) -> None:
        """``holder`` holds something now (called under its holdings' guard, as ``drop``: the two never cross)."""
        self._held.add(holder)

    def drop(self, holder: H) -> None:
        """``holder`` holds nothing any more."""
        self._held.discard(holder)

    def closed(self, holder: H) -> None:
        """``holder``'s store was closed: nothing of it is left for the exit."""
        self._held.discard(holder)
        self._open.discard(holder)

    def _run(self) -> None:
        holders = [holder for holder in list(self._held) if holder._held_at_exit()]
        holders += [holder for holder in list(self._open) if holder not in holders and holder._open_at_exit()]
        if holders:
            self._hook(holders)


class Closing(Held, Protocol):
    """A sync store's holdings (its acquirer), which the exit releases by closing them."""

    def close_at_exit(self) -> None: ...


#: how long a normal interpreter exit may spend releasing what the process still holds, in all
EXIT_BUDGET = 3.0


def _release_at_exit(holders: list[Closing]) -> None:
    """At a normal interpreter exit (a script that ends without ``release()`` or ``close()``): release what
    each store still holds of this process (in a forked child: only what the child took, see ``forks``), so its
    locks are free at once, not at the end of their TTL, and close every store left open (its threads stopped,
    its connections closed). One store after the other on a helper thread, waited
    for at most EXIT_BUDGET in all: a server that does not answer must not hang the exit. Each release is
    bounded by its backend's call timeout as always; what is not released in time ends with its TTL, as after
    a crash."""

    def run() -> None:
        for holder in holders:
            try:
                holder.close_at_exit()
            except Exception as exc:  # noqa: BLE001 - the next store is still released
                log.warning("exit: could not release a store's locks (%s): they end with their TTL", exc)

    thread = threading.Thread(target=run, name="distlock-exit", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no new thread at this point of the exit on some Python versions: unbounded then
        run()
        return
    # joined, not only waited for: the interpreter must not tear down while the thread is still ending (its
    # frames and the closed connections it drops); a crash at exit was seen when it did (MySQL, 1 in 8)
    thread.join(EXIT_BUDGET)
    if thread.is_alive():
        log.warning("exit: locks not released within %s: they end with their TTL", seconds(EXIT_BUDGET))


def _warn_at_exit(holders: list[Held]) -> None:
    """The sync side releases what a store still holds at a normal exit. Here nothing can be: by the time the
    interpreter's exit hooks run, the event loop that owns the store's connections has ended (``asyncio.run``
    returned), and another loop cannot use them. So the exit only says, as a logged warning, how many holdings
    stay until their TTL ends: close the store (``async with``) or release them before the loop ends."""
    log.warning(
        "exit: %d lock holding(s) of asyncio stores were not released before their event loop ended: they "
        "stay held until their TTL runs out (release them, or close the store, inside the loop)",
        sum(holder._held_at_exit() for holder in holders),
    )


SYNC_EXIT = AtExit[Closing](_release_at_exit, idle_too=True)
ASYNC_EXIT = AtExit[Held](_warn_at_exit)

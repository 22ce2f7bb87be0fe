"""How the asyncio side guides its callers: ``with`` on an asyncio object says to use ``async with``
(``AsyncOnly``), ``connect_async()`` can be awaited or used with ``async with`` (``opener``), and
``lock.lease_timeout()`` (``LeaseTimeout``). ``_idiom_sync.py`` is its twin: the names the generated sync code
imports instead. Apart from ``_rt_async.py`` (threads against tasks) because it is about the API's shape, not
the runtime.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Coroutine, Generator
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

from ._core import timing
from ._wrong_form import WrongForm


# -- guiding the wrong form ---------------------------------------------------------------------------------
class AsyncOnly(WrongForm):
    """Base of the asyncio side's context managers: ``with`` (instead of ``async with``) fails with one line
    that says which form to use (``_wrong_form.py``)."""

    _wrong_form = (
        "`with` on {name}: use `async with` on an asyncio store and its locks (or distlock.connect() for a sync store)"
    )

    if not TYPE_CHECKING:
        __enter__ = WrongForm._refuse
        __exit__ = WrongForm._unreached


def blocks_event_loop() -> bool:
    """The sync side's check of a blocking call made on a running event loop: never true here."""
    return False


class LeaseTimeout(AsyncOnly):
    """``async with lock.lease_timeout():`` (``held.LeaseView``): ``asyncio.timeout()`` whose moment is the
    holding's local lease end. The block is cancelled when the holding is lost (its lease ran out, a renewal
    was refused, the backend reported it) and then raises ``LockLost``; a renewal moves the end, so a block
    that outlives its TTL while renewals go through runs on. Entered on a holding already lost, it raises
    ``LockLost`` at once, before the block runs.

    A watcher task waits on the holding's ``lost`` event until its current lease end, reads the end again
    (a renewal may have moved it) and, once the holding is lost, reschedules the timeout to now."""

    def __init__(self, holding: Any, left: Callable[[], float], lost: asyncio.Event, error: Callable[[], Exception]):
        self._holding = holding
        self._left = left
        self._lost = lost
        self._error = error
        self._timeout = asyncio.timeout(None)
        self._watcher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> None:
        # a holding already lost (or whose lease end has passed unnoticed: a process resumed after a pause) is
        # refused here: the watcher would only cancel the block at its first await, after the block's first
        # call had gone out (a request sent is a write made)
        if self._left() <= 0:
            raise self._error()
        await self._timeout.__aenter__()
        loop = asyncio.get_running_loop()
        self._watcher = loop.create_task(self._watch(), context=timing.unbudgeted())

    async def _watch(self) -> None:
        while not self._lost.is_set():
            left = self._left()  # 0.0 once lost (a lease found over is lost there and then)
            if left <= 0:
                break
            try:
                await asyncio.wait_for(self._lost.wait(), left)
            except TimeoutError:
                continue
        self._timeout.reschedule(asyncio.get_running_loop().time())

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        try:
            await self._timeout.__aexit__(kind, exc, tb)
        except TimeoutError as expired:
            raise self._error() from expired


S = TypeVar("S", bound=AbstractAsyncContextManager[Any])
P = ParamSpec("P")


class Opening(AsyncOnly, Coroutine[Any, Any, S]):
    """What ``connect_async()`` returns: ``await`` it for the store (close it yourself), or enter it directly
    with ``async with`` (the store is closed on exit), as aiohttp's ``ClientSession`` and asyncpg's pools allow.
    The opening starts when it is awaited or entered; one of the two, once. It is a coroutine too (it passes
    the calls on to the one it wraps), so ``asyncio.run()``, ``create_task()`` and the like take it as before."""

    def __init__(self, opening: Coroutine[Any, Any, S]) -> None:
        self._opening = opening
        self._store: S | None = None

    if not TYPE_CHECKING:

        def __enter__(self) -> NoReturn:
            self._opening.close()  # never to be awaited now: no "never awaited" warning on top of the error
            raise TypeError(
                "`with distlock.connect_async(...)`: use `async with distlock.connect_async(...) as store:` "
                "(or distlock.connect() for a sync store)"
            )

    def __await__(self) -> Generator[Any, None, S]:
        return self._opening.__await__()

    def send(self, value: Any) -> Any:
        return self._opening.send(value)

    def throw(self, *args: Any) -> Any:
        return self._opening.throw(*args)

    def close(self) -> None:
        self._opening.close()

    async def __aenter__(self) -> S:
        self._store = await self._opening
        return await self._store.__aenter__()  # type: ignore[no-any-return]

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        store, self._store = self._store, None
        if store is not None:
            await store.__aexit__(exc_type, exc, tb)


def opener(fn: Callable[P, Coroutine[Any, Any, S]]) -> Callable[P, Opening[S]]:
    """``connect_async``: a call that is both awaitable and an async context manager (see ``Opening``)."""

    @functools.wraps(fn)
    def opening(*args: P.args, **kwargs: P.kwargs) -> Opening[S]:
        return Opening(fn(*args, **kwargs))

    return opening


#: what ``election.lead(fn)`` runs while leading: ``async def fn(election)``
LeaderWork = Callable[[Any], Awaitable[object]]


def leading_scope(election: Any) -> LeaseTimeout:
    """The scope ``election.lead(fn)`` runs ``fn`` in: cancelled at the loss of the leadership, then
    ``LockLost`` (``lease_timeout()``)."""
    lease_timeout: LeaseTimeout = election.lease_timeout()
    return lease_timeout

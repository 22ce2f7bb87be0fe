"""What runs beside the caller on the asyncio side: user callbacks (``Dispatcher``) and a store's background
workers (``Background``), as tasks of the store's event loop. The threaded side's are threads
(``_workers_sync``); both are imported through their side's ``_rt`` module.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from ._core import timing

log = logging.getLogger("distlock")


class Dispatcher:
    """Runs store internals and user callbacks on the store's event loop, from any thread.

    A user callback never stops the store: whatever it raises (``SystemExit`` included, which would
    otherwise end the event loop) is logged and dropped; a coroutine callback runs as its own task.
    """

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()

    def call(self, fn: Callable[[], object]) -> None:
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:
            pass

    def run_callback(self, cb: Callable[..., object], *args: Any) -> None:
        """Call a user callback off the critical path; coroutine functions become tasks."""

        def _go() -> None:
            try:
                result = cb(*args)
            except BaseException:  # user code must not stop the loop or the renewals
                log.exception("on_lost callback %r raised", cb)
                return
            if asyncio.iscoroutine(result):
                self._loop.create_task(_contained(cb, result))

        self.call(_go)

    def close(self) -> None:
        pass


async def _contained(cb: object, coro: Coroutine[Any, Any, object]) -> None:
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except BaseException:  # see Dispatcher
        log.exception("on_lost callback %r raised", cb)


class Background:
    """One background worker (the store's renewer, a pub/sub reader): an asyncio task."""

    def __init__(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        # in a context of its own: a worker started inside an acquire must not keep that acquire's deadline
        ctx = timing.unbudgeted()
        self._task: asyncio.Task[None] = asyncio.get_running_loop().create_task(fn(), name=name, context=ctx)

    async def join(self, timeout: float | None = None) -> None:
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except (TimeoutError, asyncio.CancelledError):
            self._task.cancel()
            try:
                await self._task
            except BaseException:  # noqa: BLE001 - the worker is being torn down
                pass

    def alive(self) -> bool:
        return not self._task.done()

    def cancel(self) -> None:
        """Stop the worker at its next await (a thread cannot be stopped: it watches a flag instead)."""
        self._task.cancel()

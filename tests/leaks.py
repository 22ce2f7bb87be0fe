"""Where a leaked asyncio connection was opened (a pytest plugin, loaded by ``conftest.py``).

asyncio warns about a socket transport nobody closed only when the garbage collector finds it, which can be
during any later test: the suite (warnings are errors) then fails a test that did nothing wrong, and the
warning names neither the connection's test nor its code. Here each socket transport remembers the test that
was running when it was made and the stack that made it, and the warning says both. Costs one short stack
capture per connection made.
"""

from __future__ import annotations

import asyncio
import traceback
import warnings
from asyncio import selector_events
from collections.abc import Generator
from typing import Any

import pytest

_running = "(no test)"
_transport = selector_events._SelectorSocketTransport
_made = _transport.__init__


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    _made(self, *args, **kwargs)
    frames = [f for f in traceback.extract_stack(limit=40)[:-1] if "/asyncio/" not in f.filename]
    task = asyncio.current_task() if asyncio._get_running_loop() is not None else None
    self._distlock_origin = (_running, f"{task!r}\n" + "".join(traceback.format_list(frames[-12:])))


def _del(self: Any, _warn: Any = warnings.warn) -> None:
    if self._sock is not None:
        test, stack = getattr(self, "_distlock_origin", ("(unknown)", ""))
        _warn(f"unclosed transport {self!r}, made during {test} by:\n{stack}", ResourceWarning, source=self)
        self._sock.close()


_transport.__init__ = _init  # type: ignore[method-assign]
_transport.__del__ = _del  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, None]:
    global _running
    _running = item.nodeid
    yield

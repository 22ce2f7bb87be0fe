"""The one-line refusal of a context manager's other form: ``with`` on an asyncio object, ``async with`` on a
sync one. The base of each side's guide class (``_idiom_async.AsyncOnly``, ``_idiom_sync.SyncOnly``), which
names its message and which two methods refuse. No I/O here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, NoReturn


class WrongForm:
    """Says which form to use instead of Python's bare "does not support the context manager protocol".
    Hidden from type checkers, which keep reporting the wrong form on these objects as the error it is."""

    #: the one line, with ``{name}`` for the object's class name
    _wrong_form: ClassVar[str]

    if not TYPE_CHECKING:

        def _refuse(self) -> NoReturn:
            raise TypeError(self._wrong_form.format(name=type(self).__name__))

        def _unreached(self, *exc: object) -> None:  # Python asks for the exit method before the enter one
            return None

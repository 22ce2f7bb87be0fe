"""Lock names made from a call's arguments: ``store.synchronized("order/{order_id}")``.

The name is a ``str.format`` template whose fields name the decorated function's parameters (with
attribute and index access: ``{order.id}``, ``{ids[0]}``). It is checked once, when the function is
decorated: a field that is no parameter of the function, a positional field (``{}``, ``{0}``) or a malformed
template is a ``ConfigError`` then, not at the first call. A name with no field at all is used as it is
(``{{`` stays two braces there, as it always did); in a template ``{{`` and ``}}`` are literal braces.
"""

from __future__ import annotations

import inspect
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import ConfigError

_ROOT = re.compile(r"[^.\[]*")  # "order.id" -> "order", "ids[0]" -> "ids"


def fields(template: str, *, backend: str | None = None) -> list[str] | None:
    """The parameter names ``template``'s fields use (in order, repeated as given); None if it has none."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(
            f"lock name template {template!r} is malformed ({exc}); write a literal brace as '{{{{' or '}}}}'",
            backend=backend,
        ) from None
    roots = [_ROOT.match(field).group(0) for _, field, _, _ in parsed if field is not None]  # type: ignore[union-attr]
    return roots or None


class NameTemplate:
    """A checked template for the lock names of one function's calls (``name_of``)."""

    def __init__(self, template: str, fn: Callable[..., Any], roots: list[str], *, backend: str | None) -> None:
        self.template = template
        self._signature = inspect.signature(fn)
        params = self._signature.parameters
        for root in roots:
            if not root or root.isdigit():
                raise ConfigError(
                    f"lock name template {template!r} has a positional field ('{{{root}}}'): name a parameter of "
                    f"{fn.__qualname__}() ({', '.join(params) or 'it has none'})",
                    backend=backend,
                )
            if root not in params or params[root].kind in (params[root].VAR_POSITIONAL, params[root].VAR_KEYWORD):
                hint = ", ".join(n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
                raise ConfigError(
                    f"lock name template {template!r}: {root!r} is not a parameter of {fn.__qualname__}() "
                    f"(its parameters: {hint or 'none'}; a literal brace is written '{{{{')",
                    backend=backend,
                )

    def name_of(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        """The lock name of a call with ``args`` and ``kwargs`` (defaults filled in). A call that does not fit
        the function's signature raises the ``TypeError`` the call itself would."""
        bound = self._signature.bind(*args, **kwargs)
        bound.apply_defaults()
        try:
            return self.template.format_map(bound.arguments)
        except (AttributeError, LookupError, ValueError) as exc:  # {order.id} of an argument without .id, ...
            raise ConfigError(f"lock name template {self.template!r}: {type(exc).__name__}: {exc}") from None

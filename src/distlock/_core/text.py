"""Wording shared by every user-facing message: durations, and "did you mean" hints for mistyped names.

One place for both, so that a timeout reads the same in an error of any backend and of the CLI, and a typo
in a URL scheme, a URL option or a keyword option gets the same kind of hint.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def seconds(value: float) -> str:
    """A duration for people: ``4.999998995999931`` -> ``"5s"``, ``0.25`` -> ``"0.25s"``, ``600.0`` -> ``"600s"``.

    Three significant digits below 100 s, whole seconds above: deadlines computed from a clock carry float
    noise that says nothing to the reader.
    """
    if value != value or value in (float("inf"), float("-inf")):  # NaN / inf: say so, do not crash a message
        return f"{value}s"
    if abs(value) >= 100:
        return f"{value:.0f}s"
    return f"{value:.3g}s"


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The one of ``choices`` ``word`` most likely misspells, or None when none is close."""
    found = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return found[0] if found else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'X'?)"`` for the closest of ``choices``, or ``""`` when none is close."""
    best = closest(word, choices)
    return f" (did you mean {best!r}?)" if best is not None and best != word else ""

"""A count-down latch's state and rules, shared by every backend (``_async/latch.py``). No I/O here.

A latch of a name lives on the server as one record: its *round* (a random id written when it was
created), the *initial* count it was created with, and the *count* left. Counting down takes one off,
never below 0. The count-down that reaches 0 turns the record into the *done marker* (count 0), which the
server keeps for ``linger`` seconds and then removes, so nothing of the latch stays: a creator or waiter that
arrives within ``linger`` of the end sees the latch at zero instead of creating a new round.

A latch object belongs to one round: the one it created or found at its first call (none: the latch is at
zero for it). It reports 0 from then on once that round's record is at zero, gone, or replaced by a new
round of the name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._errors import ConfigError

#: how long the done marker of a latch that reached zero stays on the server by default (seconds)
LINGER = 60.0
#: the largest count a latch may start with: well inside what every backend counts exactly (Redis's Lua
#: numbers are doubles, exact to 2**53)
MAX_COUNT = 2**31 - 1


#: how many of the last count-downs' ids a latch record keeps: a count-down sent again after a lost reply finds
#: its own id there and takes nothing off a second time
RECENT = 16


def recent_after(recent: str, step: str) -> str:
    """The record's ``recent`` ids (space-separated) after the count-down ``step``: the last ``RECENT`` kept."""
    return " ".join([*recent.split()[-(RECENT - 1) :], step])


@dataclass(frozen=True)
class LatchState:
    """One latch record as a backend read it."""

    round: str
    initial: int
    count: int


def check_count(count: object, *, name: str, backend: str) -> int | None:
    """``count=`` of ``store.latch``: None (join an existing latch) or an int from 1 to ``MAX_COUNT``."""
    if count is None:
        return None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise ConfigError(
            f"latch count must be an int from 1 to {MAX_COUNT} (or None to join an existing latch), not {count!r}",
            name=name,
            backend=backend,
        )
    return count


def check_linger(linger: object, *, name: str, backend: str) -> float:
    """``linger=`` of ``store.latch``: a finite number of seconds, at least 0.1 and at most a day."""
    ok = isinstance(linger, (int, float)) and not isinstance(linger, bool) and math.isfinite(linger)
    if not ok or not 0.1 <= float(linger) <= 86400:  # type: ignore[arg-type]
        raise ConfigError(f"latch linger must be a number of seconds from 0.1 to 86400, not {linger!r}", name=name, backend=backend)
    return float(linger)  # type: ignore[arg-type]


def mismatch(state: LatchState | None, count: int | None) -> str | None:
    """Why a creator with ``count`` cannot use the latch ``state`` it found (another initial count), or None."""
    if state is None or count is None or state.initial == count:
        return None
    if state.count == 0:
        return (
            f"this latch reached zero moments ago, counting down from {state.initial}, not {count}; "
            "wait for its linger to pass or use another name"
        )
    return f"this latch exists with count={state.initial}, not {count}; use the same count (or count=None to join it)"


def seen_count(state: LatchState | None, round_id: str | None) -> int:
    """The count of the round ``round_id`` as ``state`` shows it: 0 once that round is at zero or gone."""
    if state is None or round_id is None or state.round != round_id:
        return 0
    return max(0, state.count)

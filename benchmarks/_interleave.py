"""The uncontended measurement the peer benchmarks share: rates of several libraries in interleaved slices."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

Pair = tuple[Callable[[], None], Callable[[], None]]  # (acquire, release) of one lock


def interleaved_rates(pairs: Sequence[Pair], seconds: float, slices: int = 10) -> list[float]:
    """Acquire + release pairs per second of each ``(acquire, release)``, measured in turns of
    ``seconds / slices`` each: the load of a shared machine drifts, and this way every row sees the same
    conditions, so the ratios between rows hold even when the absolute rates do not."""
    for acquire, release in pairs:
        for _ in range(20):  # warm up: connections, script caches, leases
            acquire()
            release()
    counts = [0] * len(pairs)
    spent = [0.0] * len(pairs)
    for _ in range(slices):
        for i, (acquire, release) in enumerate(pairs):
            started = time.perf_counter()
            while time.perf_counter() - started < seconds / slices:
                acquire()
                release()
                counts[i] += 1
            spent[i] += time.perf_counter() - started
    return [n / t for n, t in zip(counts, spent, strict=True)]

"""``distlock bench``: what one backend costs, measured against its own raw round-trip limit.

* ``probes`` -- per-scheme probes of the raw limit (Redis ``PING``, SQLite ``BEGIN IMMEDIATE`` + ``COMMIT``...).
* ``measure`` -- the measurements (uncontended, hand-off between two processes, 8-way contention).
* ``plot`` -- the chart (matplotlib, the optional ``python-distlock[plot]`` extra).
"""

from __future__ import annotations

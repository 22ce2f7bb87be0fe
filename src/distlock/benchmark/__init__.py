"""``distlock bench``: what one backend costs, measured against its own raw round-trip limit.

* :mod:`.probes` -- per-scheme probes of the raw limit (Redis ``PING``, SQLite ``BEGIN IMMEDIATE`` + ``COMMIT``...).
* :mod:`.measure` -- the measurements (uncontended, hand-off between two processes, 8-way contention).
* :mod:`.plot` -- the chart (matplotlib, the optional ``python-distlock[plot]`` extra).
"""

from __future__ import annotations

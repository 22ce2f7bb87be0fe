"""``redlock://`` and ``redlocks://``: the Redlock backend lives with the rest of the Redis family in
``backends/redis/redlock.py`` (it runs on the same nodes, scripts, wire and attempts). This module is the name
the store's registry loads (one module per registry row), and only re-exports it."""

from __future__ import annotations

from .redis.redlock import Backend

__all__ = ["Backend"]

"""Small helpers shared by the tests."""

from __future__ import annotations

import time

monotonic = time.monotonic

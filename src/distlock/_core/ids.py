"""Owner ids and release tokens.

The token is what authorises release and renewal: 128 random bits from :mod:`secrets`, fresh for each
acquisition, never derived from the owner id (which is public: it shows in ``inspect``).
"""

from __future__ import annotations

import os
import platform
import secrets

_HOST = platform.node() or "localhost"  # the host name (os.uname), no socket module in the pure core


def new_token() -> str:
    return secrets.token_hex(16)


def owner_id(local: str) -> str:
    """``host:pid:thread-or-task`` (informational, never used to authorise). ``local`` names the thread or task."""
    return f"{_HOST}:{os.getpid()}:{local}"

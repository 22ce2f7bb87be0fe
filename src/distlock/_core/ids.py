"""Owner ids and release tokens.

The token is what authorises release and renewal: 128 random bits from the operating system's CSPRNG
(``os.urandom``, which ``secrets`` reads too), fresh for each acquisition, never derived from the owner id
(which is public: it shows in ``inspect``).
"""

from __future__ import annotations

import os
import platform

_HOST = platform.node() or "localhost"  # the host name (os.uname), no socket module in the pure core
#: ``host:pid:`` of this process, made once (every acquire names its owner); a forked child makes its own
_prefix = f"{_HOST}:{os.getpid()}:"


def _forked() -> None:
    global _prefix
    _prefix = f"{_HOST}:{os.getpid()}:"


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def new_token() -> str:
    # what secrets.token_hex(16) returns, without its two calls in between: made on every acquire
    return os.urandom(16).hex()


def owner_id(local: str) -> str:
    """``host:pid:thread-or-task`` (informational, never used to authorise). ``local`` names the thread or task."""
    return _prefix + local

"""What both sides of the Redis driver seam (``_driver_async.py``, ``_driver_sync.py``) declare alike: the
errors of a broken connection and the shape of distlock's own connection maker. Each side re-exports these
names, so the code written against the seam keeps one spelling (``drv.BROKEN``, ``drv.Made``). No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

#: what a connection that broke or was closed under a read raises: redis-py's errors and the socket's, and from
#: its parsers the socket they dropped (the pure-Python one: ValueError / AttributeError; hiredis's: TypeError,
#: a socket of None)
BROKEN = (RedisError, OSError, RuntimeError, ValueError, AttributeError, TypeError)

#: how distlock's request path makes its connections to one server, and the bound of one request on them
Made = tuple[Callable[[], Any], float | None]

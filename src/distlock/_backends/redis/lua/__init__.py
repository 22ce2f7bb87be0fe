"""The Lua scripts of the Redis backends (single node, Redis Cluster and each Redlock master), by name, and their
SHA1s (what ``EVALSHA`` calls them by). No I/O here.

Every script gets the same eleven KEYS (the layout of ``keys.py``, in the order of
``distlock._backends.redis.keys.keys``) and ``ARGV[1]`` = the wake-up channel, so the scripts are
cluster-correct and share one prelude; each script's header names the rest of its ARGV and its reply.
Times are the server's ``TIME`` in milliseconds, the same clock that runs ``PX``. The grant rule is the one
of ``distlock._core.arbiter``, written in Lua. ``calls.py`` packs the calls (``EVALSHA`` by
``SHA``) and decodes the replies.

The texts, in three modules (a script's text is its identity on the server: its SHA is what a client calls
and what a server caches, so a change of one byte is a new script):

* ``prelude.py``: the key-type guard and the helpers every script starts with (``PRELUDE``, ``WRONGTYPE``);
* ``locks.py``: a holding's life (acquire, release with its hand-over, abandon, renew, holds, Redlock's
  fence floor) and a semaphore's resize;
* ``admin.py``: inspect, break, a release request and an election's proclaim.
"""

from __future__ import annotations

import hashlib

from .admin import BREAK, INSPECT, PROCLAIM, REQUEST
from .locks import ABANDON, ACQUIRE, FENCE_FLOOR, HOLDS, RELEASE, RENEW, RESIZE
from .prelude import WRONGTYPE

__all__ = [
    "ABANDON", "ACQUIRE", "BREAK", "FENCE_FLOOR", "HOLDS", "INSPECT", "OLD_ACQUIRE_SHA", "PROCLAIM", "RELEASE",
    "RENEW", "REQUEST", "RESIZE", "SCRIPTS", "SHA", "WRONGTYPE",
]  # fmt: skip

#: the SHA1 of the acquire script of distlock 0.1.0 (per-name ``{N}:fence`` counters): if a server has it
#: cached, an old client has been using that server (checked at connect by
#: ``distlock._backends.redis._async.fences.check_server``)
OLD_ACQUIRE_SHA = "a4624229ebf697be6b9ff040d73a51b94abf9126"

SCRIPTS: dict[str, str] = {
    "acquire": ACQUIRE,
    "release": RELEASE,
    "abandon": ABANDON,
    "renew": RENEW,
    "holds": HOLDS,
    "inspect": INSPECT,
    "break": BREAK,
    "fence_floor": FENCE_FLOOR,
    "proclaim": PROCLAIM,
    "request": REQUEST,
    "resize": RESIZE,
}

SHA: dict[str, str] = {k: hashlib.sha1(v.encode()).hexdigest() for k, v in SCRIPTS.items()}

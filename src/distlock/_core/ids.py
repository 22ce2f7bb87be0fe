"""Owner ids, client names and release tokens.

The token is what authorises release and renewal: 128 random bits from the operating system's CSPRNG
(``os.urandom``, which ``secrets`` reads too), fresh for each acquisition, never derived from the owner id
(which is public: it shows in ``inspect``).

A store opened with a client name (``connect(..., client_name="web-1")``) stores its holdings' owners as
``host:pid:thread@web-1``: every backend keeps the owner string whole (Redis's holder details, the SQL owner
column, the JSON of a ZooKeeper node or an etcd key), so another process's ``inspect`` reads the name back
(``split_owner``) with no change to any wire layout. A client name holds no ``:`` and no ``@``, so the
split is unambiguous: an owner string whose last ``@`` is followed by a ``:`` (a foreign record) has none.
"""

from __future__ import annotations

import os
import platform

from .._errors import ConfigError

_HOST = platform.node() or "localhost"  # the host name (os.uname), no socket module in the pure core
#: ``host:pid:`` of this process, made once (every acquire names its owner); a forked child makes its own
_prefix = f"{_HOST}:{os.getpid()}:"


#: tokens drawn ahead from the CSPRNG, each handed out once (``list.pop`` is atomic under the GIL): one
#: ``os.urandom`` call (a system call) per ``_BATCH`` acquires instead of one per acquire
_tokens: list[str] = []
_BATCH = 64


def _forked() -> None:
    global _prefix
    _prefix = f"{_HOST}:{os.getpid()}:"
    # a forked child must never hand out a token its parent may hand out too
    _tokens.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def new_token() -> str:
    """128 random bits from the OS's CSPRNG as 32 hex digits (what ``secrets.token_hex(16)`` returns), fresh
    for each call: made on every acquire."""
    try:
        return _tokens.pop()
    except IndexError:
        pass
    h = os.urandom(16 * _BATCH).hex()
    # made in this thread: no other thread has seen these; the last one is this call's
    _tokens.extend(h[i : i + 32] for i in range(32, len(h), 32))
    return h[:32]


def new_uuid() -> str:
    """A random UUID in its text form (a ZooKeeper double barrier member's node name, as Curator names them)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def owner_id(local: str, client_name: str | None = None) -> str:
    """``host:pid:thread-or-task`` (informational, never used to authorise), then ``@client_name`` if the
    store has one. ``local`` names the thread or task."""
    return _prefix + local if client_name is None else f"{_prefix}{local}{CLIENT_SEPARATOR}{client_name}"


#: between the owner id and the client name in a stored owner string
CLIENT_SEPARATOR = "@"
#: the longest client name (characters): it rides along in every holding's owner string
MAX_CLIENT_NAME = 64
#: the environment variable that names the client of a store opened without ``client_name``
CLIENT_NAME_ENV = "DISTLOCK_CLIENT_NAME"


def check_client_name(value: object, *, backend: str | None = None, source: str = "client_name") -> str:
    """A client name: 1 to 64 printable characters, no whitespace, ``:`` or ``@`` (Redis's CLIENT SETNAME
    refuses spaces too). ``source`` says where it came from in the error."""
    if not isinstance(value, str):
        raise ConfigError(f"{source} must be a str, not {type(value).__name__}", backend=backend)
    bad = next((c for c in value if not c.isprintable() or c.isspace() or c in ":@"), None)
    if not value or len(value) > MAX_CLIENT_NAME or bad is not None:
        why = f"has {bad!r}" if bad is not None else f"is {len(value)} characters"
        raise ConfigError(
            f"{source} {value[:80]!r} {why}: use 1-{MAX_CLIENT_NAME} printable characters without "
            "spaces, ':' or '@' (e.g. web-1)",
            backend=backend,
        )
    return value


def split_owner(owner: str) -> tuple[str, str | None]:
    """(owner id, client name or None) of a stored owner string (``owner_id``)."""
    head, sep, tail = owner.rpartition(CLIENT_SEPARATOR)
    if not sep or not head or not tail or ":" in tail or len(tail) > MAX_CLIENT_NAME:
        return owner, None
    return head, tail

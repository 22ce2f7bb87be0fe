"""Argument checks done before anything touches a backend (bad input changes nothing)."""

from __future__ import annotations

import math

from .._errors import ConfigError

#: Shortest lease accepted: a lease must outlast a round trip and the drift margin (1% + 2 ms) by a wide
#: margin, or every grant arrives after its own end. Shorter TTLs are refused rather than silently useless.
MIN_TTL = 0.05

#: Longest name accepted at all. Backends with smaller limits map longer names (by full hash).
MAX_NAME_CHARS = 1024


def check_name(name: object, *, backend: str | None = None) -> str:
    if not isinstance(name, str):
        raise ConfigError(f"lock name must be a str, not {type(name).__name__}", backend=backend)
    if not name:
        raise ConfigError("lock name must not be empty", backend=backend)
    if "\x00" in name:
        raise ConfigError("lock name must not contain a NUL byte", name=name.replace("\x00", "\\0"), backend=backend)
    if len(name) > MAX_NAME_CHARS:
        raise ConfigError(
            f"lock name is {len(name)} characters; the limit is {MAX_NAME_CHARS}",
            name=name[:40] + "...",
            backend=backend,
        )
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError("lock name is not valid UTF-8 text (lone surrogate)", backend=backend) from None
    return name


def check_seconds(value: object, what: str, *, name: str | None = None, backend: str | None = None) -> float:
    """A positive, finite number of seconds (TTLs)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{what} must be a number of seconds, not {type(value).__name__}", name=name, backend=backend)
    f = float(value)
    if math.isnan(f) or math.isinf(f) or f <= 0:
        raise ConfigError(
            f"{what} must be a positive finite number of seconds, got {value!r}", name=name, backend=backend
        )
    return f


def check_ttl(value: object, what: str = "ttl", *, name: str | None = None, backend: str | None = None) -> float:
    """A lease: positive, finite, and at least ``MIN_TTL`` seconds."""
    f = check_seconds(value, what, name=name, backend=backend)
    if f < MIN_TTL:
        raise ConfigError(
            f"{what} must be at least {MIN_TTL} seconds (a lease must outlast a round trip), got {value!r}",
            name=name,
            backend=backend,
        )
    return f


def check_max_hold(value: object, *, name: str | None = None, backend: str | None = None) -> float | None:
    """``None`` (no cap) or a lease cap in seconds: positive, finite, at least ``MIN_TTL``."""
    return None if value is None else check_ttl(value, "max_hold", name=name, backend=backend)


def check_timeout(value: object, *, name: str | None = None, backend: str | None = None) -> float | None:
    """``None`` (wait forever) or a finite number >= 0 (0 = one attempt)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"timeout must be None or seconds, not {type(value).__name__}", name=name, backend=backend)
    f = float(value)
    if math.isnan(f) or f < 0:
        raise ConfigError(f"timeout must be None or >= 0 seconds, got {value!r}", name=name, backend=backend)
    if math.isinf(f):
        return None
    return f


def check_lease(
    ttl: object, timeout: object, max_hold: object = None, *, name: str | None = None, backend: str | None = None
) -> tuple[float, float | None, float | None]:
    """The lease options every lock kind and election candidate takes, checked in this order: the lease
    (``ttl``), its cap (``max_hold``, None: none) and the acquire's ``timeout``. Returns (ttl, timeout, max_hold)."""
    lease = check_ttl(ttl, name=name, backend=backend)
    cap = check_max_hold(max_hold, name=name, backend=backend)
    return lease, check_timeout(timeout, name=name, backend=backend), cap


def check_permits(value: object, *, name: str | None = None, backend: str | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"permits must be an int, not {type(value).__name__}", name=name, backend=backend)
    if value < 1:
        raise ConfigError(f"permits must be >= 1, got {value}", name=name, backend=backend)
    return value


def check_capacity(value: object, *, name: str | None = None, backend: str | None = None) -> int | None:
    """A semaphore's declared capacity: an int >= 1, or None (the capacity stored on the server governs)."""
    return None if value is None else check_permits(value, name=name, backend=backend)


#: Largest election value accepted (bytes of UTF-8). etcd and ZooKeeper keep it in one key or node; 64 KiB
#: stays far below their request limits (1.5 MiB, 1 MiB) and is plenty for an address or a small JSON.
MAX_VALUE_BYTES = 65536


def check_value(value: object, *, name: str | None = None, backend: str | None = None) -> str:
    """An election candidate's value: text without NUL, valid UTF-8, at most ``MAX_VALUE_BYTES``."""
    if not isinstance(value, str):
        raise ConfigError(f"an election value must be a str, not {type(value).__name__}", name=name, backend=backend)
    if "\x00" in value:
        raise ConfigError("an election value must not contain a NUL byte", name=name, backend=backend)
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ConfigError(
            "an election value is not valid UTF-8 text (lone surrogate)", name=name, backend=backend
        ) from None
    if size > MAX_VALUE_BYTES:
        raise ConfigError(
            f"an election value is {size} bytes; the limit is {MAX_VALUE_BYTES}", name=name, backend=backend
        )
    return value


#: Largest release request reason accepted (characters): a line for a log, not a payload
MAX_REASON_CHARS = 1024


def check_reason(reason: object, *, name: str | None = None, backend: str | None = None) -> str:
    """A release request's reason (``request_release``): text without NUL or surrogates, at most
    ``MAX_REASON_CHARS`` characters."""
    if not isinstance(reason, str):
        raise ConfigError(f"a release reason must be a str, not {type(reason).__name__}", name=name, backend=backend)
    if len(reason) > MAX_REASON_CHARS:
        raise ConfigError(
            f"a release reason is {len(reason)} characters; the limit is {MAX_REASON_CHARS}", name=name, backend=backend
        )
    if "\x00" in reason:
        raise ConfigError("a release reason must not contain a NUL byte", name=name, backend=backend)
    try:
        reason.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(
            "a release reason is not valid UTF-8 text (lone surrogate)", name=name, backend=backend
        ) from None
    return reason

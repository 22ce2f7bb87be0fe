"""The log events of a lock's life, on the ``distlock`` logger.

DEBUG for each step (``wait``, ``grant``, ``renew``, ``release``), WARNING for a loss (``lost``). Every record
carries structured fields in ``extra`` for handlers and formatters that read them: ``event``, ``lock`` (the
name), ``backend`` (the URL scheme: never the URL, so never a credential), and where they apply ``fence``,
``wait_ms``, ``count``, ``ms``, ``reason``. The messages say the same in words (``distlock --debug`` shows
them). A DEBUG event costs one level check when DEBUG is off.
"""

from __future__ import annotations

import logging

log = logging.getLogger("distlock")


def debug(event: str, message: str, *args: object, **fields: object) -> None:
    """Log a DEBUG step of a lock's life with its fields (nothing is formatted unless DEBUG is on)."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug(message, *args, extra={"event": event, **fields})


def warning(event: str, message: str, *args: object, **fields: object) -> None:
    log.warning(message, *args, extra={"event": event, **fields})

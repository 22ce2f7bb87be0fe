"""The URL option ``remap``: the addresses a Redis Cluster or the sentinels announce, each mapped to the address
this client reaches that server at (a NAT, a container's published port, a proxy). No I/O here: the cluster
client takes ``remapper``'s callable (redis-py's ``address_remap``), the Sentinel client maps each master lookup
(``options.RemappedSentinel``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..._errors import ConfigError

if TYPE_CHECKING:  # (the URL parser's module starts the runtime; the option's reader needs only its type)
    from ..._url import StoreConfig

#: an address a cluster or the sentinels announce -> the address this client reaches it at
Remap = dict[tuple[str, int], tuple[str, int]]
REMAP_FORM = "remap=HOST:PORT=HOST:PORT[,HOST:PORT=HOST:PORT...] (announced address = the address to use)"


def remap_option(config: StoreConfig) -> Remap:
    """URL option ``remap``: the addresses a Redis Cluster or the sentinels announce, each mapped to the address
    this client reaches that server at (a NAT, a container's published port, a proxy). redis-py's cluster
    client calls it ``address_remap``; an address not listed is used as announced."""
    raw = config.pop("remap")
    if raw is None:
        return {}
    remap: Remap = {}
    for pair in filter(None, (p.strip() for p in raw.split(","))):
        announced, eq, reached = pair.partition("=")
        if not eq:
            raise ConfigError(f"bad URL option remap: {pair!r} has no '=': {REMAP_FORM}", backend=config.scheme)
        remap[_address(announced, config.scheme)] = _address(reached, config.scheme)
    return remap


def _address(text: str, scheme: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port)."""
    host, colon, port = text.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"bad URL option remap: {text.strip()!r} is not HOST:PORT: {REMAP_FORM}", backend=scheme)
    return host, int(port)


def remapper(remap: Remap) -> Callable[[tuple[str, int]], tuple[str, int]] | None:
    """redis-py's ``address_remap`` callable for ``remap`` (None: no remapping). redis-py may call it again on
    an address it already remapped (a redirect from a node reached through it): one not listed is kept."""
    if not remap:
        return None
    return lambda address: remap.get((address[0], int(address[1])), address)

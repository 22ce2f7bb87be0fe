"""distlock's common TLS URL options (``tls``, ``cafile``, ``certfile``, ``keyfile``, ``verify``: ``_tls.py``)
for the Redis backends, as redis-py's own URL options (``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
``ssl_cert_reqs``, ``ssl_check_hostname``), which are accepted under their own names as well."""

from __future__ import annotations

from ..._errors import ConfigError
from ..._tls import pop_tls
from ..._url import StoreConfig

#: distlock's common TLS option names -> redis-py's
ALIASES = {"cafile": "ssl_ca_certs", "certfile": "ssl_certfile", "keyfile": "ssl_keyfile"}


def tls_options(config: StoreConfig) -> None:
    """Rewrite ``config``'s TLS options as redis-py's; ``tls=true`` makes the scheme the TLS one (``rediss``,
    ``redlocks``, ``rediss+sentinel``). Idempotent: each master of a Redlock URL gets its URL from the same config."""
    opts = pop_tls(config, aliases=ALIASES)
    if opts is None:
        return
    if config.scheme == "unix":
        raise ConfigError("TLS options on a unix:// URL: redis-py speaks TLS over TCP only", backend=config.scheme)
    if config.scheme in ("redis", "redlock"):
        config.scheme += "s"
    elif config.scheme == "redis+sentinel":
        config.scheme = "rediss+sentinel"
    driver = {"ssl_ca_certs": opts.cafile, "ssl_certfile": opts.certfile, "ssl_keyfile": opts.keyfile}
    config.params.update({k: v for k, v in driver.items() if v})
    if not opts.verify:
        config.params.update(ssl_cert_reqs="none", ssl_check_hostname="false")

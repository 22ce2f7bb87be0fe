"""The TLS options every network backend reads from its URL, under the same names.

``tls=true`` turns TLS on (as do the TLS schemes ``rediss://``, ``redlocks://`` and ``etcds://``); ``cafile``
is the PEM bundle of the CAs that may sign the server's certificate (default: the system's), ``certfile`` and
``keyfile`` a client certificate (mutual TLS), ``verify=false`` skips checking the server's certificate and
host name. The names are the standard library's (``ssl.create_default_context(cafile=)``,
``load_cert_chain(certfile, keyfile)``); a backend whose driver has names of its own accepts those as aliases
(redis-py's ``ssl_ca_certs``..., PyMySQL's ``ssl_ca``...), and each backend maps ``TlsOptions`` onto its
driver.

The files are loaded here, once, when the store is opened: a missing or malformed file is a one-line
``ConfigError`` naming the option, not a handshake failure later. TLS options on a connection that is not TLS
are refused (a CA file next to ``etcd://`` would otherwise be ignored and the traffic go in the clear).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from ._errors import ConfigError
from ._url import StoreConfig

#: the common option names, for docs and errors
OPTIONS = ("tls", "cafile", "certfile", "keyfile", "verify")


@dataclass(frozen=True)
class TlsOptions:
    cafile: str | None
    certfile: str | None
    keyfile: str | None
    verify: bool

    def context(self) -> ssl.SSLContext:
        """A client context: the system's CAs (or ``cafile``'s), host name checked unless ``verify`` is off."""
        ctx = ssl.create_default_context(cafile=self.cafile)
        if not self.verify:
            ctx.check_hostname = False  # before verify_mode: the ssl module refuses the other order
            ctx.verify_mode = ssl.CERT_NONE
        if self.certfile:
            ctx.load_cert_chain(self.certfile, self.keyfile)
        return ctx


def pop_tls(config: StoreConfig, on: bool = False, aliases: dict[str, str] | None = None) -> TlsOptions | None:
    """Read (and remove) the TLS options of ``config``; None when TLS is off.

    TLS is on with a TLS scheme, ``tls=true``, or ``on`` (a backend's own switch, e.g. libpq's ``sslmode``).
    ``aliases`` maps a common name to the driver's own name for the same option: either may be given, not both.
    """
    values: dict[str, str | None] = {}
    for name in OPTIONS:
        value = config.pop(name)
        alias = (aliases or {}).get(name)
        if alias is not None:
            config.asked.add(alias)  # a name the backend reads, for "did you mean"
        if alias is not None and alias in config.params:
            if value is not None:
                raise ConfigError(
                    f"URL options {name} and {alias} are the same option: give one", backend=config.scheme
                )
            value = config.pop(alias)
        values[name] = value
    raw_tls = values.pop("tls")
    if raw_tls is not None:
        config.params["tls"] = raw_tls  # pop_bool's checks and message
        enabled = config.pop_bool("tls", False)
        if not enabled and config.tls:
            raise ConfigError(
                f"URL option tls=false contradicts the TLS scheme {config.scheme}://", backend=config.scheme
            )
    else:
        enabled = False
    enabled = enabled or config.tls or on
    raw_verify = values.pop("verify")
    verify = True
    if raw_verify is not None:
        config.params["verify"] = raw_verify
        verify = config.pop_bool("verify", True)
    given = [name for name in ("cafile", "certfile", "keyfile") if values[name]] + (["verify"] if raw_verify else [])
    if not enabled:
        if given:
            raise ConfigError(
                f"URL option(s) {', '.join(given)} need TLS: add tls=true (or use the TLS scheme)",
                backend=config.scheme,
            )
        return None
    if values["keyfile"] and not values["certfile"]:
        raise ConfigError("URL option keyfile needs certfile (the client certificate)", backend=config.scheme)
    opts = TlsOptions(values["cafile"], values["certfile"], values["keyfile"], verify)
    try:
        opts.context()  # every file read and checked now, whatever the driver does with them later
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"TLS files ({_files(opts)}): {_reason(exc)}", backend=config.scheme) from exc
    return opts


def _files(opts: TlsOptions) -> str:
    return ", ".join(f"{k}={v}" for k, v in (("cafile", opts.cafile), ("certfile", opts.certfile),
                                             ("keyfile", opts.keyfile)) if v)  # fmt: skip


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and not isinstance(exc, ssl.SSLError):
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return one_line(str(exc) or type(exc).__name__)


def one_line(text: str) -> str:
    """A driver's multi-line message as one line (libpq's and kazoo's span several)."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def verify_failure(exc: BaseException | str | None) -> str | None:
    """If ``exc`` (or an exception it was raised from) is the client's refusal of the server's certificate, a
    one-line description of it with a hint; else None. Drivers wrap the ``ssl`` error in their own (redis-py,
    kazoo) or keep only its text (libpq, kazoo's log), so both the type and the text are looked at."""
    seen: BaseException | str | None = exc
    while seen is not None:
        text = str(seen)
        if isinstance(seen, ssl.SSLCertVerificationError) or "certificate verify failed" in text:
            detail = getattr(seen, "verify_message", None) or text.split("certificate verify failed", 1)[-1]
            detail = one_line(str(detail)).strip(" :").split(" (_ssl.c")[0]
            return f"TLS: the server's certificate is not trusted ({detail}); is cafile the CA that signed it?"
        seen = (seen.__cause__ or seen.__context__) if isinstance(seen, BaseException) else None
    return None

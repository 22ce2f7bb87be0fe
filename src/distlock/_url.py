"""Store URLs -> ``StoreConfig``, and credential scrubbing.

One parser for every backend. Multi-host URLs (``redlock://h1:6379,h2:6379``,
``zookeeper://h1:2181,h2:2181/chroot``) are split here, so backends receive a list of
``(host, port)`` pairs and never parse URLs themselves. Query parameters are backend options;
the backend pops the ones it knows and ``StoreConfig.reject_unknown`` turns leftovers into a
``ConfigError`` (a typo must not be ignored silently).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from ._backends.sqlite import hostdir
from ._core.text import did_you_mean
from ._errors import ConfigError
from ._registry import ROWS

#: scheme -> canonical backend name (aliases collapse here)
SCHEMES: dict[str, str] = {scheme: row.name for row in ROWS for scheme in row.schemes}
#: backend name -> the port of a host given without one
DEFAULT_PORTS: dict[str, int] = {row.name: row.port for row in ROWS if row.port is not None}
#: scheme -> the port of a host given without one, where the scheme's hosts are not the backend's servers
SCHEME_PORTS: dict[str, int] = {scheme: port for row in ROWS for scheme, port in row.scheme_ports}
TLS_SCHEMES = frozenset(scheme for row in ROWS for scheme in row.tls_schemes)

_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:@/]*)(?::(?P<pw>[^@/]*))?@", re.I)
_PARAM_SECRET = re.compile(r"(?P<key>(?:password|passwd|pw|secret|token)=)[^&\s]*", re.I)


def redact(url: str) -> str:
    """Return ``url`` with its password (and secret-looking query values) replaced by ``***``."""

    def _userinfo(m: re.Match[str]) -> str:
        if m.group("pw") is None:
            return m.group(0)
        return f"{m.group('scheme')}{m.group('user')}:***@"

    return _PARAM_SECRET.sub(lambda m: m.group("key") + "***", _USERINFO.sub(_userinfo, url))


def scrub(text: str, *secrets: str | None) -> str:
    """Remove URLs' passwords and each given secret from a message (driver errors may echo them).

    A secret is replaced where it stands as a whole token (not inside a longer word or number), so a short
    password such as ``p`` does not turn "port 1" into "***ort 1", while ``password=p`` or ``'p'`` still go.
    """
    out = redact(text)
    for secret in secrets:
        if secret:
            out = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", "***", out)
    return out


#: the directory of the host's default store, unless ``$DISTLOCK_HOME`` names another: kept across reboots (the
#: fence counter lives in the file), and one every user can create, so the first process of any user makes it
HOST_HOME = "/var/tmp/distlock"
_noted: set[str] = set()


def default_url() -> str:
    """``DISTLOCK_URL``, else the host's SQLite store (``default_store``)."""
    return default_store()[0]


def default_store() -> tuple[str, str | None]:
    """The default store's URL and, if the host-wide one cannot be used, a one-line note saying so.

    ``$DISTLOCK_URL`` if set; else ``$DISTLOCK_HOME/locks.db`` (default ``HOST_HOME``), made (directory and
    file) writable by every user, so that every process of the host, whoever runs it, shares one store as they
    would share a ``flock`` file; else, if that cannot be made or written (read-only, no permission), the
    user's own file in ``$XDG_STATE_HOME/distlock`` (or ``~/.local/state/distlock``), with the note, also
    logged once per process as a warning."""
    env = os.environ.get("DISTLOCK_URL")
    if env:
        return env, None
    chosen = os.environ.get("DISTLOCK_HOME")
    home = Path(os.path.abspath(Path(chosen or HOST_HOME).expanduser()))  # not relative to where a process runs
    problem = hostdir.prepare(home, chosen=bool(chosen))
    if problem is None:
        return "sqlite:///" + str(home / "locks.db"), None
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    own = Path(state) / "distlock" / "locks.db"
    note = (
        f"the host-wide store {home / 'locks.db'} cannot be used ({problem}): using {own}, which other users' "
        "processes do not see (set DISTLOCK_HOME to a directory every user can write, or DISTLOCK_URL)"
    )
    if note not in _noted:
        _noted.add(note)
        logging.getLogger("distlock").warning("%s", note)
    return "sqlite:///" + str(own), note


@dataclass
class StoreConfig:
    """A parsed store URL. ``password`` is kept out of ``repr``."""

    scheme: str
    backend: str
    hosts: list[tuple[str, int]]
    username: str | None
    password: str | None = field(repr=False)
    path: str
    params: dict[str, str]
    url: str = field(repr=False)
    #: the names given as keyword options rather than in the URL's query (errors say which)
    keywords: frozenset[str] = frozenset()
    #: every option name a reader asked for, given or not: the backend's own names, for "did you mean"
    asked: set[str] = field(default_factory=set, repr=False)

    @property
    def tls(self) -> bool:
        return self.scheme in TLS_SCHEMES

    @property
    def redacted(self) -> str:
        return redact(self.url)

    def pop(self, key: str, default: str | None = None) -> str | None:
        self.asked.add(key)
        return self.params.pop(key, default)

    def pop_float(self, key: str, default: float) -> float:
        raw = self.pop(key)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"URL option {key}={raw!r} is not a number", backend=self.scheme) from None
        if not value > 0 or value == float("inf"):
            raise ConfigError(f"URL option {key}={raw!r} must be a positive finite number", backend=self.scheme)
        return value

    def pop_int(self, key: str, default: int) -> int:
        raw = self.pop(key)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise ConfigError(f"URL option {key}={raw!r} is not an integer", backend=self.scheme) from None

    def pop_bool(self, key: str, default: bool) -> bool:
        raw = self.pop(key)
        if raw is None:
            return default
        low = raw.lower()
        if low in ("1", "true", "yes", "on"):
            return True
        if low in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"URL option {key}={raw!r} is not a boolean", backend=self.scheme)

    def reject_unknown(self, known: Iterable[str] = ()) -> None:
        """A leftover option is a typo: say so, with the closest of the options the backend reads (those its
        readers asked for, and ``known``: names passed on to a driver unread)."""
        if not self.params:
            return
        names = self.asked.union(known)
        listed = ", ".join(f"{key}{did_you_mean(key, names)}" for key in sorted(self.params))
        if self.keywords.issuperset(self.params):
            kind = "keyword option(s)"
        elif self.keywords.isdisjoint(self.params):
            kind = "URL option(s)"
        else:
            kind = "URL or keyword option(s)"
        raise ConfigError(f"unknown {kind} for {self.backend}: {listed}", backend=self.scheme)


#: keyword options that are names, not numbers: a non-str value is refused rather than turned into its text
TEXT_ONLY = frozenset({"client_name", "table_prefix"})


def parse_url(url: str | None, options: dict[str, object] | None = None) -> StoreConfig:
    """Parse a store URL (``None`` -> ``default_url``); keyword ``options`` override query parameters."""
    if url is None:
        url = default_url()
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("store URL must be a non-empty string")
    if "\x00" in url:
        raise ConfigError("store URL contains a NUL byte")
    m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://(.*)$", url, re.S)
    if not m:
        raise ConfigError(f"not a store URL (expected scheme://...): {redact(url)!r}")
    scheme = m.group(1).lower()
    if scheme not in SCHEMES:
        known = ", ".join(sorted(SCHEMES))
        hint = did_you_mean(scheme, SCHEMES)
        raise ConfigError(f"unknown URL scheme {scheme!r}{hint}; known: {known}", backend=scheme)
    backend = SCHEMES[scheme]
    try:
        parts = urlsplit(url)
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
    except ValueError as exc:  # e.g. an unclosed "[" of an IPv6 host
        raise ConfigError(f"malformed {scheme}:// URL ({exc}): {redact(url)!r}", backend=scheme) from None
    for key, value in (options or {}).items():
        if value is None:  # a keyword given as None is not given (``client_name=os.environ.get(...)``), not "None"
            continue
        if key in TEXT_ONLY and not isinstance(value, str):  # 42 would pass as the text "42"
            raise ConfigError(f"{key} must be a str, not {type(value).__name__}", backend=backend)
        params[key] = str(value).lower() if isinstance(value, bool) else str(value)

    netloc = parts.netloc
    username = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        user, sep, pw = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(pw) if sep else None

    hosts: list[tuple[str, int]] = []
    if backend in DEFAULT_PORTS and scheme != "unix":
        if not netloc:
            hosts.append(_socket_host(backend, scheme, params))
        else:
            for item in netloc.split(","):
                hosts.append(_host_port(item, SCHEME_PORTS.get(scheme, DEFAULT_PORTS[backend]), scheme))
    path = unquote(parts.path)
    if backend == "sqlite":
        # SQLAlchemy convention: sqlite:///rel/path.db (relative), sqlite:////abs/path.db (absolute)
        if netloc:
            raise ConfigError(
                "sqlite URL takes no host: use sqlite:///relative.db or sqlite:////abs.db", backend=scheme
            )
        path = path[1:] if path.startswith("/") else path
        if not path:
            raise ConfigError("sqlite URL needs a file path", backend=scheme)
    return StoreConfig(
        scheme=scheme,
        backend=backend,
        hosts=hosts,
        username=username,
        password=password,
        path=path,
        params=params,
        url=url,
        keywords=frozenset(options or ()),
    )


def _socket_host(backend: str, scheme: str, params: dict[str, str]) -> tuple[str, int]:
    """A URL with no host: the unix-socket forms of libpq (``postgresql:///db?host=/run/postgresql&port=5432``,
    ``host`` the socket's directory) and PyMySQL (``mysql:///db?unix_socket=/run/mysqld/mysqld.sock``).
    PostgreSQL's ``host``/``port`` leave ``params`` and become the host (libpq reads a host starting with
    ``/`` as a socket directory); MySQL's ``unix_socket`` stays for the backend, the host is a placeholder."""
    if backend == "postgres" and "host" in params:
        directory = params.pop("host")
        if not directory.startswith("/"):
            raise ConfigError(
                f"{scheme}:// URL option host={directory!r} must be a socket directory (an absolute path); "
                f"put a TCP host in the URL: {scheme}://host:port/db",
                backend=scheme,
            )
        port_s = params.pop("port", "")
        return directory, _port(port_s, scheme) if port_s else DEFAULT_PORTS[backend]
    if backend == "mysql" and params.get("unix_socket"):
        return "localhost", DEFAULT_PORTS[backend]
    how = {
        "postgres": " (or host=/socket/directory in the query)",
        "mysql": " (or unix_socket=/path/to/mysqld.sock in the query)",
    }.get(backend, "")
    raise ConfigError(f"{scheme}:// URL needs a host{how}", backend=scheme)


def _port(port_s: str, scheme: str) -> int:
    try:
        port = int(port_s)
    except ValueError:
        raise ConfigError(f"bad port {port_s!r} in {scheme}:// URL", backend=scheme) from None
    if not 0 < port < 65536:
        raise ConfigError(f"port {port} out of range in {scheme}:// URL", backend=scheme)
    return port


def _host_port(item: str, default_port: int, scheme: str) -> tuple[str, int]:
    item = item.strip()
    if item.startswith("["):  # [::1]:port
        host, _, rest = item[1:].partition("]")
        port_s = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_s = item.rpartition(":") if ":" in item else (item, "", "")
    if not host:
        raise ConfigError(f"empty host in {scheme}:// URL", backend=scheme)
    if not port_s:
        return host, default_port
    return host, _port(port_s, scheme)

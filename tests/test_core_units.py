"""Pure logic, no I/O: URLs and redaction, the grant rule, deadlines and backoff with an injected clock."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from distlock import ConfigError
from distlock._core import arbiter, timing
from distlock._core.arbiter import Held, Queued
from distlock._core.types import Mode
from distlock._core.validate import check_lease
from distlock._url import parse_url, redact

ROOT = Path(__file__).resolve().parent.parent


def test_generated_sync_code_is_current() -> None:
    r = subprocess.run([sys.executable, "scripts/gen_sync.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_gen_sync_converts_every_async_folder_and_refuses_copies_and_lone_seams(tmp_path: Path) -> None:
    """The generator's layout rules, on a tree of its own: a backend folder's ``_async/`` is converted (its
    import of the hand-kept ``_driver_async`` renamed), a source with no async code is refused (its twin would
    be a copy), a docstring-only ``__init__.py`` is not, and a hand-kept ``_x_async.py`` needs its ``_x_sync.py``."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "gen_sync.py").write_text((ROOT / "scripts" / "gen_sync.py").read_text())
    demo = tmp_path / "src" / "distlock" / "_backends" / "demo"
    (demo / "_async" / "inner").mkdir(parents=True)
    (tmp_path / "tests" / "_async").mkdir(parents=True)
    (demo / "_async" / "__init__.py").write_text(
        "from .. import _driver_async as drv\n\n\nasync def f() -> None:\n    await drv.call()\n"
    )
    (demo / "_async" / "plain.py").write_text("def g() -> int:\n    return 1\n")
    (demo / "_async" / "inner" / "__init__.py").write_text('"""Only a docstring."""\n')
    (demo / "_driver_async.py").write_text("async def call() -> None:\n    pass\n")
    gen = [sys.executable, str(tmp_path / "scripts" / "gen_sync.py")]
    subprocess.run(gen, capture_output=True, text=True, timeout=60)
    assert (
        (demo / "_sync" / "__init__.py")
        .read_text()
        .endswith("from .. import _driver_sync as drv\n\n\ndef f() -> None:\n    drv.call()\n")
    )
    r = subprocess.run([*gen, "--check"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "_backends/demo/_async/plain.py: has no async code" in r.stderr
    assert "_backends/demo/_driver_async.py: a hand-kept async module without _driver_sync.py" in r.stderr
    assert "inner/__init__.py" not in r.stderr and "_async/__init__.py" not in r.stderr
    (demo / "_async" / "plain.py").rename(demo / "plain.py")
    (demo / "_driver_sync.py").write_text("def call() -> None:\n    pass\n")
    subprocess.run(gen, capture_output=True, text=True, timeout=60)  # deletes the twin of the moved module
    r = subprocess.run([*gen, "--check"], capture_output=True, text=True, timeout=60)
    assert "_backends/demo" not in r.stderr, r.stderr


@pytest.mark.parametrize(
    ("url", "backend", "hosts", "path"),
    [
        ("sqlite:///rel/x.db", "sqlite", [], "rel/x.db"),
        ("sqlite:////abs/x.db", "sqlite", [], "/abs/x.db"),
        ("memory://", "memory", [], ""),
        ("redis://:pw@127.0.0.1:6390/2", "redis", [("127.0.0.1", 6390)], "/2"),
        ("redlock://a:1,b:2,c", "redlock", [("a", 1), ("b", 2), ("c", 6379)], ""),
        ("zk://h1:2181,h2/chroot", "zookeeper", [("h1", 2181), ("h2", 2181)], "/chroot"),
        ("etcds://[::1]:2379", "etcd", [("::1", 2379)], ""),
        ("mariadb://u:p@db/app", "mysql", [("db", 3306)], "/app"),
        ("postgres://u@db:5433/app", "postgres", [("db", 5433)], "/app"),
    ],
)
def test_parse_url(url: str, backend: str, hosts: list[tuple[str, int]], path: str) -> None:
    cfg = parse_url(url)
    assert (cfg.backend, cfg.hosts, cfg.path) == (backend, hosts, path)


@pytest.mark.parametrize(
    "url", ["", "nothing", "ftp://x", "redis://", "redis://h:0", "redis://h:99999", "redis://h:x", "sqlite://host/x.db"]
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_url(url)


def test_unknown_option_rejected_and_password_hidden() -> None:
    cfg = parse_url("redis://user:hunter2@h/0?bogus=1&password=zzz")
    assert "hunter2" not in repr(cfg) and "hunter2" not in cfg.redacted and "zzz" not in cfg.redacted
    assert cfg.password == "hunter2"
    with pytest.raises(ConfigError, match="bogus"):
        cfg.reject_unknown()
    assert redact("mysql://u:p%40ss@h/db") == "mysql://u:***@h/db"


def test_keyword_options_none_is_not_given_and_names_must_be_text() -> None:
    cfg = parse_url("mysql://h/db?table_prefix=app", {"table_prefix": None, "client_name": None})
    assert cfg.params["table_prefix"] == "app" and "client_name" not in cfg.params  # not the text "None"
    assert parse_url("mysql://h/db", {"connect_timeout": 2.5, "tls": True}).params == {
        "connect_timeout": "2.5", "tls": "true"
    }  # numbers and flags still become their text
    with pytest.raises(ConfigError, match=r"^table_prefix must be a str, not int"):
        parse_url("mysql://h/db", {"table_prefix": 42})


def test_default_url_is_the_host_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DISTLOCK_URL", raising=False)
    monkeypatch.setenv("DISTLOCK_HOME", str(tmp_path / "host"))
    assert parse_url(None).path == f"{tmp_path}/host/locks.db"
    monkeypatch.setenv("DISTLOCK_URL", "memory://")
    assert parse_url(None).backend == "memory"


def H(token: str, mode: Mode) -> Held:
    return Held(token, mode, 100.0)


def Q(token: str, mode: Mode, seq: int) -> Queued:
    return Queued(token, mode, seq, 100.0)


def test_grant_rule() -> None:
    may = arbiter.may_acquire
    E, R, W, S = Mode.EXCLUSIVE, Mode.READ, Mode.WRITE, Mode.SEMAPHORE
    assert may(E, "a", 1, False, [], [])
    assert not may(E, "a", 1, False, [H("b", E)], [])
    assert may(E, "a", 1, False, [H("a", E)], [])  # a retry after a lost reply
    assert may(R, "a", 1, False, [H("b", R)], [])
    assert not may(R, "a", 1, False, [H("b", R)], [Q("w", W, 1)])  # a waiting writer blocks new readers
    assert may(R, "a", 1, False, [H("b", R)], [Q("w", W, 5), Q("a", R, 2)])  # unless we queued first
    assert not may(W, "a", 1, False, [H("b", R)], [])
    assert may(S, "a", 2, False, [H("b", S)], [])
    assert not may(S, "a", 2, False, [H("b", S), H("c", S)], [])
    assert not may(S, "a", 2, True, [H("b", S)], [Q("x", S, 1), Q("a", S, 2)])  # fair: x is ahead
    assert not may(E, "a", 1, True, [], [Q("x", E, 1), Q("a", E, 2)])
    assert may(E, "a", 1, True, [], [Q("a", E, 1), Q("x", E, 2)])
    # a downgrade: the read of the write holder's owner, at once, whoever waits; no one else's write will do
    assert may(R, "r", 1, True, [H("w", W)], [Q("x", W, 1)], companion="w")
    assert not may(R, "r", 1, False, [H("w", W)], [], companion="other")
    assert not may(R, "r", 1, False, [H("w", W)], [])
    assert not may(W, "x", 1, False, [H("r", R)], [])  # and the read it took keeps writers out afterwards
    assert arbiter.live([Held("a", E, 5.0), Held("b", E, 50.0)], now=10.0) == [Held("b", E, 50.0)]
    assert arbiter.retry_after([Held("a", E, 15.0), Held("b", E, 12.0)], now=10.0) == 2.0


def test_deadline_and_backoff_with_injected_clock() -> None:
    d = timing.Deadline.after(5.0, now=100.0)
    assert d.remaining(now=102.0) == 3.0 and not d.expired(now=104.9) and d.expired(now=105.0)
    assert timing.Deadline.after(None, now=0).remaining(now=1e9) is None
    b = timing.Backoff(first=0.002, cap=0.05, rng=random.Random(1))
    delays = [b.next_delay() for _ in range(20)]
    assert all(0 < x <= 0.05 for x in delays) and max(delays) > 0.02
    b.reset()
    assert b.next_delay() <= 0.002
    assert timing.wait_slice(None, 0.01, None, 1.0) == 0.01
    assert timing.wait_slice(0.5, 0.01, 0.001, 1.0) == 0.001
    assert timing.validity(10.0, 1.0) == pytest.approx(10.0 - 1.0 - 0.102)


def test_the_lease_options_are_checked_lease_first_then_its_cap_then_the_timeout() -> None:
    assert check_lease(30, None) == (30.0, None, None)
    assert check_lease(2.5, 0, 60) == (2.5, 0.0, 60.0)
    with pytest.raises(ConfigError, match=r"^ttl must be") as err:
        check_lease(0, -1, 0, name="n", backend="memory")  # every one bad: the lease is named
    assert "lock 'n'" in str(err.value)
    with pytest.raises(ConfigError, match=r"^max_hold must be"):
        check_lease(30, -1, 0)
    with pytest.raises(ConfigError, match=r"^timeout must be"):
        check_lease(30, -1)


#: the pure modules of the backends' folders (``_backends/<name>/``): held to the same rule as ``_core``
PURE_BACKEND_MODULES = [
    "_backends.redis.keys",
    "_backends.redis.lua",
    "_backends.redis.lua.prelude",
    "_backends.redis.lua.locks",
    "_backends.redis.lua.admin",
    "_backends.redis.lua.latch",
    "_backends.redis.calls",
    "_backends.redis.waiters",
    "_backends.redis.remap",
    "_backends.etcd.keys",
    "_backends.etcd.guard",
    "_backends.etcd.records",
    "_backends.etcd.rule",
    "_backends.etcd.semaphore",
    "_backends.etcd.ops",
    "_backends.zookeeper.layout",
    "_backends.zookeeper.records",
    "_backends.sqlite.procs",
    "_backends.sql.stmt",
    "_backends.sql.names",
    "_backends.sql.dialects",
    "_backends.sql.lease",
    "_backends.sql.lease_tx",
    "_backends.sql.lease_autocommit",
    "_backends.sql.session",
    "_backends.sql.rowlock",
    "_backends.sql.lease_handover",
    "_backends.sql.lease_bell",
    "_backends.sql.latch",
    "_backends.redis.lua.barrier",
    "_backends.sql.barrier",
]


def test_the_core_is_pure_no_io_no_threads_no_drivers() -> None:
    """Every module of ``distlock._core``, and each backend's pure modules, import with the modules that do I/O
    or concurrency blocked: the layouts, scripts, grant rules and timing rules are plain functions of their
    inputs (docs/design.md)."""
    core = Path(arbiter.__file__).parent
    blocked = ["socket", "ssl", "select", "selectors", "sqlite3", "threading", "asyncio", "subprocess",
               "redis", "kazoo", "h11", "pymysql", "aiomysql", "psycopg", "urllib.request", "http.client"]  # fmt: skip
    modules = sorted("_core." + p.stem for p in core.glob("*.py") if p.stem != "__init__") + PURE_BACKEND_MODULES
    code = f"""
import sys, types
for name in {blocked!r}:
    sys.modules[name] = None  # an import of it raises ImportError
package = types.ModuleType("distlock")
package.__path__ = [{str(core.parent)!r}]  # the package without its __init__ (which starts the runtime)
sys.modules["distlock"] = package
import importlib
for name in {modules!r}:
    importlib.import_module("distlock." + name)
print("imported", len({modules!r}))
"""
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["imported", str(len(modules))]
    assert len(modules) >= 10


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("deploy", ["t" * 32, "lock", 30000, "1", "0", "host:1:thread-7", "5000", "", "", ""]),
        ("é{x}", ["tok", "write", 5, "hôst:2:task-ü"]),  # a name and an owner id that are not ASCII
        ("deploy", []),
    ],
)
def test_a_packed_script_call_is_byte_for_byte_what_redis_py_sends(name: str, args: list[str | int]) -> None:
    from redis.connection import Encoder, PythonRespSerializer

    from distlock._backends.redis import calls as redis_calls
    from distlock._backends.redis import keys as redis_keys
    from distlock._backends.redis import lua as redis_lua

    pack = PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode).pack
    for cluster in (False, True):
        keys = redis_keys.keys(name, cluster, redis_keys.NODE_COUNTER)
        theirs = pack("EVALSHA", redis_lua.SHA["acquire"], redis_keys.NKEYS, *keys, redis_keys.channel(name), *args)
        assert redis_calls.packed_call("acquire", name, *args, cluster=cluster) == b"".join(theirs)

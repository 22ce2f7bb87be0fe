"""The package as a user installs it: build the wheel, install it into a fresh venv with no extras, use the CLI;
then each backend extra alone (in a directory of its own on top of the bare venv) imports and connects.

Dependencies come from the package registry (pip's own configuration), held to the versions of the lock the
suite runs on (``DISTLOCK_TEST_DEPS``, set by scripts/test.sh: ``locked`` or ``lowest``; ``newest`` takes what
the index serves today), and the wheel is built from this checkout by the locked build backend. About a minute on
a warm pip cache.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import distlock
from distlock._dist import DIST_NAME

ROOT = Path(__file__).resolve().parent.parent
DRIVERS = ("redis", "kazoo", "h11", "httpx", "pymysql", "aiomysql", "psycopg")
#: extra -> the drivers it must bring (and the fixture of a server it connects to)
EXTRAS = {
    "redis": ("redis",),
    "zookeeper": ("kazoo",),
    "etcd": ("h11",),
    "mysql": ("pymysql", "aiomysql"),
    "postgres": ("psycopg",),
}


@dataclass
class BareEnv:
    venv: Path
    wheel: Path
    tmp: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def distlock(self) -> str:
        return str(self.venv / "bin" / "distlock")

    def env(self, extra_path: Path | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "DISTLOCK_"))}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["HOME"] = str(self.tmp)  # the default SQLite store goes under the state dir: keep it in here
        env["XDG_STATE_HOME"] = str(self.tmp / "state")
        env["DISTLOCK_HOME"] = str(self.tmp / "host")  # the host-wide default store, in here too
        if extra_path is not None:
            env["PYTHONPATH"] = str(extra_path)
        return env

    def run(self, *args: str, extra_path: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), capture_output=True, text=True, timeout=timeout, cwd=self.tmp, env=self.env(extra_path)
        )


#: the lock of this run's versions (scripts/setup.sh), None when the run takes the index's newest
LOCK = {"locked": "dev.txt", "lowest": "lowest.txt", "newest": None}[os.environ.get("DISTLOCK_TEST_DEPS", "locked")]


def _held(tmp: Path) -> list[str]:
    """pip's arguments that hold an install to the lock's versions: its pins as a constraints file (pip takes
    no hashes there; the versions are what matters for the test)."""
    if LOCK is None:
        return []
    lines = (ROOT / "requirements" / LOCK).read_text().splitlines()
    pins = [line.rstrip(" \\") for line in lines if re.match(r"^[A-Za-z0-9]", line)]
    constraints = tmp / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    return ["-c", str(constraints)]


def _pip(python: str, *args: str, timeout: float = 300) -> None:
    r = subprocess.run(
        [python, "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BareEnv]:
    tmp = tmp_path_factory.mktemp("bare")
    dist = tmp / "dist"
    isolation = ["--no-build-isolation"] if LOCK is not None else []  # the locked hatchling, else today's
    _pip(sys.executable, "wheel", "--no-deps", *isolation, "-w", str(dist), str(ROOT))
    (wheel,) = dist.glob("*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    _pip(str(venv / "bin" / "python"), "install", *_held(tmp), str(wheel))
    yield BareEnv(venv, wheel, tmp)


def test_wheel_metadata_name_version_license(bare: BareEnv) -> None:
    assert bare.wheel.name.startswith(f"{DIST_NAME.replace('-', '_')}-{distlock.__version__}-")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert meta["name"] == DIST_NAME and "version" in meta["dynamic"]
    assert "dev" not in meta["optional-dependencies"], "dev tools belong in a dependency group"
    r = bare.run(bare.python, "-c", "import importlib.metadata as m; d = m.distribution('" + DIST_NAME + "'); "
                 "print(d.version); print(d.metadata['License-Expression']); "
                 "print(any(str(f).endswith('LICENSE') for f in d.files))")  # fmt: skip
    assert r.stdout.split() == [distlock.__version__, "Apache-2.0", "True"], r.stderr


def test_wheel_ships_no_server_spawners_and_spawn_says_why(bare: BareEnv) -> None:
    """Test servers and fault tools live in the repository (tools/servers/); --url works from the wheel."""
    import zipfile

    wheel = zipfile.ZipFile(bare.wheel)
    assert not [n for n in wheel.namelist() if "/_servers/" in n or n.startswith("tests/")]
    # what only a server spawner says: the data-directory set-up of MariaDB, ZooKeeper's main class, etcd's peers
    spawner_words = ("mariadb-install-db", "QuorumPeerMain", "--initial-cluster")
    code = {n: wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".py")}
    assert not [n for n, text in code.items() if any(w in text for w in spawner_words)]
    r = bare.run(bare.distlock, "check", "--spawn", "redis", "--seconds", "1")
    assert r.returncode == 2 and "checkout" in r.stderr and "--url" in r.stderr, r.stdout + r.stderr


def test_bare_install_has_no_driver(bare: BareEnv) -> None:
    code = f"import importlib.util as u; print([m for m in {DRIVERS!r} if u.find_spec(m)])"
    assert bare.run(bare.python, "-c", code).stdout.strip() == "[]"


def test_bare_cli_help_version_and_module(bare: BareEnv) -> None:
    for args in ([bare.distlock, "--help"], [bare.python, "-m", "distlock", "--help"]):
        r = bare.run(*args)
        assert r.returncode == 0 and "run" in r.stdout and "hold" in r.stdout, r.stderr
    for cmd in ("run", "hold", "status", "list", "release", "demo", "bench", "check"):
        r = bare.run(bare.distlock, cmd, "--help")
        assert r.returncode == 0, (cmd, r.stderr)
    r = bare.run(bare.distlock, "--version")
    assert r.returncode == 0 and distlock.__version__ in r.stdout
    # importing the CLI (every command registered) pulls no backend driver
    code = f"import sys, distlock.cli; print(sorted(m for m in {DRIVERS!r} if m in sys.modules))"
    assert bare.run(bare.python, "-c", code).stdout.strip() == "[]"


def test_bare_demo_and_run_on_the_default_sqlite_store(bare: BareEnv) -> None:
    r = bare.run(bare.distlock, "demo", "--seconds", "1", "--workers", "2", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no lost update" in r.stdout
    r = bare.run(bare.distlock, "run", "bare-job", "--", "true")
    assert r.returncode == 0, r.stderr
    r = bare.run(bare.distlock, "run", "bare-job", "sh", "-c", 'echo "$DISTLOCK_NAME $DISTLOCK_FENCE"')
    assert r.returncode == 0 and r.stdout.split()[0] == "bare-job" and int(r.stdout.split()[1]) >= 1
    assert (bare.tmp / "host" / "locks.db").exists()


def test_bare_redis_url_says_which_extra_to_install(bare: BareEnv) -> None:
    r = bare.run(bare.distlock, "--url", "redis://127.0.0.1:1/0", "status", "x")
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert re.search(r"pip install '[\w-]+\[redis\]'", r.stderr), r.stderr


def test_bare_install_hint_names_the_distribution(bare: BareEnv) -> None:
    r = bare.run(bare.distlock, "--url", "redis://127.0.0.1:1/0", "status", "x")
    assert f"pip install '{DIST_NAME}[redis]'" in r.stderr, r.stderr


CONNECT = """
import sys, importlib.util
import distlock
others = [m for m in {others!r} if importlib.util.find_spec(m)]
assert not others, f"the extra pulled other backends' drivers: {{others}}"
with distlock.connect(sys.argv[1]) as store:
    with store.lock("bare-extra-" + {extra!r}, ttl=10, timeout=30) as lock:
        print("fence", lock.fence)
"""


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_extra_alone_imports_and_connects(bare: BareEnv, extra: str, request: pytest.FixtureRequest) -> None:
    target = bare.tmp / f"extra-{extra}"
    if not target.exists():
        wheel = f"{DIST_NAME}[{extra}] @ {bare.wheel.as_uri()}"
        _pip(bare.python, "install", *_held(bare.tmp), "--target", str(target), wheel)
    url: str = request.getfixturevalue(f"{extra}_url")
    others = tuple(m for m in DRIVERS if m not in EXTRAS[extra])
    code = CONNECT.format(others=others, extra=extra)
    r = bare.run(bare.python, "-c", code, url, extra_path=target, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("fence "), r.stdout + r.stderr

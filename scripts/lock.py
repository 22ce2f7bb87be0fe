"""The locked test environments: compile them, check them against pyproject.toml, print what one holds.

The package publishes ranges (pyproject.toml: its dependencies and extras; a library must not pin its users).
What the tests run on is pinned here, in two requirement files with a hash for every file they may install:

* ``requirements/dev.txt`` -- the newest versions the ranges admitted on the day of the last refresh: every extra,
  the ``dev`` dependency group (tests, lint, types, docs, build, uv). ``scripts/setup.sh`` installs exactly this
  into ``.venv``; it is what CI's main pass and every developer run on. Resolved for every Python the package
  supports (a marker picks the right pin where they differ).
* ``requirements/lowest.txt`` -- the lowest version of every dependency the package names directly (the ranges'
  low ends, each extra's drivers included), with the ``test`` group, for the Python CI runs. CI runs the driver
  seams on it (``scripts/test.sh --deps lowest``).

Usage (from the repository's root, with the venv's python, which has uv):

    .venv/bin/python scripts/lock.py            # refresh both locks from the index (then run the newest pass,
                                                # RELEASING.md)
    .venv/bin/python scripts/lock.py --check    # offline: every range in pyproject.toml has a pin it admits
    .venv/bin/python scripts/lock.py --newest F # today's newest versions into F (no hashes): --deps newest
    .venv/bin/python scripts/lock.py --versions # the versions this venv runs (scripts/test.sh prints them)

Why requirement files with hashes (uv's ``pip compile``) rather than a ``uv.lock``: pip installs them as they
are (``--require-hashes``, no other tool needed at install time), they name no index and no download address,
and the same tool compiles the lowest resolution (``--resolution lowest-direct``), which a project lock cannot hold
beside the newest one.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT / "requirements" / "dev.txt"
LOWEST = ROOT / "requirements" / "lowest.txt"
#: the Python the lowest lock is resolved for: the lowest the package supports (what CI's machine runs)
LOWEST_PYTHON = "3.11"
REFRESH = "python scripts/lock.py"


def _uv() -> str:
    here = Path(sys.executable).parent / "uv"
    found = str(here) if here.exists() else shutil.which("uv")
    if found is None:
        sys.exit("uv is not installed: run scripts/setup.sh first (the dev group brings it) or pip install uv")
    return found


def _compile(out: Path, *args: str) -> None:
    cmd = [_uv(), "pip", "compile", "pyproject.toml", "--quiet", "--all-extras", "-o", str(out), *args]
    subprocess.run(cmd, cwd=ROOT, check=True)


def refresh() -> None:
    DEV.parent.mkdir(exist_ok=True)
    # --upgrade: the newest the ranges admit today (without it, uv keeps the pins of the file it overwrites)
    common = ("--generate-hashes", "--upgrade", "--custom-compile-command", REFRESH)
    _compile(DEV, "--group", "dev", "--universal", *common)
    _compile(
        LOWEST,
        *("--group", "test", "--group", "build"),
        *("--resolution", "lowest-direct", "--python-version", LOWEST_PYTHON),
        *common,
    )
    print(f"wrote {DEV.relative_to(ROOT)} and {LOWEST.relative_to(ROOT)}")


def newest(out: Path, python: str | None) -> None:
    """Today's newest resolution for ``python`` (default: the one running this) into ``out``."""
    _compile(out, "--group", "dev", "--upgrade", "--no-header", "--no-annotate", "--python", python or sys.executable)


def _pins(lock: Path) -> dict[str, list[tuple[str, str]]]:
    """name -> [(version, environment marker)] of a compiled requirement file (a universal one may pin a package
    twice, once per range of Python versions)."""
    pins: dict[str, list[tuple[str, str]]] = {}
    for line in lock.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)\s*(?:;\s*([^\\]*?))?\s*\\?$", line)
        if m:
            pins.setdefault(_norm(m.group(1)), []).append((m.group(2), (m.group(3) or "").strip()))
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wanted(groups: list[str]) -> list[str]:
    """The requirements of the project's dependencies, every extra, and the given dependency groups (includes
    resolved), as written in pyproject.toml; the project's own extras (``all``) are left out."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = project["dependency-groups"]

    def group(name: str) -> list[str]:
        out: list[str] = []
        for item in declared[name]:
            out.extend(group(item["include-group"]) if isinstance(item, dict) else [item])
        return out

    reqs = list(project["project"]["dependencies"])
    for extra in project["project"]["optional-dependencies"].values():
        reqs.extend(extra)
    for name in groups:
        reqs.extend(group(name))
    own = _norm(project["project"]["name"])
    return [r for r in reqs if _norm(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) != own]


def check() -> int:
    """Offline: each lock pins every requirement pyproject.toml names, at a version its range admits. A range
    changed without a refresh (a new dependency, a raised bound) fails here with what to run."""
    from packaging.requirements import Requirement

    problems: list[str] = []
    for lock, groups in ((DEV, ["dev"]), (LOWEST, ["test", "build"])):
        if not lock.exists():
            problems.append(f"{lock.relative_to(ROOT)} is missing")
            continue
        pins = _pins(lock)
        for raw in _wanted(groups):
            req = Requirement(raw)
            found = pins.get(_norm(req.name))
            if not found:
                problems.append(f"{lock.relative_to(ROOT)}: {req.name} is not pinned (pyproject.toml: {raw})")
                continue
            bad = [v for v, _ in found if not req.specifier.contains(v, prereleases=True)]
            if bad:
                problems.append(f"{lock.relative_to(ROOT)}: {req.name}=={bad[0]} is outside pyproject.toml's {raw}")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"the locks are stale: refresh them with `.venv/bin/{REFRESH}` (RELEASING.md)", file=sys.stderr)
        return 1
    return 0


#: the packages whose versions a test run prints first (the package's direct dependencies and the test runner)
SHOWN = (
    "click", "rich", "redis", "hiredis", "kazoo", "h11", "PyMySQL", "aiomysql", "psycopg", "matplotlib",
    "opentelemetry-api", "uvloop", "pytest", "pytest-asyncio",
)


def versions() -> str:
    """One line: the running Python and the installed version of each package of :data:`SHOWN`."""
    from importlib.metadata import PackageNotFoundError, version

    def one(name: str) -> str:
        try:
            return f"{name} {version(name)}"
        except PackageNotFoundError:
            return f"{name} -"

    return ", ".join([f"Python {sys.version.split()[0]}", *map(one, SHOWN)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="offline: do the locks match pyproject.toml's ranges?")
    parser.add_argument("--newest", type=Path, metavar="FILE", help="compile today's newest versions into FILE")
    parser.add_argument("--python", help="with --newest: the interpreter to resolve for")
    parser.add_argument("--versions", action="store_true", help="print the versions this Python runs with")
    args = parser.parse_args()
    if args.versions:
        print(versions())
    if args.check:
        return check()
    if args.versions:
        return 0
    if args.newest is not None:
        newest(args.newest, args.python)
        return 0
    refresh()
    return check()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Generate the sync code from the async code: every ``_async/`` folder -> its ``_sync/`` twin (package and tests).

The async side is the one source of truth (psycopg and httpcore do the same). The sources are the ``.py`` files
under any folder named ``_async`` in ``src/distlock`` and ``tests``: the lock layer (``src/distlock/_async/``),
each backend's folder (``src/distlock/_backends/<name>/_async/``) and the tests (``tests/_async/``); each one's
twin is the same path with that folder named ``_sync``. Everything outside those folders is never written:
that is where a backend's hand-kept seam pair lives (``_backends/<name>/_driver_async.py`` /
``_driver_sync.py``, next to the ``_async/`` folder that imports it), and where a module with no async code
lives, once, imported by both sides. The transformation is one rule, applied token by token with
tokenize-rt's public API (the tokens keep their exact spacing):

* ``async`` and ``await`` are dropped, with the whitespace after them;
* a name (or a string holding just a name) is renamed: first by ``RENAMES``; else a private name ending in
  ``_async`` ends in ``_sync`` (the folders themselves, and the hand-kept pairs: ``_rt_async`` ->
  ``_rt_sync``, ``_driver_async`` -> ``_driver_sync``); else a class ``AsyncX`` becomes ``SyncX``.

``--check`` fails if a committed ``_sync`` file differs from what it would generate, if a ``_sync`` file has no
async source, if a generated file is byte-for-byte its source (a module without async code lives once,
outside ``_async/``; an ``__init__.py`` that is only a docstring is exempt), if a hand-kept ``_x_async.py``
has no ``_x_sync.py`` next to it, or if an entry of ``RENAMES`` or ``COPIES_PENDING`` is used nowhere (a
stale entry hides a missing one); the test suite runs it, so the two sides cannot drift. A driver pair for a
new backend needs no entry here: name its modules ``_driver_async.py`` / ``_driver_sync.py`` in the
backend's folder.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import sys
from pathlib import Path

from tokenize_rt import Token, src_to_tokens, tokens_to_src

ROOT = Path(__file__).resolve().parent.parent
TREES = [ROOT / "src" / "distlock", ROOT / "tests"]

#: names whose sync spelling the general rules do not give
RENAMES = {
    # the standard library's async spellings
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "asynccontextmanager": "contextmanager",
    "AsyncIterator": "Iterator",
    "aclose": "close",
    # the public API: the sync names carry no prefix
    "AsyncStore": "Store",
    "AsyncLock": "Lock",
    "AsyncSemaphore": "Semaphore",
    "AsyncReadWriteLock": "ReadWriteLock",
    "AsyncMultiLock": "MultiLock",
    "AsyncElection": "Election",
    "AsyncLatch": "Latch",
    "AsyncBarrier": "Barrier",
    "AsyncDoubleBarrier": "DoubleBarrier",
    "AsyncNativeDoubleBarrier": "NativeDoubleBarrier",
    "AsyncOnce": "Once",
    "AsyncRan": "Ran",
    "AsyncRanJob": "RanJob",
    "AsyncRanSkip": "RanSkip",
    "AsyncHeldLock": "HeldLock",
    "AsyncHeldSemaphore": "HeldSemaphore",
    "AsyncHeldMultiLock": "HeldMultiLock",
    "connect_async": "connect",
    # the tests
    "async_store": "sync_store",
    "concurrency_async": "concurrency_sync",
}


#: modules with no async code that still sit in an ``_async/`` folder, until their backend's folder moves to
#: the layout above (each one must still be a copy: a stale entry fails the check)
COPIES_PENDING: set[str] = set()


def _under(path: Path, tree: Path, folder: str) -> bool:
    """Whether ``path`` (a file of ``tree``) is inside a folder named ``folder``."""
    return folder in path.relative_to(tree).parent.parts


def sources() -> list[Path]:
    return sorted(p for tree in TREES for p in tree.rglob("*.py") if _under(p, tree, "_async"))


def generated() -> list[Path]:
    return sorted(p for tree in TREES for p in tree.rglob("*.py") if _under(p, tree, "_sync"))


def pairs() -> list[str]:
    """The hand-kept ``_x_async.py`` modules (outside the ``_async/`` folders) whose ``_x_sync.py`` is missing."""
    missing = []
    for tree in TREES:
        for p in tree.rglob("_*_async.py"):
            if not _under(p, tree, "_async") and not _under(p, tree, "_sync"):
                twin = p.with_name(p.name[: -len("_async.py")] + "_sync.py")
                if not twin.exists():
                    missing.append(f"{p.relative_to(ROOT)}: a hand-kept async module without {twin.name} next to it")
    return missing


def docstring_only(src: Path) -> bool:
    """An ``__init__.py`` whose body is at most a docstring (and ``from __future__`` imports)."""
    body = ast.parse(src.read_text()).body
    return src.name == "__init__.py" and all(
        (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str))
        or (isinstance(n, ast.ImportFrom) and n.module == "__future__")
        for n in body
    )


def target(src: Path) -> Path:
    parts = list(src.parts)
    i = len(parts) - 1 - parts[::-1].index("_async")
    parts[i] = "_sync"
    return Path(*parts)


def rename(name: str, used: set[str]) -> str:
    if name in RENAMES:
        used.add(name)
        return RENAMES[name]
    if name.startswith("_") and name.endswith("_async"):  # not kazoo's get_async & co.
        return name[: -len("_async")] + "_sync"
    if len(name) > 5 and name.startswith("Async") and name[5].isupper():
        return "Sync" + name[5:]
    return name


def transform(tokens: list[Token], used: set[str]) -> list[Token]:
    out: list[Token] = []
    skip_space = False
    for token in tokens:
        if skip_space:
            skip_space = False
            if token.name == "UNIMPORTANT_WS":
                continue
        if token.name == "NAME" and token.src in ("async", "await"):
            skip_space = True
            continue
        if token.name == "NAME":
            token = token._replace(src=rename(token.src, used))
        elif token.name == "STRING" and len(token.src) >= 2 and token.src[0] == token.src[-1]:
            token = token._replace(src=token.src[0] + rename(token.src[1:-1], used) + token.src[-1])
        out.append(token)
    return out


def generate(src: Path, used: set[str]) -> str:
    body = tokens_to_src(transform(src_to_tokens(src.read_text()), used))
    header = f"# GENERATED from {src.relative_to(ROOT)} by scripts/gen_sync.py: edit that file, not this one.\n"
    return header + body


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed sync code is out of date")
    args = ap.parse_args()
    stale: list[str] = []
    expected: set[Path] = set()
    used: set[str] = set()
    copies: set[str] = set()
    for src in sources():
        out = target(src)
        expected.add(out)
        text = generate(src, used)
        if text.split("\n", 1)[1] == src.read_text() and not docstring_only(src):
            name = str(src.relative_to(ROOT))
            copies.add(name)
            if name not in COPIES_PENDING:
                stale.append(f"{name}: has no async code, so its sync twin would be a copy (move it out of _async/)")
        if args.check:
            if not out.exists() or out.read_text() != text:
                old = out.read_text().splitlines() if out.exists() else []
                diff = difflib.unified_diff(old, text.splitlines(), str(out), "generated", lineterm="", n=1)
                stale.append("\n".join(list(diff)[:40]))
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
    for extra in generated():
        if extra not in expected:
            if args.check:
                stale.append(f"{extra}: no async source (delete it)")
            else:
                extra.unlink()
    stale.extend(pairs())
    unused = sorted(set(RENAMES) - used)
    if unused:
        stale.append(f"RENAMES entries used nowhere (delete them): {', '.join(unused)}")
    done = sorted(COPIES_PENDING - copies)
    if done:
        stale.append(f"COPIES_PENDING entries that are no copy (delete them): {', '.join(done)}")
    if stale:
        print("sync code is out of date (run: python scripts/gen_sync.py) or misplaced:", file=sys.stderr)
        print("\n".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Generate the sync code from the async code: ``_async/`` -> ``_sync/`` (package and tests).

The async side is the one source of truth (psycopg and httpcore do the same). The transformation is one rule,
applied token by token with tokenize-rt's public API (the tokens keep their exact spacing):

* ``async`` and ``await`` are dropped, with the whitespace after them;
* a name (or a string holding just a name) is renamed: first by ``RENAMES``; else a private name ending in
  ``_async`` ends in ``_sync`` (the hand-kept runtime and driver pairs: ``_rt_async`` -> ``_rt_sync``); else a
  class ``AsyncX`` becomes ``SyncX``.

``--check`` fails if a committed ``_sync`` file differs from what it would generate, if a ``_sync`` file has no
async source, or if an entry of ``RENAMES`` is used nowhere (a stale entry hides a missing one); the test suite
runs it, so the two sides cannot drift. A driver pair for a new backend needs no entry here: name its modules
``_<name>_async.py`` / ``_<name>_sync.py``.
"""

from __future__ import annotations

import argparse
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
    "AsyncOnce": "Once",
    "AsyncRan": "Ran",
    "AsyncHeldLock": "HeldLock",
    "AsyncHeldSemaphore": "HeldSemaphore",
    "AsyncHeldMultiLock": "HeldMultiLock",
    "connect_async": "connect",
    # the tests
    "async_store": "sync_store",
    "concurrency_async": "concurrency_sync",
}


def sources() -> list[Path]:
    return sorted(p for tree in TREES for p in (tree / "_async").rglob("*.py"))


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
    for src in sources():
        out = target(src)
        expected.add(out)
        text = generate(src, used)
        if args.check:
            if not out.exists() or out.read_text() != text:
                old = out.read_text().splitlines() if out.exists() else []
                diff = difflib.unified_diff(old, text.splitlines(), str(out), "generated", lineterm="", n=1)
                stale.append("\n".join(list(diff)[:40]))
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
    for tree in TREES:
        for extra in (tree / "_sync").rglob("*.py") if (tree / "_sync").exists() else []:
            if extra not in expected:
                if args.check:
                    stale.append(f"{extra}: no async source (delete it)")
                else:
                    extra.unlink()
    unused = sorted(set(RENAMES) - used)
    if unused:
        stale.append(f"RENAMES entries used nowhere (delete them): {', '.join(unused)}")
    if stale:
        print("sync code is out of date; run: python scripts/gen_sync.py", file=sys.stderr)
        print("\n".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

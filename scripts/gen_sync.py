#!/usr/bin/env python3
"""Generate the sync code from the async code: ``_async/`` -> ``_sync/`` (package and tests).

The async side is the one source of truth (STYLE.md: httpcore and psycopg do the same). The
transformation is token based (the ``unasync`` library): ``async``/``await`` are dropped and the names
below are swapped. ``--check`` fails if a committed ``_sync`` file differs from what it would generate;
the test suite runs it, so the two sides cannot drift.

To add a name: put it in REPLACEMENTS. Driver modules differ between the sides, so async code imports
them under a name listed here (for example ``redis_asyncio`` -> ``redis_sync``, both defined in a small
module of each side's imports).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

import unasync

ROOT = Path(__file__).resolve().parent.parent
TREES = [ROOT / "src" / "distlock", ROOT / "tests"]

REPLACEMENTS = {
    "_rt_async": "_rt_sync",
    "_redis_async": "_redis_sync",
    "AsyncStore": "Store",
    "AsyncLock": "Lock",
    "AsyncSemaphore": "Semaphore",
    "AsyncReadWriteLock": "ReadWriteLock",
    "AsyncMultiLock": "MultiLock",
    "AsyncIterator": "Iterator",
    "AsyncIterable": "Iterable",
    "aclose": "close",
    "connect_async": "connect",
    "async_store": "sync_store",
    "redis_asyncio": "redis_sync",
    "_pg_async": "_pg_sync",
    "_my_async": "_my_sync",
    "concurrency_async": "concurrency_sync",
    "anext": "next",
    "aiter": "iter",
    "_etcd_async": "_etcd_sync",
}


def sources() -> list[Path]:
    return sorted(p for tree in TREES for p in (tree / "_async").rglob("*.py"))


def target(src: Path) -> Path:
    parts = list(src.parts)
    i = len(parts) - 1 - parts[::-1].index("_async")
    parts[i] = "_sync"
    return Path(*parts)


def generate(src: Path) -> str:
    rule = unasync.Rule("/_async/", "/_sync/", additional_replacements=REPLACEMENTS)
    tokens = unasync.tokenize_rt.src_to_tokens(src.read_text())
    body = unasync.tokenize_rt.tokens_to_src(rule._unasync_tokens(tokens))
    header = f"# GENERATED from {src.relative_to(ROOT)} by scripts/gen_sync.py: edit that file, not this one.\n"
    return header + body


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the committed sync code is out of date")
    args = ap.parse_args()
    stale: list[str] = []
    expected: set[Path] = set()
    for src in sources():
        out = target(src)
        expected.add(out)
        text = generate(src)
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
    if stale:
        print("sync code is out of date; run: python scripts/gen_sync.py", file=sys.stderr)
        print("\n".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

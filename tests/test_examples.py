"""The runnable examples in examples/ work (they are part of the docs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_fencing_example_rejects_the_stale_writer(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # where the example makes its work directory
    r = subprocess.run(
        [sys.executable, "examples/fencing.py"], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fence 1: accepted=False" in r.stdout and "resource value: 'fresh'" in r.stdout
    assert list(tmp_path.iterdir()) == [], "the example left its work directory behind"


def test_demo_passes_its_own_checks(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "distlock", "--url", f"sqlite:///{tmp_path}/d.db", "demo", "--workers", "3", "--seconds", "1.5"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no lost update" in r.stdout and "strictly increasing" in r.stdout


def _example(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, f"examples/{script}", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_cron_example_runs_the_job_once_across_hosts() -> None:
    r = _example("cron_once.py", "--hosts", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "the job ran 1 time(s) across 4 hosts" in r.stdout
    assert r.stdout.count("skipped") == 3
    # the built-in forms, side by side on one name: the decorator and the command line
    assert r.stdout.count("(@store.at_most_once)") == 2 and r.stdout.count("(distlock run --once)") == 2


def test_payment_example_charges_once_for_concurrent_requests() -> None:
    r = _example("payment_handler.py", "--requests", "6")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "order 42 was charged 1 time(s) for 6 requests" in r.stdout
    assert r.stdout.count("201 paid") == 1


def test_worker_pool_example_never_exceeds_the_permits() -> None:
    r = _example("worker_pool.py", "--workers", "5", "--calls", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    peak = int(r.stdout.split("at most ")[1].split()[0])
    assert 1 <= peak <= 3 and "20 calls by 5 workers" in r.stdout


def test_leader_example_hands_over_after_a_sigkill_with_increasing_terms() -> None:
    r = _example("leader.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "killed instance-0 with SIGKILL" in r.stdout
    assert "3 leaders" in r.stdout and "strictly increasing = True" in r.stdout
    assert "refused" not in r.stdout


def test_async_web_example_charges_once_and_fences_out_the_frozen_instances_write() -> None:
    r = _example("payment_server_async.py", "--requests", "6")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "order 42 was charged 1 time(s) for 6 requests" in r.stdout and r.stdout.count("201 paid") == 2
    assert "order 7, instance B: 201 paid" in r.stdout
    assert "order 7, instance A: 409 conflict: a newer holder wrote the order" in r.stdout
    fence_b = int(r.stdout.split("order 7, instance B: 201 paid (")[1].split("fence ")[1].split(")")[0])
    assert f"order 7 row: paid, charge ch_2_500, fence {fence_b}" in r.stdout  # B's write stands


# What the Python blocks of the README and docs/*.md take as given: ``...`` stands for the reader's own code. Every
# block is checked as a module of its own: this header, its file's givens (GIVEN), then the block.
GIVEN_HEADER = """\
# mypy: disable-error-code="empty-body"
from __future__ import annotations

import asyncio

import distlock

"""
STORE = """\
store: distlock.Store
url: str
"""
CHARGE = """\
customer: str


def charge(customer: str, *, fence: int) -> None: ...
async def charge_async(customer: str, *, fence: int) -> None: ...
"""
BATCHES = """\
import logging
from collections.abc import Iterator

log: logging.Logger


def batches() -> Iterator[bytes]: ...
"""
README = """\
import sqlite3
import threading

db: sqlite3.Connection


def run_scheduler(term: int | None, stop: threading.Event) -> None: ...
"""
ELECTION = """\
import threading


def run_one_round(term: int | None) -> None: ...
def serve(term: int | None, stop: threading.Event) -> None: ...
"""
EXAMPLES = """\
import sqlite3
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any

import redis

from distlock import fencing
from distlock._sync.locks import HeldLock  # what ``with store.lock(...) as lock`` gives: its fence is an int

lock: HeldLock
db: sqlite3.Connection
redis_client: redis.Redis
value: str
me: str
body: bytes
jobs: list[str]
TTL = 30.0
WAIT = 5.0


class Ledger:
    def record(self, term: int | None, text: str) -> bool: ...


ledger: Ledger


def work() -> str: ...
def report_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]: ...
def already_paid(order_id: int) -> bool: ...
def charge_card(order_id: int, amount: int) -> str: ...
def mark_paid(order_id: int, charge: str, *, fence: int) -> bool: ...
async def charge_and_write(order_id: int, fence: int, lost: asyncio.Event) -> tuple[int, str]: ...
def call_partner_api(job: str) -> None: ...
"""
GETTING_STARTED = """\
import sqlite3

import redis

conn: sqlite3.Connection
redis_client: redis.Redis
data: bytes
fence: int


def work() -> None: ...
def process(batch: bytes) -> None: ...
def export(batch: bytes) -> None: ...
def call_payment_provider() -> None: ...
async def call_payment_provider_async() -> None: ...
"""
OPERATIONS = """\
def write(batch: bytes, *, fence: int) -> None: ...
def charge(*, fence: int) -> None: ...
"""
REDIS = """\
import redis

client: redis.Redis
new_value: str
"""
GIVEN = {
    "README.md": (STORE, README),
    "docs/election.md": (STORE, ELECTION),
    "docs/etcd.md": (STORE,),
    "docs/examples.md": (STORE, EXAMPLES),
    "docs/getting-started.md": (STORE, CHARGE, BATCHES, GETTING_STARTED),
    "docs/index.md": (CHARGE,),
    "docs/operations.md": (STORE, BATCHES, OPERATIONS),
    "docs/redis.md": (STORE, REDIS),
    "docs/sql.md": ("def write_report(*, fence: int) -> None: ...\n",),
    "docs/zookeeper.md": ("def do_work(*, fence: int) -> None: ...\n",),
}
# A block that is not meant to run (a signature, an error's text) says so right before its fence, visibly:
NOT_CHECKED = re.compile(r"<!-- not type-checked: \S.*-->")
MAX_NOT_CHECKED = 3  # so that excluding a block stays the exception


def python_blocks(path: Path) -> Iterator[tuple[int, str, bool]]:
    """Each ``python`` fenced block of a Markdown file: the line its code starts on, the code, and whether the last
    non-blank line before its fence marks it as not type-checked."""
    text = path.read_text()
    for m in re.finditer(r"^( *)```python(?: [^\n]*)?\n(.*?)^\1```", text, re.M | re.S):
        before = text[: m.start()].rstrip("\n").rpartition("\n")[2]
        yield text.count("\n", 0, m.start(2)) + 1, textwrap.dedent(m.group(2)), bool(NOT_CHECKED.search(before))


def test_every_example_and_every_python_block_of_the_readme_and_docs_type_check_with_mypy_strict(
    tmp_path: Path,
) -> None:
    snippets: dict[str, tuple[str, int]] = {}  # snippet file -> (Markdown file, its line minus the snippet's)
    skipped = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        name = str(doc.relative_to(ROOT))
        prelude = "".join((GIVEN_HEADER, *GIVEN.get(name, ()), "\n"))
        for line, code, not_checked in python_blocks(doc):
            if not_checked:
                skipped.append(f"{name}:{line}")
                continue
            module = re.sub(r"\W", "_", f"{doc.stem}_{line}")
            (tmp_path / f"{module}.py").write_text(prelude + code)
            snippets[f"{module}.py"] = (name, line - 1 - prelude.count("\n"))
    assert len(snippets) >= 45 and sum(n == "README.md" for n, _ in snippets.values()) >= 3
    assert set(GIVEN) <= {n for n, _ in snippets.values()}, "GIVEN names a file that has no checked block"
    assert len(skipped) <= MAX_NOT_CHECKED, f"more blocks are marked not type-checked than before: {skipped}"
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert len(examples) >= 6
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
         *map(str, examples), *snippets],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip

    def in_the_doc(m: re.Match[str]) -> str:  # a snippet's line as the Markdown file's (the prelude's: before it)
        doc, offset = snippets[m.group(1)]
        return f"{doc}:{int(m.group(2)) + offset}:"

    report = re.sub(r"^(\S+\.py):(\d+):", lambda m: in_the_doc(m) if m.group(1) in snippets else m.group(0),
                    checked.stdout, flags=re.M)  # fmt: skip
    assert checked.returncode == 0, report + checked.stderr


def test_fenced_sinks_example_refuses_the_stale_holder_everywhere(redis_url: str) -> None:
    r = _example("fenced_sinks.py", redis_url)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "refused by: ['sql', 'file', 'redis']" in r.stdout and "sql: 'fresh', file: 'fresh'" in r.stdout


def test_fenced_http_example_answers_the_stale_caller_409_on_the_other_instance() -> None:
    r = _example("fenced_http.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "through instance B: 200" in r.stdout and "through instance A: 409" in r.stdout
    assert "stored report: 'fresh'" in r.stdout

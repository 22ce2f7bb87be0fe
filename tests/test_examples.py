"""The runnable examples in examples/ work (they are part of the docs)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
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


# What the README's snippets take as given (``...`` stands for the reader's own code).
README_GIVEN = """\
# mypy: disable-error-code="empty-body"
from __future__ import annotations

import sqlite3
import threading

import distlock

store: distlock.Store
db: sqlite3.Connection


def run_scheduler(term: int | None, stop: threading.Event) -> None: ...


"""


def test_every_example_and_the_readmes_python_type_check_with_mypy_strict(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = [textwrap.dedent(code) for _, code in re.findall(r"^( *)```python\n(.*?)^\1```", readme, re.M | re.S)]
    assert len(blocks) >= 3
    snippets = []
    for i, code in enumerate(blocks):
        snippets.append(tmp_path / f"readme_{i}.py")
        snippets[-1].write_text(README_GIVEN + code)
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert len(examples) >= 6
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(tmp_path / "cache"),
         *map(str, examples), *map(str, snippets)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_fenced_sinks_example_refuses_the_stale_holder_everywhere(redis_url: str) -> None:
    r = _example("fenced_sinks.py", redis_url)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "refused by: ['sql', 'file', 'redis']" in r.stdout and "sql: 'fresh', file: 'fresh'" in r.stdout


def test_fenced_http_example_answers_the_stale_caller_409_on_the_other_instance() -> None:
    r = _example("fenced_http.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "through instance B: 200" in r.stdout and "through instance A: 409" in r.stdout
    assert "stored report: 'fresh'" in r.stdout

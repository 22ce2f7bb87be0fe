"""The runnable examples in examples/ work (they are part of the docs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_fencing_example_rejects_the_stale_writer() -> None:
    r = subprocess.run([sys.executable, "examples/fencing.py"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "fence 1: accepted=False" in r.stdout and "resource value: 'fresh'" in r.stdout


def test_demo_passes_its_own_checks(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "distlock", "--url", f"sqlite:///{tmp_path}/d.db", "demo", "--workers", "3", "--seconds", "1.5"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no lost update" in r.stdout and "strictly increasing" in r.stdout

"""The spin models of docs/models/ that guard protocols still being changed: each row runs one variant of one
model through ``docs/models/check.sh`` (spin, then pan) and expects the result its header's table states. The
other models take minutes and gigabytes each; ``docs/models/check.sh`` runs every one by hand."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

MODELS = Path(__file__).resolve().parent.parent / "docs" / "models"

pytestmark = pytest.mark.skipif(
    shutil.which("spin") is None or shutil.which("gcc") is None, reason="spin and gcc are needed"
)


@pytest.mark.parametrize(
    ("model", "flags", "expected"),
    [
        ("rwlock_downgrade.pml", [], "holds"),  # ZooKeeper and etcd as they run
        ("rwlock_downgrade.pml", ["-DNO_KEEP"], "VIOLATED"),  # the kept write node is what keeps writers out
        ("rwlock_downgrade.pml", ["-DLAPSE", "-DTIED"], "holds"),  # etcd: the write's lease runs out
        ("barrier_trip.pml", [], "holds"),
    ],
)
def test_model(model: str, flags: list[str], expected: str) -> None:
    # check.sh runs a table line when given flags; "(today)" is the model with none: pass a no-op define
    args = [str(MODELS / "check.sh"), str(MODELS / model), *(flags or ["-DAS_TODAY"])]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert out.stderr == "", out.stderr
    assert expected in out.stdout.split(), out.stdout

"""The spin models of docs/models/: each row runs one variant of one model through ``docs/models/check.sh`` (spin,
then pan) and expects the result its header's table states: every model as the code runs it (holds), and for
most one variant that breaks it (VIOLATED: the check can fail). The slowest variants (tens of seconds, up to
gigabytes) are left to ``docs/models/check.sh``, which runs every table line by hand."""

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
        # each protocol model as the code runs it, and one variant its table says breaks it (the check can fail)
        ("etcd_semaphore_terms.pml", [], "holds"),
        ("etcd_semaphore_terms.pml", ["-DNO_QUIET"], "VIOLATED"),  # a resize that misses a newcomer's record
        ("fence_counter.pml", ["-DCLOCK", "-DWIPE", "-DFAILOVER", "-DROLLBACK"], "holds"),  # fences follow the clock
        ("fence_counter.pml", ["-DWIPE"], "VIOLATED"),  # a counter that only counts repeats a fence after a wipe
        ("redlock_fence.pml", [], "holds"),
        ("redlock_fence.pml", ["-DWIPES", "-DRESEED_ANY"], "VIOLATED"),
        ("redis_cut_mark.pml", [], "holds"),  # an acquire's try that runs after its abandon grants nothing
        ("redis_cut_mark.pml", ["-DNO_MARK"], "VIOLATED"),
        ("redis_handover.pml", [], "holds"),
        ("redis_handover.pml", ["-DNO_GRANT_DEADLINE"], "VIOLATED"),
        ("sql_bell_orphan.pml", [], "holds"),  # MariaDB: the grant behind a bell wait its client gave up on
        ("sql_bell_orphan.pml", ["-DNO_RETRY"], "VIOLATED"),
        ("sql_bell_orphan.pml", ["-DONE_LOOK"], "VIOLATED"),  # a KILL made before the batch began finds nothing
        ("sql_lease.pml", ["-DFIX_RENEW_LOCKS_FENCE", "-DLEASE_CLOCK", "-DABORTS"], "holds"),  # the lease tables
        ("sql_lease.pml", ["-DLEASE_CLOCK"], "VIOLATED"),  # renewals not serialised with acquires
        ("sql_lease_statement.pml", [], "holds"),  # PostgreSQL's autocommit statements
        ("sql_lease_statement.pml", ["-DNO_GUARD"], "VIOLATED"),
        ("sql_lease_handover.pml", [], "holds"),
        ("sql_session_fence.pml", [], "holds"),  # MariaDB session mode: the fence others read is the holder's
        ("sql_session_fence.pml", ["-DPG"], "holds"),  # PostgreSQL: the fence in application_name
        ("sql_session_fence.pml", ["-DNO_CLEAR"], "VIOLATED"),  # a wait that does not clear the row first
        ("sql_session_fence.pml", ["-DPG", "-DPG_NO_RESET"], "VIOLATED"),  # a release that keeps the app name
        ("zookeeper_own_watch.pml", [], "holds"),
        ("zookeeper_own_watch.pml", ["-DNO_OWN_GONE"], "VIOLATED"),
        ("zookeeper_semaphore.pml", [], "holds"),
        ("zookeeper_semaphore.pml", ["-DNO_C_CHECK"], "VIOLATED"),  # a set_permits between the read and the multi
    ],
)
def test_model(model: str, flags: list[str], expected: str) -> None:
    # check.sh runs a table line when given flags; "(today)" is the model with none: pass a no-op define
    args = [str(MODELS / "check.sh"), str(MODELS / model), *(flags or ["-DAS_TODAY"])]
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert out.stderr == "", out.stderr
    assert expected in out.stdout.split(), out.stdout

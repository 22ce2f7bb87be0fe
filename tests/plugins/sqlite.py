"""sqlite:// on a file in a per-session temp dir (or $DISTLOCK_TEST_SQLITE_URL)."""

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    env = os.environ.get("DISTLOCK_TEST_SQLITE_URL")
    if env:
        return env
    path: Path = tmp_path_factory.mktemp("sqlite") / "locks.db"
    return f"sqlite:///{path}"

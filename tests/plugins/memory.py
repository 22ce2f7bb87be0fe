"""memory:// needs no server."""

import pytest


@pytest.fixture(scope="session")
def memory_url() -> str:
    return "memory://"

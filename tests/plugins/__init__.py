"""Backend plugins for the test matrix (see tests/conftest.py)."""

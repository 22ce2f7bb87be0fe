"""The distribution's name on the package index, for install hints in errors.

The import name and the command are ``distlock``; the distribution is ``python-distlock`` because ``distlock``
on the package index belongs to an unrelated project.
"""

from __future__ import annotations

DIST_NAME = "python-distlock"


def install_hint(extra: str) -> str:
    """The shell command that installs an extra, e.g. ``pip install 'python-distlock[redis]'``."""
    return f"pip install '{DIST_NAME}[{extra}]'"

"""Where the tests find the checkout: its root, the tests and their helpers, and ../shared beside it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SUPPORT_DIR = Path(__file__).resolve().parent
TESTS_DIR = SUPPORT_DIR.parent
REPO_ROOT = TESTS_DIR.parent
SHARED = REPO_ROOT.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A file under ../shared; tests that need it skip with a reason only when ../shared is absent."""
    import pytest  # here, not at the top: scripts and the warm-launch server import this module without pytest

    path = SHARED.joinpath(*parts)
    if not SHARED.exists():
        pytest.skip(f"../shared is not beside the repository ({SHARED}); this test reads the shared benchmark data")
    return path


def with_checkout_on_path(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the checkout's root first on PYTHONPATH: a `python -m tests.support.<module>` or `python -c`
    child started anywhere imports the helpers as the tests do (`tests.support.*`), never another `tests`
    package an installed distribution may ship."""
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))}

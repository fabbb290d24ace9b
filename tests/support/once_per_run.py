"""A folder built once per test run and shared by every pytest-xdist worker of it.

Module- and session-scoped fixtures are per worker: a module whose tests the scheduler deals to two workers
computes its fixture twice. What is costly and the same for every worker (a venv, a report over 18,000
candidates) is built here instead, in the folder above the workers' own temporary roots: the first worker to
need it builds it under a file lock, the others wait and read it.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

BUILT = ".built"  # written last: a build that died half-way is built again by the next worker to ask


def run_folder(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The test run's own temporary folder: above each xdist worker's root, or the root of a run without them."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if worker_id != "master" else base


def built_once(tmp_path_factory: pytest.TempPathFactory, worker_id: str, name: str,
               build: Callable[[Path], None]) -> Path:
    """The folder `name`, filled by `build(folder)` unless this run already has it."""
    from filelock import FileLock

    root = run_folder(tmp_path_factory, worker_id) / name
    with FileLock(f"{root}.lock"):
        if not (root / BUILT).is_file():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            build(root)
            (root / BUILT).touch()
    return root

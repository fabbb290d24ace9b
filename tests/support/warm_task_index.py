"""lmms-eval's index of its own ~3,200 task YAMLs, built once in the warm-launch server instead of once per run.

Imported only in tests/support/warm_launch.py's forkserver (it is in PRELOAD there). Every `lmms_eval` run indexes the
task folder lmms-eval ships (TaskManager._get_task_and_group over ~3,200 YAML files, read by PyYAML's pure-Python
loader): ~9 s of CPU, 80% of what a warm run costs (profiled). That folder is part of the installed package and
does not change during a test session, so the server indexes it once, with lmms-eval's own code, and every run
forked from it gets a deep copy. Any other folder (capjudge's tasks, a test's own task folder) is indexed by
lmms-eval's code in every run, as before. tests/test_warm_launch.py checks the copy equals a fresh index and
that a warm run uses it.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import lmms_eval.tasks
from lmms_eval.tasks import TaskManager, eval_logger

LMMS_EVAL_TASKS = os.path.realpath(os.path.dirname(lmms_eval.tasks.__file__))

index_lmms_eval_builds = TaskManager._get_task_and_group
_remembered: dict[str, Any] = {}


def _get_task_and_group(self: TaskManager, task_dir: str) -> dict[str, Any]:
    if os.path.realpath(task_dir) != LMMS_EVAL_TASKS:
        return index_lmms_eval_builds(self, task_dir)
    if LMMS_EVAL_TASKS not in _remembered:
        _remembered[LMMS_EVAL_TASKS] = index_lmms_eval_builds(self, task_dir)
    return copy.deepcopy(_remembered[LMMS_EVAL_TASKS])


def bare_task_manager() -> TaskManager:
    """A TaskManager that has indexed nothing yet (the indexing reads only its logger)."""
    manager = TaskManager.__new__(TaskManager)
    manager.logger = eval_logger
    return manager


TaskManager._get_task_and_group = _get_task_and_group
_get_task_and_group(bare_task_manager(), LMMS_EVAL_TASKS)  # built here, before any run forks from the server

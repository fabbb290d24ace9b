"""Task indexes built once in the warm-launch server instead of once per run: lmms-eval's own ~3,200 task YAMLs,
and capjudge's task folder (the checkout's `tasks/`).

Imported only in tests/support/warm_launch.py's forkserver (it is in PRELOAD there). Every `lmms_eval` run indexes the
task folder lmms-eval ships (TaskManager._get_task_and_group over ~3,200 YAML files, read by PyYAML's pure-Python
loader): ~9 s of CPU, 80% of what a warm run costs (profiled). That folder is part of the installed package and
does not change during a test session, so the server indexes it once, with lmms-eval's own code, and every run
forked from it gets a deep copy. A test run has a server per xdist worker: the first to index it writes the index
(JSON) into the folder they share (tests/support/warm_launch.py's use_scratch), under a file lock, and the others
read it (~5 CPU-s a server); a file that does not read back as an index of that folder by that lmms-eval is
indexed afresh and replaced.

Most runs also index capjudge's folder (`--include_path`, `capjudge judge`, `sensitivity` and `arena` load their task
through a TaskManager over it): ten YAML files, but ~0.2 s of pure-Python YAML per run, a quarter of a warm demo
run's CPU (profiled), in ~400 warm runs a suite. That folder is the checkout, which a test could change, so its
remembered index is used only when nothing it was built from differs: the same folder string (the index holds
paths as given), every YAML file lmms-eval's walk finds, in the same order and byte for byte, and no file in the
run's working directory named like one of their `include:`s (lmms-eval's loader tries an include name against the
working directory first). Otherwise, and for any other folder (a test's own task folder, a copy of capjudge's),
lmms-eval's code indexes it in the run, as before. tests/test_warm_launch.py checks both against fresh indexes.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import lmms_eval.tasks
import yaml
from filelock import FileLock
from capjudge.tasks import TASKS_DIR
from lmms_eval.tasks import TaskManager, eval_logger
from tests.support.warm_launch import SHARED_WITH_OTHER_SERVERS

LMMS_EVAL_TASKS = os.path.realpath(os.path.dirname(lmms_eval.tasks.__file__))
CAPJUDGE_TASKS = str(TASKS_DIR)  # as `capjudge tasks-folder` prints it and the demo and the tests pass it
_IGNORED_DIRS = ("__pycache__", ".ipynb_checkpoints")  # as lmms-eval's walk skips them

index_lmms_eval_builds = TaskManager._get_task_and_group


@dataclass(frozen=True)
class _Remembered:
    index: dict[str, Any]
    yaml_files: tuple[tuple[str, bytes], ...]  # what the index was built from, in walk order
    include_names: frozenset[str]  # `include:` values, each read from its YAML's folder when the index was built


_lmms_eval_index: dict[str, Any] = {}
_remembered: dict[str, _Remembered] = {}


def _get_task_and_group(self: TaskManager, task_dir: str) -> dict[str, Any]:
    if os.path.realpath(task_dir) == LMMS_EVAL_TASKS:
        if not _lmms_eval_index:
            _lmms_eval_index.update(index_lmms_eval_builds(self, task_dir))
        return copy.deepcopy(_lmms_eval_index)
    remembered = _remembered.get(task_dir)
    if remembered is not None and _unchanged(remembered, task_dir):
        return copy.deepcopy(remembered.index)
    return index_lmms_eval_builds(self, task_dir)


def remember(task_dir: str) -> bool:
    """Index `task_dir` now, with lmms-eval's code, for every later run in which it is unchanged. False, with
    nothing remembered, when an include is read from outside the folder or the folder does not index (its runs
    then meet that themselves, as cold runs would)."""
    try:
        yaml_files = _yaml_files(task_dir)
        include_names = _include_names(task_dir, yaml_files)
        if include_names is None:
            return False
        index = index_lmms_eval_builds(bare_task_manager(), task_dir)
    except Exception:  # noqa: BLE001 - see the docstring
        return False
    _remembered[task_dir] = _Remembered(index, yaml_files, include_names)
    return True


def _include_names(task_dir: str, yaml_files: tuple[tuple[str, bytes], ...]) -> frozenset[str] | None:
    """The `include:` names of the folder's YAMLs, or None if one is read from a file outside the folder (whose
    bytes `_unchanged` would not compare)."""
    folder = os.path.realpath(task_dir)
    names: set[str] = set()
    for path, content in yaml_files:
        config = yaml.load(content, Loader=_RawLoader)
        included = config.get("include", []) if isinstance(config, dict) else []
        for name in [included] if isinstance(included, str) else included:
            resolved = os.path.realpath(os.path.join(os.path.dirname(path), name))
            if os.path.isabs(name) or os.path.isfile(name) or not resolved.startswith(folder + os.sep):
                return None
            names.add(name)
    return frozenset(names)


def _unchanged(remembered: _Remembered, task_dir: str) -> bool:
    return (not any(os.path.isfile(name) for name in remembered.include_names)
            and _yaml_files(task_dir) == remembered.yaml_files)


def _yaml_files(task_dir: str) -> tuple[tuple[str, bytes], ...]:
    """Every file lmms-eval's index reads, in its order (os.walk, the same folders skipped), with its bytes."""
    found = []
    for root, dirs, files in os.walk(task_dir):
        dirs[:] = [name for name in dirs if name not in _IGNORED_DIRS]
        for name in files:
            if name.endswith(".yaml"):
                path = os.path.join(root, name)
                with open(path, "rb") as handle:
                    found.append((path, handle.read()))
    return tuple(found)


class _RawLoader(yaml.SafeLoader):
    """Reads a task YAML's own keys (its `include:`) without lmms-eval's `!function` import."""


_RawLoader.add_constructor("!function", lambda loader, node: None)


def bare_task_manager() -> TaskManager:
    """A TaskManager that has indexed nothing yet (the indexing reads only its logger)."""
    manager = TaskManager.__new__(TaskManager)
    manager.logger = eval_logger
    return manager


def shared_lmms_eval_index(folder: Path) -> dict[str, Any]:
    """lmms-eval's index of its own folder, read from `folder` where another server of the run wrote it, else
    built with lmms-eval's code and written there for the next (under an exclusive lock, so it is built once)."""
    stamp = {"tasks_dir": LMMS_EVAL_TASKS, "lmms_eval": version("lmms_eval")}
    path = folder / "lmms_eval_task_index.json"
    with FileLock(f"{path}.lock"):  # as tests/support/once_per_run.py locks what the workers share
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(stored, dict) and stored.get("stamp") == stamp and isinstance(stored.get("index"), dict):
                return stored["index"]
        except (OSError, ValueError):
            pass  # none yet, or not one this run wrote whole: index afresh below
        index = index_lmms_eval_builds(bare_task_manager(), LMMS_EVAL_TASKS)
        text = json.dumps({"stamp": stamp, "index": index})
        if json.loads(text)["index"] == index:  # only an index JSON carries unchanged is shared
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(text, encoding="utf-8")
            os.replace(partial, path)
        return index


TaskManager._get_task_and_group = _get_task_and_group
# Built here, before any run forks from the server.
_shared_folder = os.environ.get(SHARED_WITH_OTHER_SERVERS)
if _shared_folder:
    _lmms_eval_index.update(shared_lmms_eval_index(Path(_shared_folder)))
else:
    _get_task_and_group(bare_task_manager(), LMMS_EVAL_TASKS)
remember(CAPJUDGE_TASKS)

"""The judges `capjudge.api` can judge with, by the name each judge's descriptor gives (`gveval`, `anycap`, ...).

A judge is known by its task class (a `JudgedTask` whose settings name the judge's `DESCRIPTOR`): that class
holds the one per-item path every run takes (`JudgedTask.judge_item`), so the API judges exactly as lmms-eval
and `capjudge judge` do. Found, not listed: every module `tasks/harness/<name>_task.py` is imported (a judge added
as the README's "A third judge" says is known with no edit here), and any other judged task class already
imported counts too (a judge kept outside capjudge, once the notebook has imported its task module).

Imported on first use only: the task classes import lmms-eval, which a notebook that only reads runs never needs.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Any

from capjudge.api.errors import UnknownJudgeError

if TYPE_CHECKING:
    from capjudge.tasks.harness.judged_task import JudgedTask

# The modules of capjudge's own judges' task classes: tasks/harness/<name>_task.py.
_TASK_MODULE_SUFFIX = "_task"


def judge_names() -> tuple[str, ...]:
    """The names of every judge capjudge knows, sorted."""
    return tuple(sorted(_judge_tasks()))


def judge_task(name: Any) -> type[JudgedTask]:
    """The task class of the judge named `name`; UnknownJudgeError (naming the known ones) for any other."""
    tasks = _judge_tasks()
    if not isinstance(name, str) or name not in tasks:
        raise UnknownJudgeError(name, tuple(sorted(tasks)))
    return tasks[name]


def _judge_tasks() -> dict[str, type[JudgedTask]]:
    from capjudge.tasks import harness
    from capjudge.tasks.harness.judged_task import JudgedTask

    for module in pkgutil.iter_modules(harness.__path__):
        if module.name.endswith(_TASK_MODULE_SUFFIX):
            importlib.import_module(f"{harness.__name__}.{module.name}")
    found: dict[str, type[JudgedTask]] = {}
    pending = list(JudgedTask.__subclasses__())
    while pending:  # breadth first: a judge's own task class comes before any variant derived from it
        task = pending.pop(0)
        descriptor = getattr(getattr(task, "settings_type", None), "descriptor", None)
        if descriptor is not None:
            found.setdefault(descriptor.name, task)
        pending.extend(task.__subclasses__())
    return found

"""The datasets capjudge ships, by the name a task YAML gives them (`metadata.dataset`), and how a task's
metadata names the item format its items are read with.

A task whose judge lives outside capjudge brings its own datasets (`SourcedTask.own_datasets`, the test
suite's third judge does): they are looked up first, by the same key. A dotted path to an `ItemFormat` in an
importable module names a dataset capjudge does not ship.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from capjudge.judges.datasets import anycap_video, demo, msvd_eval, vatex_eval
from capjudge.judges.datasets.items import DatasetError, ItemFormat

SHIPPED_DATASETS: Mapping[str, ItemFormat] = {
    "msvd_eval": msvd_eval.MSVD_EVAL_FORMAT,
    "vatex_eval": vatex_eval.VATEX_EVAL_FORMAT,
    "anycap_video": anycap_video.ANYCAP_FORMAT,
    "gveval_demo": demo.GVEVAL_DEMO_FORMAT,
    "anycap_demo": demo.ANYCAP_DEMO_FORMAT,
}

# Before datasets had a home, task YAMLs named their format by `metadata.item_format`, a dotted path into the
# judge task modules that then held the formats. A task variant made by copying a shipped YAML (lmms-eval's
# usual way to change a task) still names them so and would stop loading: the old paths, to today's names.
_LEGACY_ITEM_FORMATS = {
    "capjudge.tasks.harness.gveval_task.MSVD_EVAL_FORMAT": "msvd_eval",
    "capjudge.tasks.harness.gveval_task.VATEX_EVAL_FORMAT": "vatex_eval",
    "capjudge.tasks.harness.gveval_task.DEMO_FORMAT": "gveval_demo",
    "capjudge.tasks.harness.anycap_task.ANYCAP_FORMAT": "anycap_video",
    "capjudge.tasks.harness.anycap_task.DEMO_FORMAT": "anycap_demo",
}


def item_format_of(task: str, metadata: Mapping[str, Any], own: Mapping[str, ItemFormat] | None = None) -> ItemFormat:
    """The item format a task's metadata names: `dataset` (a name among the task's own datasets, then the
    shipped ones; or a dotted path to an ItemFormat), else the legacy `item_format`. Raises DatasetError
    naming the task and the key."""
    key = "dataset" if "dataset" in metadata else "item_format" if "item_format" in metadata else None
    if key is None:
        raise DatasetError(f"task {task!r}: metadata.dataset is missing (one of {', '.join(SHIPPED_DATASETS)}, "
                           "or a dotted path to an ItemFormat)")
    name = metadata[key]
    if not isinstance(name, str) or not name.strip():
        raise DatasetError(f"task {task!r}: metadata.{key} must name a dataset, got {name!r}")
    name = _LEGACY_ITEM_FORMATS.get(name, name)
    known = {**SHIPPED_DATASETS, **(own or {})}
    if name in known:
        return known[name]
    if "." not in name:
        raise DatasetError(f"task {task!r}: metadata.{key} {name!r} is no dataset capjudge knows "
                           f"(known: {', '.join(known)}; or a dotted path to an ItemFormat)")
    module_name, _, attribute = name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise DatasetError(f"task {task!r}: metadata.{key} {name!r} cannot be imported ({error})") from None
    if not isinstance(found, ItemFormat):
        raise DatasetError(f"task {task!r}: metadata.{key} {name!r} is not an ItemFormat")
    return found

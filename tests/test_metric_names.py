"""One source of truth for metric names: every task YAML's `metric_list` is exactly what its task's
`item_metrics` returns (apart from the logged-only records), for items with and without human scores."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from capjudge.tasks import anycap_task, gveval_task
from conftest import REPO_ROOT

TASKS = REPO_ROOT / "tasks"
LOGGED_ONLY = {"item_id", "judgment", "judge"}  # written to the sample log, aggregated by no metric


class _TaskYamlLoader(yaml.SafeLoader):
    pass


_TaskYamlLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))


def _task_config(path: Path) -> dict:
    config = yaml.load(path.read_text(encoding="utf-8"), Loader=_TaskYamlLoader)
    if "include" in config:  # lmms-eval's include: the base, then this file's keys on top
        base = _task_config(path.parent / config.pop("include"))
        config = {**base, **config}
    return config


def _metric_names(path: Path) -> set[str]:
    return {entry["metric"] for entry in _task_config(path)["metric_list"]}


def _unjudged_gveval_metrics(settings_metadata: dict, human: bool) -> set[str]:
    doc = {"id": "v1", "video": "missing.avi", "references": [], "_videos_dir": "/nonexistent", "_videos_env": "X",
           **({"human_scores": [[3, 3, 3, 3, 3.0], [4, 4, 4, 4, 4.0]]} if human else {})}
    settings = gveval_task.GVEvalSettings.resolve(settings_metadata, env={})
    judgment = gveval_task.judge_item(doc, "a caption", settings, client=None)  # no request: video/refs missing
    return set(gveval_task.item_metrics(doc, judgment, {"name": "gveval"})) - LOGGED_ONLY


@pytest.mark.parametrize("yaml_name, human", [("gveval.yaml", True), ("gveval_references.yaml", True),
                                               ("gveval_demo.yaml", False)])
def test_gveval_yaml_metric_lists_match_item_metrics(yaml_name, human):
    path = TASKS / "gveval" / yaml_name
    metadata = _task_config(path)["metadata"]
    assert _metric_names(path) == _unjudged_gveval_metrics(metadata, human)


@pytest.mark.parametrize("yaml_name", ["anycap_style.yaml", "anycap_style_demo.yaml"])
def test_anycap_yaml_metric_lists_match_item_metrics(yaml_name):
    doc = {"id": "a1", "video": "missing.mp4", "caption_type": "brief", "reference": "a red ball rolls",
           "instruction": "Describe it.", "_videos_dir": "/nonexistent", "_videos_env": "X"}
    settings = anycap_task.AnyCapSettings.resolve(_task_config(TASKS / "anycap_style" / yaml_name)["metadata"], env={})
    judgment = anycap_task.judge_item(doc, "a red ball", settings, client=None)
    metrics = set(anycap_task.item_metrics(doc, judgment, {"name": "anycap"})) - LOGGED_ONLY
    assert _metric_names(TASKS / "anycap_style" / yaml_name) == metrics

"""One source of truth for metric names: every task YAML's `metric_list` is exactly what its task's
`item_metrics` returns (the logged record `judged` included: it is a metric too, the count of judged items),
for items with and without human scores; and the results JSON of a run holds no metric without a value."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from capjudge.tasks.harness import anycap_task, gveval_task
from tests.support.paths import REPO_ROOT

TASKS = REPO_ROOT / "tasks"


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
    return set(gveval_task.item_metrics(doc, judgment, {"name": "gveval"}))


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
    metrics = set(anycap_task.item_metrics(doc, judgment, {"name": "anycap"}))
    assert _metric_names(TASKS / "anycap_style" / yaml_name) == metrics


def test_a_real_run_writes_no_metric_without_a_value(tmp_path):
    """lmms-eval aggregates every key process_results returns: a log-only key used to show up in the results
    JSON as an empty list (`judgment,none: []`). Every value there must now be a number (or lmms-eval's "N/A"
    for a standard error it does not compute)."""
    from tests.support.harness_runs import judge_server, run_lmms_eval

    captions = REPO_ROOT / "tasks" / "demo" / "captions_good.jsonl"
    with judge_server() as judge:
        run = run_lmms_eval(
            model="captions_file", model_args=f"path={captions},model_name=good", tasks="gveval_demo,anycap_style_demo",
            output_path=tmp_path / "out", judge_base_url=judge.base_url, limit=2,
        )
    results = run.results()["results"]
    for task in ("gveval_demo", "anycap_style_demo"):
        values = {key: value for key, value in results[task].items() if key not in ("alias", "samples")}
        empty = {key: value for key, value in values.items()
                 if not (isinstance(value, (int, float)) or ("_stderr" in key and value == "N/A"))}
        assert not empty, f"{task}: metrics without a value in the results JSON: {empty}"
        assert values["judged,none"] == 2  # the record metric counts the judged items
        records = [sample["judged"] for sample in run.samples(task)]
        assert [record["judgment"]["failure"] for record in records] == [None, None]
        assert {record["judge"]["name"] for record in records} == {task.split("_")[0]}

"""The one judge contract: both judges' results follow `JudgeResult`, and the one task path (`JudgedTask`)
handles both the same way — the missing-video rule, the logged record, the settings resolved once."""

from __future__ import annotations

import importlib.metadata
import json

import pytest
from capjudge.judges.anycap.judge import AnyCapResult
from capjudge.judges.gveval.parser import SCORE_NAMES, GVEvalResult
from capjudge.judges.anycap.length_rule import check_length_tolerance
from capjudge.judges.types import JudgeResult, ParseFailure
from capjudge.tasks.harness.anycap_task import AnyCapSettings, AnyCapTask
from capjudge.tasks.harness.gveval_task import GVEvalSettings, GVEvalTask
from capjudge.tasks.harness.aggregations import count_judged
from capjudge.tasks.harness.judged_task import RECORD_METRIC


def _results():
    failure = ParseFailure("no_json", "the reply has no JSON object")
    gveval = GVEvalResult.unjudged(failure, "expected", raw_reply="not a judgment")
    tolerance = check_length_tolerance("brief", "a red ball", "a red ball rolls", 10)
    anycap = AnyCapResult.from_checks(None, tolerance, None, failure=failure.kind, failure_detail=failure.detail)
    return gveval, anycap


@pytest.mark.parametrize("result", _results(), ids=["gveval", "anycap"])
def test_both_results_follow_the_protocol_and_never_score_a_failure(result):
    assert isinstance(result, JudgeResult)
    assert not result.ok and result.failure_kind == "no_json" and "JSON" in result.failure_detail
    assert all(value is None for value in result.scores().values())
    json.dumps(result.log_fields())  # the sample log must be able to write it


def test_gveval_scores_are_named_once():
    assert tuple(GVEvalResult.unjudged(ParseFailure("x"), "text").scores()) == SCORE_NAMES


@pytest.mark.parametrize(
    "task, settings, doc",
    [
        (GVEvalTask, GVEvalSettings.resolve({"mode": "frames"}, env={}),
         {"id": "v1", "video": "gone.mp4", "references": ["a ball"], "_videos_dir": "/nonexistent", "_videos_env": "V"}),
        (AnyCapTask, AnyCapSettings.resolve({}, env={}),
         {"id": "a1", "video": "gone.mp4", "caption_type": "brief", "reference": "a red ball rolls",
          "instruction": "Describe it briefly.", "_videos_dir": "/nonexistent", "_videos_env": "V"}),
    ],
    ids=["gveval", "anycap"],
)
def test_one_task_path_for_a_missing_video(task, settings, doc):
    judgment = task.judge_item(doc, "a red ball", settings, client=None)  # no request is made: the video is gone
    assert judgment.result.failure_kind == "video_missing" and "gone.mp4" in judgment.result.failure_detail
    assert judgment.requests == 0 and judgment.raw_reply is None and not judgment.cache_hit
    metrics = task.item_metrics(doc, judgment, {"name": settings.judge_name})
    record = metrics[RECORD_METRIC]
    assert record["item_id"] == doc["id"] and record["judge"] == {"name": settings.judge_name}
    assert record["judgment"]["failure"] == "video_missing" and record["judgment"]["video"].endswith("gone.mp4")
    assert count_judged([record]) == 0
    assert metrics[f"{settings.judge_name}_failed"] == 1


def test_identity_has_one_shape_for_both_judges():
    from capjudge.judges.client.config import JudgeConfig

    config = JudgeConfig.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})
    identities = [GVEvalSettings.resolve({}, env={}).identity(config), AnyCapSettings.resolve({}, env={}).identity(config)]
    assert [sorted(identity) for identity in identities] == [["capjudge_version", "descriptor", "endpoint", "judge_version", "model", "name", "settings"]] * 2
    assert [identity["model"] for identity in identities] == [GVEvalSettings.published_model, AnyCapSettings.published_model]
    assert {identity["capjudge_version"] for identity in identities} == {importlib.metadata.version("capjudge")}

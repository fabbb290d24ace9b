"""Defects found by an independent read (issue 14), each pinned by a test that failed before its fix."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from capjudge.judges.gveval.judge import PUBLISHED_MODEL, GVEvalJudge
from capjudge.metrics.statistics.compare import compare_scorers
from capjudge.tasks.harness.aggregations import mean_of_type_means
from tests.support.harness_runs import run_capjudge
from tests.support.videos import make_video

CAPTION = "A red ball rolls across a grey floor."
REFERENCES = ["a red ball rolls on the floor", "a ball moves to the right"]


def test_gveval_used_as_a_library_without_a_model_sends_the_published_one(server, make_client):
    judge = GVEvalJudge(make_client(server, model=None), mode="references")
    assert judge.judge(CAPTION, references=REFERENCES).judged
    assert server.log[0].body["model"] == PUBLISHED_MODEL == "gpt-4o-2024-05-13"


@pytest.mark.parametrize("judge_args", [
    ["gveval", "--caption", CAPTION, "--mode", "references", "--reference", REFERENCES[0]],
    ["anycap", "--caption-type", "brief", "--output", CAPTION, "--reference", REFERENCES[0]],
])
def test_render_names_the_model_a_real_run_would_send(judge_args, tmp_path):
    # A real run takes CAPJUDGE_JUDGE_MODEL when MODEL_VERSION is not set (JudgeConfig.from_env); so must render.
    completed = run_capjudge("render", *judge_args, "--out", str(tmp_path), env={"CAPJUDGE_JUDGE_MODEL": "my-judge"})
    assert completed.returncode == 0, completed.stderr
    assert json.loads((tmp_path / "request.json").read_text())["model"] == "my-judge"


def test_a_bug_while_building_a_request_raises_instead_of_passing_for_bad_input(server, make_client, tmp_path, monkeypatch):
    clip = make_video(tmp_path / "clip.mp4", n_frames=8)

    def broken_strip(frames):  # stands for any programming error inside frame drawing
        raise ValueError("bug: strip drawing failed")

    monkeypatch.setattr("capjudge.judges.frame_strip.build_strip", broken_strip)
    with pytest.raises(ValueError, match="bug: strip drawing failed"):
        GVEvalJudge(make_client(server)).judge(CAPTION, video=clip)
    assert server.log == []


def test_an_item_that_cannot_make_a_request_is_still_unjudged_as_bad_input(server, make_client):
    result = GVEvalJudge(make_client(server), mode="references").judge(CAPTION, references=[])
    assert result.failure.kind == "bad_input" and server.log == []


def test_williams_test_counts_items_not_annotator_pairs():
    rng = np.random.default_rng(3)
    n_items = 60
    truth = rng.normal(size=n_items)
    human = np.column_stack([truth + rng.normal(scale=0.5, size=n_items), truth + rng.normal(scale=0.5, size=n_items)])
    first = truth + rng.normal(scale=0.3, size=n_items)
    second = truth + rng.normal(scale=1.0, size=n_items)
    (pearson,) = compare_scorers(first, second, human.tolist(), annotators="expand", coefficients=("pearson",))
    assert pearson.n == 2 * n_items and pearson.n_items == n_items
    assert pearson.williams is not None and pearson.williams.df == n_items - 3


def test_anycap_avg_of_types_is_the_mean_of_the_per_type_means():
    items = [
        {"caption_type": "brief", "score": 4}, {"caption_type": "brief", "score": 4}, {"caption_type": "brief", "score": 4},
        {"caption_type": "poem", "score": 1}, None,
    ]
    assert mean_of_type_means(items) == pytest.approx((4 + 1) / 2)  # the item-level mean would be 13/4
    assert math.isnan(mean_of_type_means([None, None]))

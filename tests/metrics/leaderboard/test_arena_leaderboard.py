"""The leaderboard's arena section (capjudge.metrics.leaderboard.arena_column) on runs as the run reader
returns them: ratings equal to an independent logistic fit, the win-rate matrix and order changes in the
Markdown and the JSON, a PNG that decodes, and a task whose runs make no arena given its one-line reason."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from capjudge.judges.record import LoggedJudge
from capjudge.metrics.arena.ratings import ArenaSettings
from capjudge.metrics.files.runs import Run
from capjudge.metrics.files.task_run import TaskRun
from capjudge.metrics.leaderboard.arena_column import arena_json, arena_markdown, task_arenas
from capjudge.metrics.leaderboard.arena_plot import arena_png
from PIL import Image
from tests.metrics.arena.test_arena_ratings import independent_elo

TASK = "gveval_demo"


def _run(name: str, scores: list[float | None], task: str = TASK) -> Run:
    values = np.array([np.nan if s is None else s for s in scores], dtype=float)
    task_run = TaskRun(
        task=task, metric_names=("gveval_mean",), higher_is_better={"gveval_mean": True},
        harness_values={"gveval_mean": float(np.nanmean(values))}, item_keys=tuple(f"item{i}" for i in range(len(scores))),
        values={"gveval_mean": values}, bool_valued={"gveval_mean": False},
        judges={LoggedJudge(name=None, model="test-judge", judge_version=None, settings=None): len(scores)},
        judge_source="samples", samples_path=None,
    )
    return Run(name=name, results_paths=(Path(f"/runs/{name}/results.json"),), model="captions_file",
               model_args=f"model_name={name}", date="2026-11-24", tasks={task: task_run})


# a: one big win and two losses against b: the higher mean, the lower rating.
SCORES = {"a": [100.0, 30.0, 30.0, 50.0], "b": [40.0, 40.0, 40.0, 45.0], "c": [10.0, 35.0, 10.0, None]}


def test_the_arena_section_rates_orders_and_renders_a_tasks_models():
    runs = [_run(name, scores) for name, scores in SCORES.items()]
    arenas, reasons = task_arenas(runs, {TASK: "gveval_mean"}, ArenaSettings(n_resamples=100, seed=2))
    assert reasons == {}
    arena = arenas[TASK]
    direct = {m: {f"item{i}": s for i, s in enumerate(v) if s is not None} for m, v in SCORES.items()}
    for model, value in independent_elo(direct).items():
        assert arena.ratings.ratings[model].value == pytest.approx(value, abs=0.01)
    assert arena.order_differs == (("a", "b"),)
    markdown = arena_markdown(arena)
    assert "a above b by mean score, b above a by rating" in markdown
    # The win-rate matrix in rating order (b, a, c), counted by hand: a-b 2 of 4, a-c 2 of 3, b-c 3 of 3.
    assert "| | b | a | c |\n|---|---|---|---|\n| b |  | 50.0% | 100.0% |\n| a | 50.0% |  | 66.7% |\n" \
           "| c | 0.0% | 33.3% |  |" in markdown
    payload = json.loads(json.dumps(arena_json(arena)))
    assert payload["win_rates"]["a"]["b"] == pytest.approx(0.5) and payload["win_rates"]["c"]["a"] == pytest.approx(1 / 3)
    assert list(payload["ratings"]) == ["b", "a", "c"] and payload["ratings"]["a"]["mean_score"] == pytest.approx(52.5)
    assert payload["order_differs"] == [["a", "b"]] and payload["n_battles"] == 4 + 3 + 3
    image = Image.open(io.BytesIO(arena_png(arena)))
    assert image.format == "PNG" and image.size[0] > 100


def test_a_task_with_one_model_gets_the_reason_instead_of_an_arena():
    runs = [_run("a", [1.0, 2.0]), _run("b", [1.0], task="other")]
    arenas, reasons = task_arenas(runs, {TASK: "gveval_mean"}, ArenaSettings(n_resamples=0))
    assert arenas == {}
    assert reasons == {TASK: "task gveval_demo: an arena needs at least two models, got 1 ('a')"}

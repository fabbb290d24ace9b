"""Leaderboards never crash on missing values: a model the judge failed on entirely, a metric with no value for
any model, one model only, ties. Each case is written to every format and checked in the files."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from capjudge.metrics.leaderboard.board import build_leaderboard
from capjudge.metrics.leaderboard.stats import LeaderboardSettings
from capjudge.metrics.files.runs import Run
from capjudge.judges.record import LoggedJudge
from capjudge.metrics.files.task_run import TaskRun
from capjudge.metrics.leaderboard.render import write_leaderboard

TASK = "gveval_demo"
SETTINGS = LeaderboardSettings(n_resamples=200, n_permutations=200)


def _task_run(scores: list[float | None], failed: list[bool] | None = None, harness_mean: float | None = None) -> TaskRun:
    n = len(scores)
    failed = failed if failed is not None else [s is None for s in scores]
    mean = np.array([np.nan if s is None else s for s in scores], dtype=float)
    return TaskRun(
        task=TASK,
        metric_names=("gveval_mean", "gveval_failed"),
        higher_is_better={"gveval_mean": True, "gveval_failed": False},
        harness_values={"gveval_mean": float("nan") if harness_mean is None else harness_mean,
                        "gveval_failed": float(sum(failed))},
        item_keys=tuple(f"item{i}" for i in range(n)),
        values={"gveval_mean": mean, "gveval_failed": np.array(failed, dtype=float)},
        bool_valued={"gveval_mean": False, "gveval_failed": True},
        judges={LoggedJudge(name=None, model="test-judge", judge_version=None, settings=None): n},
        judge_source="samples",
        samples_path=None,
    )


def _run(name: str, task_run: TaskRun) -> Run:
    return Run(name=name, results_paths=(Path(f"/runs/{name}/results.json"),), model="captions_file",
               model_args=f"model_name={name}", date="2026-11-24", tasks={TASK: task_run})


def _write(board, out: Path) -> dict[str, dict[str, str]]:
    write_leaderboard(board, out)
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.html", "leaderboard.png"):
        assert (out / name).stat().st_size > 0, name
    with (out / "leaderboard.csv").open(encoding="utf-8", newline="") as handle:
        return {row["model"]: row for row in csv.DictReader(handle)}


def test_a_model_the_judge_failed_on_entirely_is_listed_unranked_with_its_failure_rate(tmp_path):
    good = _run("good", _task_run([80.0, 70.0, 90.0, 60.0]))
    dead = _run("dead_judge", _task_run([None, None, None, None]))
    board = build_leaderboard([dead, good], SETTINGS)
    ranks = {row.name: row.rank for row in board.rows}
    assert ranks == {"good": 1, "dead_judge": None}
    assert [row.name for row in board.rows] == ["good", "dead_judge"]  # unranked last
    warning = next(w for w in board.warnings if w.startswith("dead_judge: unranked"))
    assert "gveval_failed 100.0%" in warning
    rows = _write(board, tmp_path)
    assert rows["dead_judge"]["rank"] == "" and rows["good"]["rank"] == "1"
    assert "dead_judge: unranked" in (tmp_path / "leaderboard.md").read_text(encoding="utf-8")
    assert "dead_judge: unranked" in (tmp_path / "leaderboard.html").read_text(encoding="utf-8")


def test_a_nan_harness_aggregate_is_no_value_not_a_rank(tmp_path):
    # lmms-eval's results file carries NaN for a mean over no items; without samples it is all there is.
    no_samples = _task_run([None, None], harness_mean=None)
    no_samples = TaskRun(**{**no_samples.__dict__, "item_keys": None, "values": {}})
    board = build_leaderboard([_run("good", _task_run([50.0, 60.0])), _run("nan_only", no_samples)], SETTINGS)
    row = next(r for r in board.rows if r.name == "nan_only")
    column = board.rank_column
    assert row.rank is None and row.estimates[column.key].value is None
    _write(board, tmp_path)


def test_a_metric_with_no_value_for_any_model_still_writes_every_file(tmp_path):
    board = build_leaderboard([_run("a", _task_run([None, None])), _run("b", _task_run([None, None, None]))], SETTINGS)
    assert all(row.rank is None for row in board.rows)
    assert sum("unranked" in w for w in board.warnings) == 2
    rows = _write(board, tmp_path)
    assert rows["a"][f"{TASK}/gveval_mean"] == "" and rows["b"][f"{TASK}/gveval_mean"] == ""


def test_one_model_only_is_ranked_first_with_no_comparison(tmp_path):
    board = build_leaderboard([_run("only", _task_run([10.0, 20.0, 30.0]))], SETTINGS)
    (row,) = board.rows
    assert row.rank == 1 and row.comparisons == {}
    rows = _write(board, tmp_path)
    assert float(rows["only"][f"{TASK}/gveval_mean"]) == pytest.approx(20.0)


def test_tied_models_share_a_rank_and_do_not_differ(tmp_path):
    scores = [10.0, 40.0, 70.0, 55.0]
    board = build_leaderboard([_run("first", _task_run(scores)), _run("twin", _task_run(list(scores))),
                               _run("low", _task_run([s - 5 for s in scores]))], SETTINGS)
    ranks = {row.name: row.rank for row in board.rows}
    assert ranks == {"first": 1, "twin": 1, "low": 3}
    twin = next(r for r in board.rows if r.name in ("first", "twin") and r.comparisons)
    comparison = twin.comparison_for(board.rank_column)
    assert comparison.difference == 0.0 and comparison.significant is False
    rows = _write(board, tmp_path)
    assert rows["first"]["rank"] == rows["twin"]["rank"] == "1"
    assert not any(math.isnan(float(v)) for v in (rows["low"][f"{TASK}/gveval_mean"],))

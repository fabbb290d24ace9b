"""Battles from judged runs, at no extra judging cost: the per-item values of one metric (a task's main score)
of several runs, as the leaderboard reads them (`capjudge.metrics.files.runs`, `TaskRun.values` aligned with
`TaskRun.item_keys`), decided item by item by `battles.score_battles`.

An item a model has no value for (unjudged: NaN in `TaskRun.values`) is in none of its battles, as it is in
none of its leaderboard means; a value the log holds that is not a number was refused when the run was read.
With `with_lengths`, each judged caption's word count is read from the logged record (the caption the judge
saw) for the length-controlled fit; a judged item without a logged caption is refused, naming the file, the
line and the run. Every refusal is an ArenaError: one line, the command's exit 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from capjudge.metrics.arena.battles import BattleTable, check_models, score_battles
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.runs import Run
from capjudge.metrics.files.samples_file import read_samples
from capjudge.metrics.files.task_run import TaskRun


@dataclass(frozen=True)
class RunBattles:
    task: str
    metric: str
    higher_is_better: bool
    margin: float
    table: BattleTable
    means: dict[str, float]  # model -> mean of its values over its judged items (the leaderboard's mean)
    # (item key, model) -> the judged caption's word count; empty unless asked for
    words: dict[tuple[str, str], int] = field(default_factory=dict)


def run_battles(runs: Sequence[Run], task: str, metric: str, *, margin: float = 0.0,
                with_lengths: bool = False) -> RunBattles:
    check_models([run.name for run in runs], f"task {task}")
    scores: dict[str, dict[str, float]] = {}
    words: dict[tuple[str, str], int] = {}
    directions = set()
    for run in runs:
        task_run = _task_run(run, task, metric)
        directions.add(bool(task_run.higher_is_better.get(metric, True)))
        assert task_run.item_keys is not None
        values = task_run.values[metric]
        judged = np.flatnonzero(np.isfinite(values))
        scores[run.name] = {task_run.item_keys[k]: float(values[k]) for k in judged}
        if with_lengths:
            words.update(((key, run.name), count) for key, count in _caption_words(run.name, task_run, judged).items())
    if len(directions) > 1:
        raise ArenaError(f"task {task}: the runs disagree on whether a higher {metric} is better")
    higher = directions.pop()
    table = score_battles(scores, margin=margin, higher_is_better=higher, what=f"task {task}, {metric}")
    means = {name: float(np.mean(list(values.values()))) for name, values in scores.items() if values}
    return RunBattles(task, metric, higher, float(margin), table, means, words)


def _task_run(run: Run, task: str, metric: str) -> TaskRun:
    task_run = run.tasks.get(task)
    if task_run is None:
        raise ArenaError(f"run {run.name!r}: no task {task!r} (it holds {sorted(run.tasks)})")
    if task_run.item_keys is None:
        raise ArenaError(f"run {run.name!r}, task {task}: no per-item values (no samples file beside "
                         f"{run.results_path}: run lmms-eval with --log_samples)")
    if metric not in task_run.values:
        raise ArenaError(f"run {run.name!r}, task {task}: no per-item metric {metric!r} (it logs "
                         f"{sorted(task_run.values)})")
    return task_run


def _caption_words(name: str, task_run: TaskRun, judged: np.ndarray) -> dict[str, int]:
    """item key -> word count of the caption the judge saw, for the judged positions of the samples file."""
    assert task_run.samples_path is not None and task_run.item_keys is not None
    try:
        samples = read_samples(task_run.samples_path)
    except RunFileError as problem:
        raise ArenaError(str(problem)) from None
    found = {}
    for position in judged:
        sample = samples[int(position)]
        judgment = sample.record.judgment if sample.record is not None else None
        if judgment is None or judgment.caption is None:
            raise ArenaError(f"run {name!r}: {sample.where} ({sample.label}): no judged caption logged, so its "
                             "length is unknown (the length-controlled arena needs every judged caption)")
        found[task_run.item_keys[int(position)]] = len(judgment.caption.split())
    return found

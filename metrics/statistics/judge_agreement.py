"""Judge against judge (`capjudge agreement`): the same models and items judged by two judges, or by one judge
under two settings. Per model, on the items both scored: Kendall tau-b and Spearman with item-bootstrap CIs,
the mean difference with a paired item-bootstrap CI; and whether the models' order by mean changes.

The inputs are each side's runs (a folder of model runs), read by `capjudge.metrics.files.runs`: per run,
item -> the metric's per-item value. Not to be confused with agreement between human annotators
(`capjudge.metrics.statistics.annotator_agreement`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capjudge.metrics.files.runs import read_runs
from capjudge.metrics.statistics.bootstrap import draw_item_indices
from capjudge.metrics.statistics.small_samples import under_rule
from capjudge.metrics.statistics.value_ci import ValueCI


class AgreementError(ValueError):
    """The two sides cannot be compared; the message says why."""


@dataclass(frozen=True)
class JudgedValues:
    """One side of the comparison: model -> item -> the metric's value, and what was left out."""

    per_model: dict[str, dict[str, float]]
    higher_is_better: bool
    left_out: tuple[str, ...]  # "<samples file>: k of n items" per run with items without a value


def judged_values(folder: Path, task_name: str, metric: str) -> JudgedValues:
    """Every run's per-item values under `folder`. An item without a value (logged null: unjudged) is left out
    and counted; a run with no value at all is an error naming its samples file. A value that is no number
    (text, NaN, 10**400, -1e308) is refused by `read_runs`, naming the file, line and item."""
    runs, _ = read_runs([str(folder)])
    per_model: dict[str, dict[str, float]] = {}
    higher, left_out = True, []
    for run in runs:
        task = run.tasks.get(task_name)
        if task is None or not task.has_samples:
            continue
        if metric not in task.values:
            raise AgreementError(f"{folder}: {run.name} has no per-item metric {metric!r}")
        higher = task.higher_is_better.get(metric, True)
        values = dict(zip(task.item_keys or (), (float(v) for v in task.values[metric])))
        judged = {key: value for key, value in values.items() if math.isfinite(value)}
        if not judged:
            raise AgreementError(f"{task.samples_path}: no item has a value of {metric!r} (all {len(values)} "
                                 "unjudged): nothing to compare")
        if len(judged) < len(values):
            left_out.append(f"{task.samples_path}: {len(values) - len(judged)} of {len(values)} items")
        per_model[run.name] = judged
    if not per_model:
        raise AgreementError(f"{folder}: no run of task {task_name!r} with per-item samples (--log_samples)")
    return JudgedValues(per_model, higher, tuple(left_out))


@dataclass(frozen=True)
class ModelAgreement:
    model: str
    n_common: int
    kendall_b: ValueCI
    spearman: ValueCI
    mean_difference: ValueCI  # second judge minus first, on the common items
    first_mean: float
    second_mean: float


@dataclass(frozen=True)
class JudgeAgreement:
    metric: str
    models: tuple[ModelAgreement, ...]
    first_ranking: tuple[str, ...]  # models by their mean under each judge, best first
    second_ranking: tuple[str, ...]

    @property
    def ranking_changes(self) -> bool:
        return self.first_ranking != self.second_ranking


def judge_agreement(first: Mapping[str, Mapping[str, float]], second: Mapping[str, Mapping[str, float]], metric: str,
                    *, higher_is_better: bool = True, n_resamples: int = 1000, seed: int = 0) -> JudgeAgreement:
    """`first` / `second`: model -> item id -> the metric's value under each judge. Per model, on the items
    both judges scored: Kendall tau-b and Spearman (item-bootstrap CIs, capjudge.metrics.statistics.correlation), the mean
    difference (paired item bootstrap); and whether the models' order by mean changes."""
    from capjudge.metrics.statistics.correlation import BootstrapSettings, correlate

    shared = [model for model in first if model in second]
    if not shared:
        raise AgreementError(f"no model was judged by both: {sorted(first)} vs {sorted(second)}")
    settings = BootstrapSettings(n_resamples=n_resamples, seed=seed)
    results = []
    for model in shared:
        items = sorted(set(first[model]) & set(second[model]))
        if len(items) < 3:
            raise AgreementError(f"{model}: {len(items)} items scored by both judges (need at least 3): were "
                                   "the runs made on the same items?")
        a = np.array([first[model][item] for item in items], dtype=float)
        b = np.array([second[model][item] for item in items], dtype=float)
        found = correlate(a, b.tolist(), annotators="mean", coefficients=("kendall_b", "spearman"),
                          settings=settings, item_ids=items)

        differences = b - a
        draws = differences[draw_item_indices(len(items), n_resamples, seed)].mean(axis=1) if n_resamples else None
        low, high = (np.percentile(draws, [2.5, 97.5]) if draws is not None else (None, None))
        # The small-sample rule: too few items, or every resample the same difference, is the difference alone.
        difference = under_rule(ValueCI(float(differences.mean()), None if low is None else float(low),
                                        None if high is None else float(high)), len(items), "item")[0]
        results.append(ModelAgreement(model, len(items), found["kendall_b"].value_ci, found["spearman"].value_ci,
                                      difference,
                                      float(a.mean()), float(b.mean())))
    sign = -1.0 if higher_is_better else 1.0
    first_ranking = tuple(r.model for r in sorted(results, key=lambda r: sign * r.first_mean))
    second_ranking = tuple(r.model for r in sorted(results, key=lambda r: sign * r.second_mean))
    return JudgeAgreement(metric, tuple(results), first_ranking, second_ranking)

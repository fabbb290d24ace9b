"""Leaderboards from lmms-eval runs: per-model metric estimates with item-bootstrap CIs, ranks, and paired tests.

Runs are read by `capjudge.metrics.files.runs` (and the replies behind each value, when items were judged k > 1
times, by `capjudge.metrics.leaderboard.replies`), the statistics are `capjudge.metrics.leaderboard.stats`,
the warnings `capjudge.metrics.leaderboard.caveats`; this module decides the columns, ranks the models
(overall by one metric, and within each task by that task's main metric) and puts the board together; for a
task judged by a panel of judges, each member's ranking beside it (`capjudge.metrics.leaderboard.panel`).
Rendering is `capjudge.metrics.leaderboard.render`.

Kinds of metric, decided from the data: a *rate* has only 0/1 values and is either bool-valued or declared
`higher_is_better: false` (failure and length-capped rates); every other metric is a *score*. A rate whose
name ends in `failed`/`failure`/`failures` is a failure rate (warned about above 2%). A score defined on as
many items as the task's best-covered score is a *main* metric (overall and per-dimension scores; per-type
scores such as AnyCap's `anycap_brief` cover only their own items and stay in the table only).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from capjudge.metrics.leaderboard.stats import (
    Comparison,
    Estimate,
    LeaderboardSettings,
    holm_adjust,
    mean_estimate,
    paired_comparison,
)
from capjudge.metrics.leaderboard.arena_column import board_arenas
from capjudge.metrics.leaderboard.length_column import TaskLengthControl, length_control
from capjudge.metrics.leaderboard.panel import TaskPanel, panel_tasks, task_panel
from capjudge.metrics.leaderboard.replies import TaskReplies, task_replies
from capjudge.metrics.leaderboard.caveats import consistency_warnings, reply_warnings, unranked_warnings
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.runs import Run
from capjudge.metrics.files.task_run import TaskRun
from capjudge.metrics.leaderboard.table import Leaderboard, LeaderboardRow, MetricColumn

_FAILURE_NAME = re.compile(r"(failed|failure|failures)$")


METHOD_TEMPLATE = (
    "Values are means over the items each model has a value for (unjudged items are left out, never counted "
    "as 0); rates are shares, in %: failures of all items, other rates (e.g. length-capped) of the judged "
    "items. Brackets: {confidence:.0%} percentile CI from an item bootstrap ({n_resamples} resamples, seed {seed}). Each model is compared with the column's top model on "
    "the items both have a value for: mean per-item difference with its paired item-bootstrap CI, and a paired "
    "permutation test (per-item sign flips, {n_permutations} permutations or exact enumeration when fewer "
    "suffice); p-values are Holm-corrected across the models compared; significant means corrected p < "
    "{alpha:g}."
)

# Added to the method text when some model was judged k > 1 times per item (capjudge.metrics.statistics.reply_bootstrap).
TWO_LEVEL_TEMPLATE = (
    " Models judged with k > 1 replies per item: their CIs, and the CIs of differences involving them, come "
    "from a two-level bootstrap: items resampled, then each drawn item's k replies resampled within it. An "
    "item's mean of k replies already carries the judge's noise, so it is counted once: item values are "
    "shrunk toward their mean by c = sqrt(s2_b / s2_m) (s2_m the variance of the item values, s2_b = s2_m "
    "minus the mean of s2_w / k_i, s2_w the replies' pooled within-item variance) and each item's residuals "
    "are inflated by sqrt(k_i / (k_i - 1)) before they are resampled. Judge noise = 1 - s0 / s, s the SD of "
    "the two-level bootstrap means and s0 that of the same item draws without the reply level: the share of "
    "the CI's width that is judge noise, by which a noise-free judge (infinitely many replies) would narrow "
    "it. Not measurable with one reply per item. The permutation test flips the signs of the per-item "
    "differences of the k-reply means, exact under its null whatever k."
)


ReportUrl = Callable[[str, str], "str | None"]  # (task, model name) -> URL of the model's items of the task


def build_leaderboard(
    runs: Sequence[Run],
    settings: LeaderboardSettings = LeaderboardSettings(),
    rank_by: str | None = None,
    warnings: Iterable[str] = (),
    report_url: ReportUrl | None = None,
) -> Leaderboard:
    """Rank `runs` by `rank_by` (`metric` or `task/metric`; default the first main score) and compare each
    with the top model in every score column. `report_url(task, model)` links a row to the model's items
    (e.g. the per-item report's anchor); None, or a None from it, leaves the row unlinked."""
    if not runs:
        raise RunFileError("no runs to compare")
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        repeated = sorted(name for name, count in Counter(names).items() if count > 1)
        raise RunFileError(f"several runs are named {repeated}; label them NAME=PATH")
    columns = _columns(runs)
    notes = list(warnings)
    replies = _replies(runs, columns)
    columns = _with_scales(columns, replies)
    estimates = {run.name: {c.key: _estimate(run, c, settings, replies) for c in columns} for run in runs}
    rank_column = _rank_column(columns, rank_by)
    comparisons: dict[str, dict[str, Comparison]] = {run.name: {} for run in runs}
    for column in columns:
        if column.kind != "score":
            continue
        for name, comparison in _compare_with_top(runs, column, estimates, settings, replies).items():
            comparisons[name][column.key] = comparison
    ranks = _ranks(runs, rank_column, estimates)
    task_rank_columns = _task_rank_columns(columns, rank_column)
    task_ranks = {task: _ranks(runs, column, estimates) for task, column in task_rank_columns.items()}
    rows = [
        LeaderboardRow(
            name=run.name,
            results_paths=run.results_paths,
            rank=ranks.get(run.name),
            estimates=estimates[run.name],
            comparisons=comparisons[run.name],
            judges={task: tuple(sorted(j.label() for j in t.judges)) for task, t in run.tasks.items()},
            n_items={task: t.n_items for task, t in run.tasks.items()},
            usage={task: t.usage for task, t in run.tasks.items() if t.usage},
            task_ranks={task: task_ranks[task].get(run.name) for task in run.tasks if task in task_ranks},
            report_urls=_report_urls(run, report_url),
        )
        for run in runs
    ]
    rows.sort(key=lambda row: (row.rank is None, row.rank or 0, row.name))
    notes.extend(consistency_warnings(runs, columns, estimates, settings))
    notes.extend(reply_warnings(replies))
    notes.extend(unranked_warnings(rows, columns, rank_column))
    controlled, uncontrolled = _length_control(runs, task_rank_columns, settings, notes)
    # The arena battles on each task's main score (a rate's 0/1 values would be mostly ties): no extra judging.
    arenas, no_arena = board_arenas(runs, {t: c.metric for t, c in task_rank_columns.items() if c.kind == "score"},
                                    settings.n_resamples, settings.seed, settings.confidence) if settings.arena else ({}, {})
    method = METHOD_TEMPLATE.format(**vars(settings))
    if any(e.noise_share is not None for named in estimates.values() for e in named.values()):
        method += TWO_LEVEL_TEMPLATE
    return Leaderboard(
        columns=columns,
        rank_column=rank_column,
        rows=tuple(rows),
        warnings=tuple(notes),
        settings=settings,
        method=method,
        task_rank_columns=task_rank_columns,
        panels=_panels(runs, task_rank_columns, task_ranks),
        length_control=controlled,
        length_undefined=uncontrolled,
        arenas=arenas,
        arena_missing=no_arena,
    )


def _length_control(runs: Sequence[Run], task_rank_columns: Mapping[str, MetricColumn], settings: LeaderboardSettings,
                    notes: list[str]) -> tuple[dict[str, TaskLengthControl], dict[str, str]]:
    """Each task's length-controlled scores of its main metric (scores only: a rate has no length slope),
    and why a task has none where its data define no length coefficient."""
    if not settings.length_control:
        return {}, {}
    found, undefined, warnings = length_control(
        runs, {task: (c.metric, c.higher_is_better) for task, c in task_rank_columns.items() if c.kind == "score"},
        n_resamples=settings.n_resamples, seed=settings.seed, confidence=settings.confidence,
    )
    notes.extend(warnings)
    return found, undefined


def _panels(
    runs: Sequence[Run], task_rank_columns: Mapping[str, MetricColumn], task_ranks: Mapping[str, Mapping[str, int]]
) -> dict[str, TaskPanel]:
    """task -> how its panel's members rank the models by the task's main metric (tasks judged by a panel)."""
    judged_by_panels = panel_tasks(runs)
    return {task: task_panel(runs, task, column.metric, column.higher_is_better, task_ranks[task])
            for task, column in task_rank_columns.items() if task in judged_by_panels}


def _replies(runs: Sequence[Run], columns: Sequence[MetricColumn]) -> dict[tuple[str, str], TaskReplies]:
    """(model, task) -> the replies behind its score-like columns (rates are whole-item outcomes)."""
    found = {}
    for run in runs:
        for task, task_run in run.tasks.items():
            metrics = [c.metric for c in columns if c.task == task and c.kind != "rate"]
            found[(run.name, task)] = task_replies(task_run, metrics)
    return found


def _with_scales(columns: Sequence[MetricColumn], replies: Mapping[tuple[str, str], TaskReplies]) -> tuple[MetricColumn, ...]:
    """Each score column with the range its runs' judges declare for it (none where they declare none, or
    declare different ones: no figure is flagged against a scale that is not the column's)."""
    declared: dict[str, set] = {}
    for (_, task), found in replies.items():
        for metric, scale in found.scales.items():
            declared.setdefault(f"{task}/{metric}", set()).add(scale)
    return tuple(replace(column, scale=next(iter(declared[column.key])))
                 if column.kind == "score" and len(declared.get(column.key, ())) == 1 else column
                 for column in columns)


def _report_urls(run: Run, report_url: ReportUrl | None) -> dict[str, str]:
    if report_url is None:
        return {}
    urls = {task: report_url(task, run.name) for task in run.tasks}
    return {task: url for task, url in urls.items() if url}


def _task_rank_columns(columns: Sequence[MetricColumn], rank_column: MetricColumn | None) -> dict[str, MetricColumn]:
    """Each task's main metric: the rank column in its own task, else the task's first main (or first) score."""
    chosen: dict[str, MetricColumn] = {}
    for task in dict.fromkeys(c.task for c in columns):
        if rank_column is not None and rank_column.task == task:
            chosen[task] = rank_column
            continue
        scores = [c for c in columns if c.task == task and c.kind == "score"]
        main = next((c for c in scores if c.main), scores[0] if scores else None)
        if main is not None:
            chosen[task] = main
    return chosen


def _columns(runs: Sequence[Run]) -> tuple[MetricColumn, ...]:
    tasks: list[str] = []
    for run in runs:
        tasks.extend(task for task in run.tasks if task not in tasks)
    metric_tasks: Counter[str] = Counter()
    specs: list[tuple[str, str]] = []
    for task in tasks:
        metrics: list[str] = []
        for run in runs:
            if task in run.tasks:
                metrics.extend(m for m in run.tasks[task].metric_names if m not in metrics)
        specs.extend((task, metric) for metric in metrics)
        metric_tasks.update(metrics)
    columns: list[MetricColumn] = []
    for task in tasks:
        task_runs = [run.tasks[task] for run in runs if task in run.tasks]
        kinds = {metric: _kind(task_runs, metric) for t, metric in specs if t == task}
        coverage = {metric: max((_coverage(t, metric) for t in task_runs), default=0) for metric in kinds}
        best_score_coverage = max((coverage[m] for m, k in kinds.items() if k == "score"), default=0)
        for metric, kind in kinds.items():
            higher = next((t.higher_is_better[metric] for t in task_runs if metric in t.higher_is_better), True)
            columns.append(
                MetricColumn(
                    task=task,
                    metric=metric,
                    kind=kind,
                    higher_is_better=higher,
                    main=kind == "score" and coverage[metric] >= best_score_coverage,
                    is_failure=kind == "rate" and bool(_FAILURE_NAME.search(metric)),
                    label=metric if metric_tasks[metric] == 1 else f"{task}/{metric}",
                )
            )
    return tuple(columns)


def _kind(task_runs: Sequence[TaskRun], metric: str) -> Literal["score", "rate", "descriptive"]:
    if any(metric in t.descriptive for t in task_runs):
        return "descriptive"
    observed = [t for t in task_runs if metric in t.values and np.isfinite(t.values[metric]).any()]
    if not observed:
        return "score"
    binary = all(set(np.unique(t.values[metric][np.isfinite(t.values[metric])])) <= {0.0, 1.0} for t in observed)
    declared_lower = any(t.higher_is_better.get(metric) is False for t in observed)
    all_bool = all(t.bool_valued.get(metric, False) for t in observed)
    return "rate" if binary and (all_bool or declared_lower) else "score"


def _coverage(task_run: TaskRun, metric: str) -> int:
    if metric in task_run.values:
        return int(np.isfinite(task_run.values[metric]).sum())
    return 1 if metric in task_run.harness_values else 0


def _estimate(
    run: Run, column: MetricColumn, settings: LeaderboardSettings, replies: Mapping[tuple[str, str], TaskReplies]
) -> Estimate:
    task_run = run.tasks.get(column.task)
    if task_run is None:
        return Estimate(None, None, None, 0, "missing")
    per_item = task_run.values.get(column.metric)
    # No per-item numbers: a run without --log_samples, or a corpus-level metric (e.g. a correlation, whose
    # items are {"judge": ..., "human": ...}); lmms-eval's aggregate is then the only value there is.
    if per_item is None or not np.isfinite(per_item).any():
        value = task_run.harness_values.get(column.metric)
        # lmms-eval writes NaN for the mean of a metric no item has (every item unjudged): no value at all.
        if value is None or not math.isfinite(value):
            return Estimate(None, None, None, 0, "missing")
        return Estimate(value, None, None, 0, "harness")
    matrix = _reply_matrix(replies, run.name, column)
    estimate = mean_estimate(per_item, settings, matrix)
    logged = replies.get((run.name, column.task))
    if matrix is None and logged is not None and column.metric in logged.unmatched:
        # k replies were logged but none averages to this metric (warned): say k, with no noise share.
        estimate = replace(estimate, replies=logged.replies_per_item)
    return estimate


def _reply_matrix(replies: Mapping[tuple[str, str], TaskReplies], name: str, column: MetricColumn) -> np.ndarray | None:
    found = replies.get((name, column.task))
    return None if found is None else found.matrices.get(column.metric)


def _rank_column(columns: Sequence[MetricColumn], rank_by: str | None) -> MetricColumn | None:
    if rank_by is None:
        return next((c for c in columns if c.main), next((c for c in columns if c.kind == "score"), None))
    matches = [c for c in columns if rank_by in (c.key, c.metric)]
    if len(matches) != 1:
        known = ", ".join(c.key for c in columns)
        problem = "matches several columns" if matches else "is not a metric of these runs"
        raise RunFileError(f"--rank-by {rank_by!r} {problem}; columns: {known}")
    return matches[0]


def _ranks(runs: Sequence[Run], column: MetricColumn | None, estimates: Mapping[str, Mapping[str, Estimate]]) -> dict[str, int]:
    """Competition ranking (1, 2, 2, 4) by the point estimate; models without a value get no rank."""
    if column is None:
        return {}
    from scipy.stats import rankdata

    named = [(run.name, estimates[run.name][column.key].value) for run in runs]
    named = [(name, value) for name, value in named if value is not None and math.isfinite(value)]
    if not named:
        return {}
    signed = np.array([-value if column.higher_is_better else value for _, value in named])
    return {name: int(rank) for (name, _), rank in zip(named, rankdata(signed, method="min"))}


@dataclass(frozen=True)
class _Aligned:
    """Two models' values (and replies, when logged) on their common items, in one order."""

    values: np.ndarray
    reference: np.ndarray
    replies: np.ndarray | None
    reference_replies: np.ndarray | None


def _aligned(
    runs: Sequence[Run], column: MetricColumn, first: str, second: str, replies: Mapping[tuple[str, str], TaskReplies]
) -> _Aligned:
    by_name = {run.name: run.tasks[column.task] for run in runs if column.task in run.tasks}
    a, b = by_name[first], by_name[second]
    assert a.item_keys is not None and b.item_keys is not None
    position_in_b = {key: i for i, key in enumerate(b.item_keys)}
    pairs = [(i, position_in_b[key]) for i, key in enumerate(a.item_keys) if key in position_in_b]
    index_a, index_b = (np.array(side, dtype=np.int64) for side in zip(*pairs)) if pairs else (np.empty(0, np.int64),) * 2
    matrix_a, matrix_b = _reply_matrix(replies, first, column), _reply_matrix(replies, second, column)
    return _Aligned(
        a.values[column.metric][index_a], b.values[column.metric][index_b],
        None if matrix_a is None else matrix_a[index_a], None if matrix_b is None else matrix_b[index_b],
    )


def _compare_with_top(
    runs: Sequence[Run],
    column: MetricColumn,
    estimates: Mapping[str, Mapping[str, Estimate]],
    settings: LeaderboardSettings,
    replies: Mapping[tuple[str, str], TaskReplies],
) -> dict[str, Comparison]:
    # Only models with per-item values can be paired; the top model is the best of those.
    testable = [
        run.name for run in runs
        if estimates[run.name][column.key].source == "samples" and estimates[run.name][column.key].value is not None
    ]
    if len(testable) < 2:
        return {}
    sign = 1.0 if column.higher_is_better else -1.0
    top = max(testable, key=lambda name: (sign * estimates[name][column.key].value, -testable.index(name)))  # type: ignore[operator]
    compared = {}
    for name in testable:
        if name == top:
            continue
        pair = _aligned(runs, column, name, top, replies)
        compared[name] = paired_comparison(pair.values, pair.reference, top, settings, pair.replies, pair.reference_replies)
    tested = [name for name, c in compared.items() if c.p_value is not None]
    adjusted = holm_adjust([compared[name].p_value for name in tested])  # type: ignore[misc]
    result: dict[str, Comparison] = {}
    for name, comparison in compared.items():
        if name in tested:
            p_adjusted = adjusted[tested.index(name)]
            comparison = _with_adjusted(comparison, p_adjusted, settings.alpha)
        result[name] = comparison
    return result


def _with_adjusted(comparison: Comparison, p_adjusted: float, alpha: float) -> Comparison:
    return Comparison(
        comparison.reference, comparison.difference, comparison.ci_low, comparison.ci_high,
        comparison.p_value, p_adjusted, comparison.n_common, p_adjusted < alpha,
    )

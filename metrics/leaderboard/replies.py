"""Which judge replies stand behind a metric's per-item values, for the leaderboard's two-level bootstrap.

A run judged with k > 1 replies per item (`judge_samples`, CAPJUDGE_JUDGE_SAMPLES) logs every reply in the
item's record (`capjudge.judges.record`: `judgment.samples`), and the item's value of a score is the mean of
its judged replies. Which reply field a metric averages is the judge's declaration (its descriptor's
`reply_fields`, logged with the record: G-VEval's `gveval_accuracy` is each reply's
`scores.accuracy`, AnyCap's `anycap_score` its `final_score`); `capjudge reliability` reads the replies
through the same declaration. The declared field is still checked against the data: on every item the metric
has a value for, the mean of the item's judged replies' field must be that value (else the metric keeps an
items-only CI, and a warning says so). A metric its judge declares no field for (or a judge capjudge does not
know) keeps an items-only CI too, with the same warning: nothing is guessed. A failed reply counts for
nothing, as in the task's mean. Rates (failed, length-capped) are whole-item outcomes, not means of replies,
and are never asked for.

The same declaration gives each metric's scale: a metric backed by one of the judge's scores (a panel member's
`metric@member` too) lies in the judge's declared `score_range` (G-VEval 0-100, AnyCap 0-4), which the
leaderboard flags figures against (`capjudge.metrics.leaderboard.scale_flags`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from capjudge.judges.descriptor import DescriptorError, JudgeDescriptor
from capjudge.judges.known_judges import judge_descriptor
from capjudge.judges.record import ReplySample, judge_of_run, replies_of
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.task_run import TaskRun, read_records
from capjudge.metrics.statistics.value_ci import Scale

_SAME = dict(rtol=1e-9, atol=1e-9)


@dataclass(frozen=True)
class TaskReplies:
    """One task run's replies: per metric backed by a reply field, the (n_items, k) matrix of the judged
    replies' values (NaN: a failed or missing reply), rows in the run's item order."""

    replies_per_item: int  # k as logged (1: one reply per item, nothing to resample)
    matrices: Mapping[str, np.ndarray]
    unmatched: tuple[str, ...] = ()  # metrics asked for that no reply field backs (k > 1 only)
    scales: Mapping[str, Scale] = field(default_factory=dict)  # metric -> its judge's declared score range


def task_replies(task_run: TaskRun, metrics: Sequence[str]) -> TaskReplies:
    """The reply matrices behind `metrics` (score-like metrics of this task run)."""
    if task_run.samples_path is None:
        return TaskReplies(1, {})
    records = read_records(task_run.samples_path)
    if task_run.item_keys is not None and len(records) != len(task_run.item_keys):
        raise RunFileError(f"{task_run.samples_path}: changed while being read ({len(records)} lines, "
                               f"{len(task_run.item_keys)} before)")
    try:
        descriptor = judge_descriptor(judge_of_run(records))
    except DescriptorError as error:
        raise RunFileError(f"{task_run.samples_path}: {error}") from error
    scales = _scales(descriptor, metrics)
    replies = [replies_of(record) for record in records]
    k = max((len(r) for r in replies), default=0)
    if k < 2:
        return TaskReplies(1, {}, scales=scales)
    declared = descriptor.reply_fields if descriptor is not None else None
    matrices: dict[str, np.ndarray] = {}
    unmatched = []
    for metric in metrics:
        values = task_run.values.get(metric)
        if values is None or not np.isfinite(values).any():
            continue  # no per-item number (a corpus-level metric, or nothing judged): nothing to resample
        backed = declared is not None and metric in declared.metrics
        matrix = reply_matrix(replies, k, declared.values[declared.metrics[metric]]) if backed else None
        if matrix is None or not _is_mean_of_replies(matrix, values):
            unmatched.append(metric)
        else:
            matrices[metric] = matrix
    return TaskReplies(k, matrices, tuple(unmatched), scales)


def _scales(descriptor: JudgeDescriptor | None, metrics: Sequence[str]) -> dict[str, Scale]:
    """metric -> the judge's declared score range, for the metrics one of its scores backs."""
    return {} if descriptor is None else {metric: Scale(*bounds) for metric, bounds in descriptor.metric_scales(metrics).items()}


def reply_matrix(replies: Sequence[Sequence[ReplySample | None]], k: int, field: str) -> np.ndarray:
    """(n_items, k): each judged reply's number at `field`, NaN for a failed or missing reply or value."""
    matrix = np.full((len(replies), k), np.nan)
    for row, item in enumerate(replies):
        for column, reply in enumerate(item):
            value = reply.value(field) if reply is not None else None
            if value is not None:
                matrix[row, column] = value
    return matrix


def _is_mean_of_replies(replies: np.ndarray, values: np.ndarray) -> bool:
    """On every item with a value, some replies were judged and their mean is the value."""
    has_value = np.isfinite(values)
    rows = replies[has_value]
    if (np.isfinite(rows).sum(axis=1) == 0).any():
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(np.nanmean(rows, axis=1), values[has_value], **_SAME))

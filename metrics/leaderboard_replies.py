"""Which judge replies stand behind a metric's per-item values, for the leaderboard's two-level bootstrap.

A run judged with k > 1 replies per item (`judge_samples`, CAPJUDGE_JUDGE_SAMPLES) logs every reply in the
item's record (`judged.judgment.samples`, see `capjudge.tasks.judged_task`), and the item's value of a score
is the mean of its judged replies. Which reply field a metric averages is the task's own business (G-VEval's
`gveval_accuracy` is each reply's `scores.accuracy`, AnyCap's `anycap_score` its `final_score`), so it is
read from the data: a reply field backs a metric when, on every item the metric has a value for, the mean
of the item's judged replies' field is that value. A failed reply counts for nothing, as in the task's mean.
Rates (failed, length-capped) are whole-item outcomes, not means of replies, and are never asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capjudge.metrics.jsonl import read_objects
from capjudge.metrics.runs import LeaderboardError, TaskRun, logged_record

_SAME = dict(rtol=1e-9, atol=1e-9)


@dataclass(frozen=True)
class TaskReplies:
    """One task run's replies: per metric backed by a reply field, the (n_items, k) matrix of the judged
    replies' values (NaN: a failed or missing reply), rows in the run's item order."""

    replies_per_item: int  # k as logged (1: one reply per item, nothing to resample)
    matrices: Mapping[str, np.ndarray]
    unmatched: tuple[str, ...] = ()  # metrics asked for that no reply field backs (k > 1 only)


def task_replies(task_run: TaskRun, metrics: Sequence[str]) -> TaskReplies:
    """The reply matrices behind `metrics` (score-like metrics of this task run)."""
    if task_run.samples_path is None:
        return TaskReplies(1, {})
    lines = read_objects(task_run.samples_path, LeaderboardError)
    if task_run.item_keys is not None and len(lines) != len(task_run.item_keys):
        raise LeaderboardError(f"{task_run.samples_path}: changed while being read ({len(lines)} lines, "
                               f"{len(task_run.item_keys)} before)")
    replies = [_judged_replies(line) for line in lines]
    k = max((len(r) for r in replies), default=0)
    if k < 2:
        return TaskReplies(1, {})
    fields = _field_matrices(replies, k)
    matrices: dict[str, np.ndarray] = {}
    unmatched = []
    for metric in metrics:
        values = task_run.values.get(metric)
        if values is None or not np.isfinite(values).any():
            continue  # no per-item number (a corpus-level metric, or nothing judged): nothing to resample
        found = _backing_field(metric, values, fields)
        if found is None:
            unmatched.append(metric)
        else:
            matrices[metric] = fields[found]
    return TaskReplies(k, matrices, tuple(unmatched))


def _judged_replies(line: Mapping[str, Any]) -> list[Mapping[str, Any] | None]:
    """The item's logged replies, a failed one as None (it has no value)."""
    judgment = logged_record(line).get("judgment")
    samples = judgment.get("samples") if isinstance(judgment, Mapping) else None
    if not isinstance(samples, list):
        return []
    return [s if isinstance(s, Mapping) and s.get("failure") is None else None for s in samples]


def _numbers(reply: Mapping[str, Any]) -> dict[str, float]:
    """The reply's numeric fields, one level of nesting included (`scores.accuracy`); booleans are flags."""
    found: dict[str, float] = {}
    for name, value in reply.items():
        inner = value.items() if isinstance(value, Mapping) else ((None, value),)
        for inner_name, number in inner:
            if isinstance(number, (int, float)) and not isinstance(number, bool) and np.isfinite(number):
                found[name if inner_name is None else f"{name}.{inner_name}"] = float(number)
    return found


def _field_matrices(replies: Sequence[Sequence[Mapping[str, Any] | None]], k: int) -> dict[str, np.ndarray]:
    fields: dict[str, np.ndarray] = {}
    for row, item_replies in enumerate(replies):
        for column, reply in enumerate(item_replies):
            if reply is None:
                continue
            for name, number in _numbers(reply).items():
                fields.setdefault(name, np.full((len(replies), k), np.nan))[row, column] = number
    return fields


def _backing_field(metric: str, values: np.ndarray, fields: Mapping[str, np.ndarray]) -> str | None:
    """The reply field whose per-item mean of judged replies is the metric's value on every item that has
    one. Two fields that agree on every item but differ reply by reply are told apart by name (the metric
    ends with the field's last part); when that does not settle it, none is used (items-only CI)."""
    has_value = np.isfinite(values)
    candidates = []
    for name, matrix in fields.items():
        rows = matrix[has_value]
        counts = np.isfinite(rows).sum(axis=1)
        if (counts == 0).any():
            continue
        with np.errstate(invalid="ignore"):
            means = np.nanmean(rows, axis=1)
        if np.allclose(means, values[has_value], **_SAME):
            candidates.append(name)
    distinct = _distinct(candidates, fields, has_value)
    if len(distinct) > 1:
        named = [name for name in distinct if metric.endswith(name.rsplit(".", 1)[-1])]
        distinct = _distinct(named, fields, has_value)
    return distinct[0] if len(distinct) == 1 else None


def _distinct(names: Sequence[str], fields: Mapping[str, np.ndarray], rows: np.ndarray) -> list[str]:
    """`names` with any whose replies repeat an earlier one's (on `rows`) dropped."""
    kept: list[str] = []
    for name in names:
        if not any(np.array_equal(fields[name][rows], fields[other][rows], equal_nan=True) for other in kept):
            kept.append(name)
    return kept

"""Which judge replies stand behind a metric's per-item values, for the leaderboard's two-level bootstrap.

A run judged with k > 1 replies per item (`judge_samples`, CAPJUDGE_JUDGE_SAMPLES) logs every reply in the
item's record (`judged.judgment.samples`, see `capjudge.tasks.judged.judged_task`), and the item's value of a score
is the mean of its judged replies. Which reply field a metric averages is said once per judge, in
`judge_reply_fields` (G-VEval's `gveval_accuracy` is each reply's `scores.accuracy`, AnyCap's `anycap_score`
its `final_score`); `capjudge reliability` reads the replies through the same table. The declared field is
still checked against the data: on every item the metric has a value for, the mean of the item's judged
replies' field must be that value (else the metric keeps an items-only CI, and a warning says so). For a
judge the table does not know (a stand-in, a new judge), or a metric it does not declare, the field is read
from the data by that same check. A failed reply counts for nothing, as in the task's mean.
Rates (failed, length-capped) are whole-item outcomes, not means of replies, and are never asked for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capjudge.judges.gveval.parser import SCORE_NAMES as GVEVAL_SCORES
from capjudge.judges.anycap.length_rule import CAPTION_TYPES
from capjudge.metrics.files.jsonl import read_objects
from capjudge.metrics.files.runs import JUDGE_FIELD, LeaderboardError, TaskRun, logged_record

_SAME = dict(rtol=1e-9, atol=1e-9)


@dataclass(frozen=True)
class JudgeReplyFields:
    """Where a judge's logged replies (`judged.judgment.samples`, one record per reply) keep their values."""

    values: Mapping[str, str]  # a value's name -> its field in a reply ("scores.accuracy": `accuracy` in `scores`)
    metrics: Mapping[str, str]  # per-item metric -> the value (a name in `values`) it is the judged replies' mean of
    scores: tuple[str, ...]  # the judge's own scores among `values`: what `capjudge reliability` measures unless told


# Keyed by the judge's name in each record's `judge` identity; the metric names carry the tasks' METRIC_PREFIX
# (capjudge.tasks.judged.gveval_task / anycap_task, which this layer does not import).
_JUDGE_REPLY_FIELDS = {
    "gveval": JudgeReplyFields(
        values={name: f"scores.{name}" for name in GVEVAL_SCORES},
        metrics={f"gveval_{name}": name for name in GVEVAL_SCORES},
        scores=GVEVAL_SCORES,
    ),
    # AnyCap's metrics average the score after the length rules (`final_score`); `judge_score` is what the
    # judge itself said. The caption's word count is the same in every reply (no judge noise in it).
    "anycap": JudgeReplyFields(
        values={"final_score": "final_score", "judge_score": "judge_score", "output_words": "output_words"},
        metrics={"anycap_score": "final_score", **{f"anycap_{kind}": "final_score" for kind in CAPTION_TYPES},
                 "anycap_output_words": "output_words"},
        scores=("final_score", "judge_score"),
    ),
}


def judge_reply_fields(judge: str | None) -> JudgeReplyFields | None:
    """Which reply field backs which metric for the judge named `judge`; None for a judge capjudge does not know."""
    return _JUDGE_REPLY_FIELDS.get(judge) if judge is not None else None


def judge_name(lines: Sequence[Mapping[str, Any]]) -> str | None:
    """The judge named in the first record that names one (a run has one judge per task)."""
    for line in lines:
        identity = logged_record(line).get(JUDGE_FIELD)
        if isinstance(identity, Mapping) and isinstance(identity.get("name"), str):
            return identity["name"]
    return None


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
    replies = [judged_replies(line) for line in lines]
    k = max((len(r) for r in replies), default=0)
    if k < 2:
        return TaskReplies(1, {})
    fields = _field_matrices(replies, k)
    declared = judge_reply_fields(judge_name(lines))
    matrices: dict[str, np.ndarray] = {}
    unmatched = []
    for metric in metrics:
        values = task_run.values.get(metric)
        if values is None or not np.isfinite(values).any():
            continue  # no per-item number (a corpus-level metric, or nothing judged): nothing to resample
        if declared is not None and metric in declared.metrics:
            field = declared.values[declared.metrics[metric]]
            found = field if field in fields and _is_mean_of_replies(fields[field], values) else None
        else:
            found = _backing_field(metric, values, fields)
        if found is None:
            unmatched.append(metric)
        else:
            matrices[metric] = fields[found]
    return TaskReplies(k, matrices, tuple(unmatched))


def judged_replies(line: Mapping[str, Any]) -> list[Mapping[str, Any] | None]:
    """The item's logged replies (none when judged once), a failed one as None (it has no value)."""
    judgment = logged_record(line).get("judgment")
    samples = judgment.get("samples") if isinstance(judgment, Mapping) else None
    if not isinstance(samples, list):
        return []
    return [s if isinstance(s, Mapping) and s.get("failure") is None else None for s in samples]


def reply_numbers(reply: Mapping[str, Any]) -> dict[str, float]:
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
            for name, number in reply_numbers(reply).items():
                fields.setdefault(name, np.full((len(replies), k), np.nan))[row, column] = number
    return fields


def _backing_field(metric: str, values: np.ndarray, fields: Mapping[str, np.ndarray]) -> str | None:
    """The reply field whose per-item mean of judged replies is the metric's value on every item that has
    one. Two fields that agree on every item but differ reply by reply are told apart by name (the metric
    ends with the field's last part); when that does not settle it, none is used (items-only CI)."""
    has_value = np.isfinite(values)
    candidates = [name for name, matrix in fields.items() if _is_mean_of_replies(matrix, values)]
    distinct = _distinct(candidates, fields, has_value)
    if len(distinct) > 1:
        named = [name for name in distinct if metric.endswith(name.rsplit(".", 1)[-1])]
        distinct = _distinct(named, fields, has_value)
    return distinct[0] if len(distinct) == 1 else None


def _is_mean_of_replies(replies: np.ndarray, values: np.ndarray) -> bool:
    """On every item with a value, some replies were judged and their mean is the value."""
    has_value = np.isfinite(values)
    rows = replies[has_value]
    if (np.isfinite(rows).sum(axis=1) == 0).any():
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.allclose(np.nanmean(rows, axis=1), values[has_value], **_SAME))


def _distinct(names: Sequence[str], fields: Mapping[str, np.ndarray], rows: np.ndarray) -> list[str]:
    """`names` with any whose replies repeat an earlier one's (on `rows`) dropped."""
    kept: list[str] = []
    for name in names:
        if not any(np.array_equal(fields[name][rows], fields[other][rows], equal_nan=True) for other in kept):
            kept.append(name)
    return kept

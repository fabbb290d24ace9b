"""One task of an lmms-eval run: its metrics, each item's value, and the judge of each item.

Nothing here is specific to one task: the metrics are whatever the task's `metric_list` (or its results) names,
and each item's value is read from the samples line (`<date>_samples_<task>.jsonl`) under the metric's name. A
value is

- a number (bool included): the item's value;
- None: the item was not judged (a judge failure, or a per-type metric on an item of another type). It is
  left out of that metric's mean and CI — never counted as 0 — and the `*_failed` rates report it;
- a dict: its `score` field (the task's lmms-eval `score_key`), else `value`. A metric with no per-item
  number at all (a corpus-level one, such as a correlation) shows lmms-eval's aggregate, without a CI.

Anything else where a number belongs (a string, NaN, an infinity, `10**400`, `-1e308`: see
`capjudge.metrics.files.values`) is refused, naming the file, the line, the item and the metric: a model is never
ranked on a log it cannot be ranked on.

Items are identified across runs by the logged record's `item_id` if the task logs one, else by lmms-eval's
`doc_id` together with the logged `target` (lmms-eval's own `doc_hash` is the same for every line in 0.7.x,
so it identifies nothing). Runs on different data therefore show up as different item sets. The lines are read by
`capjudge.metrics.files.samples_file`, the one reader of samples files: an item logged twice is refused there.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from capjudge.judges.record import (
    ITEM_ID_KEY,
    JUDGE_KEY,
    RECORD_METRIC,
    JudgedRecord,
    Judgment,
    LoggedJudge,
    RecordError,
)
from capjudge.metrics.files.run_file_error import RunFileError
# logged_record is the samples reader's; it is also imported from here by the readers written before it.
from capjudge.metrics.files.samples_file import logged_record as logged_record, read_samples
from capjudge.metrics.files.values import NotANumber, item_number

# Fields every lmms-eval samples line has; whatever else a line holds came from the task's process_results.
_LMMS_SAMPLE_FIELDS = frozenset(
    {"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "token_counts", "doc_hash", "input", "input_media"}
)
# capjudge's tasks log each item's record (`capjudge.judges.record.JudgedRecord`) as the value of one metric,
# `judged`; runs written before that layout, and other tasks, may carry `item_id` and `judge` at the top of
# the line instead (`JudgedRecord.in_line` reads both).


@dataclass(frozen=True)
class TaskRun:
    """One task of one run: per-item values of every metric, aligned with `item_keys`."""

    task: str
    metric_names: tuple[str, ...]  # in the task's order
    higher_is_better: Mapping[str, bool]
    harness_values: Mapping[str, float]  # lmms-eval's own aggregate, for runs without samples
    item_keys: tuple[str, ...] | None  # None: no samples file (run without --log_samples)
    values: Mapping[str, np.ndarray]  # metric -> (n_items,) float, NaN = no value for that item
    bool_valued: Mapping[str, bool]  # metric -> every logged value was a bool
    # judge, as it scores (LoggedJudge.as_scorer: wherever it was served) -> number of items it scored
    judges: Mapping[LoggedJudge, int]
    judge_source: Literal["samples", "config", "unknown"]
    samples_path: Path | None
    # What judging cost, summed over the logged records (requests and tokens as the API reported them; items
    # answered from the cache counted apart). Empty for runs whose records carry no usage.
    usage: Mapping[str, int] = field(default_factory=dict)
    # Metrics the task declares descriptive (`metadata.descriptive_metrics`, e.g. caption length): shown with
    # a CI, never ranked, charted or tested, since a higher value is not a better model.
    descriptive: frozenset[str] = frozenset()

    @property
    def has_samples(self) -> bool:
        return self.item_keys is not None

    @property
    def n_items(self) -> int | None:
        return None if self.item_keys is None else len(self.item_keys)



def read_task(
    task: str,
    task_results: Mapping[str, Any],
    task_config: Mapping[str, Any],
    higher_is_better: Mapping[str, Any],
    samples_path: Path,
    results_where: str,
) -> TaskRun:
    harness_values: dict[str, float] = {}
    for key, value in task_results.items():
        metric, _, _filter = key.partition(",")
        if "_stderr" in metric or metric == "alias" or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        harness_values.setdefault(metric, _aggregate(value, f"{results_where}[{key!r}]"))
    listed = [entry.get("metric") for entry in task_config.get("metric_list") or [] if isinstance(entry, Mapping)]
    metric_names = [str(m) for m in listed if m and m != RECORD_METRIC] or [m for m in harness_values if m != RECORD_METRIC]
    directions = {m: bool(higher_is_better.get(m, True)) for m in metric_names}
    for entry in task_config.get("metric_list") or []:
        if isinstance(entry, Mapping) and entry.get("metric") in directions and "higher_is_better" in entry:
            directions[entry["metric"]] = bool(entry["higher_is_better"])
    score_key = str(task_config.get("score_key") or "score")
    metadata = task_config.get("metadata") if isinstance(task_config.get("metadata"), Mapping) else {}
    descriptive = frozenset(str(m) for m in metadata.get("descriptive_metrics") or ())
    if not samples_path.is_file():
        config_judge = _judge_from_config(task_config)
        return TaskRun(
            task, tuple(metric_names), directions, harness_values, None, {}, {},
            {config_judge: 0} if config_judge else {}, "config" if config_judge else "unknown", None, descriptive,
        )
    samples = read_samples(samples_path)  # an item logged twice is refused there, as everywhere
    lines = [sample.line for sample in samples]
    if not metric_names:  # no config and no results: take what the task logged
        metric_names = sorted({k for line in lines for k in line if k not in _LMMS_SAMPLE_FIELDS and k not in (ITEM_ID_KEY, JUDGE_KEY, RECORD_METRIC)})
    values = {metric: np.full(len(lines), np.nan) for metric in metric_names}
    bool_valued = {metric: True for metric in metric_names}
    seen_value = {metric: False for metric in metric_names}
    keys: list[str] = []
    judges: Counter[LoggedJudge] = Counter()
    usage: Counter[str] = Counter()
    for position, sample in enumerate(samples):
        line_number, line, record = sample.number, sample.line, sample.record
        keys.append(_item_key(line, record))
        judge = record.judge.as_scorer() if record is not None and record.judge is not None else None
        if judge is not None:
            judges[judge] += 1
        _add_usage(usage, record.judgment if record is not None else None)
        for metric in metric_names:
            raw = line.get(metric)
            try:
                number = _number(raw, score_key)
            except NotANumber as problem:
                raise RunFileError(
                    f"{samples_path}, line {line_number} ({_item_label(line, record)}): {metric}: {problem}"
                ) from None
            if number is None:
                continue
            values[metric][position] = number
            seen_value[metric] = True
            bool_valued[metric] = bool_valued[metric] and _is_bool(raw, score_key)
    _check_score_ranges(samples, values, samples_path, score_key)
    judge_source: Literal["samples", "config", "unknown"] = "samples"
    if not judges:
        config_judge = _judge_from_config(task_config)
        judges = Counter({config_judge: len(lines)}) if config_judge else Counter()
        judge_source = "config" if config_judge else "unknown"
    return TaskRun(
        task=task,
        metric_names=tuple(metric_names),
        higher_is_better=directions,
        harness_values=harness_values,
        item_keys=tuple(keys),
        values=values,
        bool_valued={m: bool_valued[m] and seen_value[m] for m in metric_names},
        judges=dict(judges),
        usage=dict(usage),
        judge_source=judge_source,
        descriptive=descriptive,
        samples_path=samples_path,
    )


def _add_usage(usage: Counter[str], judgment: Judgment | None) -> None:
    if judgment is None or judgment.usage is None:
        return
    usage["items"] += 1
    usage["cached_items"] += int(bool(judgment.cache_hit))
    usage["requests"] += judgment.requests or 0
    usage["prompt_tokens"] += judgment.usage.prompt_tokens
    usage["completion_tokens"] += judgment.usage.completion_tokens


def read_records(samples_path: Path) -> list[JudgedRecord | None]:
    """The logged record of every line of a samples file (None: the line logs none), read by the one samples
    reader (an item logged twice is refused)."""
    return [sample.record for sample in read_samples(samples_path)]


def _item_key(line: Mapping[str, Any], record: JudgedRecord | None) -> str:
    if record is not None and record.item_id is not None:
        return f"id:{record.item_id}"
    target = line.get("target")
    return f"doc:{line.get('doc_id')}:{json.dumps(target, sort_keys=True, default=str)}"


def _item_label(line: Mapping[str, Any], record: JudgedRecord | None) -> str:
    if record is not None and record.item_id is not None:
        return f"item {record.item_id}"
    return f"doc_id {line.get('doc_id')}"


def _number(raw: Any, score_key: str) -> float | None:
    """The item's value: None when it has none (null, or an object with neither `score_key` nor `value`: a
    corpus-level metric's item); raises NotANumber for anything else that is not a usable number."""
    if isinstance(raw, Mapping):
        raw = raw.get(score_key, raw.get("value"))
    return item_number(raw)


def _aggregate(value: float, where: str) -> float:
    """lmms-eval's aggregate of a metric: NaN (its mean over no items) and infinities are kept as "no value"
    (the leaderboard shows none); a number beyond what a score can be is refused, naming where it is."""
    if isinstance(value, float) and not math.isfinite(value):
        return value
    try:
        number = item_number(value)
    except NotANumber as problem:
        raise RunFileError(f"{where}: {problem}") from None
    assert number is not None
    return number


def _is_bool(raw: Any, score_key: str) -> bool:
    if isinstance(raw, Mapping):
        raw = raw.get(score_key, raw.get("value"))
    return isinstance(raw, bool)


def _check_score_ranges(samples: Any, values: Mapping[str, np.ndarray], samples_path: Path, score_key: str) -> None:
    """Every item value of a metric one of the run's judge's scores backs lies in the judge's declared score
    range (G-VEval 0-100, AnyCap 0-4), and is a number, not true/false: a value beyond it is no score the judge
    gives, and would move a mean, a rank and a battle in silence. One RunFileError naming the line, the item and
    the range. Runs of a judge without a declared range (or none logged) are read as they are."""
    from capjudge.judges.descriptor import DescriptorError
    from capjudge.judges.known_judges import judge_descriptor
    from capjudge.judges.record import judge_of_run

    try:
        descriptor = judge_descriptor(judge_of_run([sample.record for sample in samples]))
    except DescriptorError as error:
        raise RunFileError(f"{samples_path}: {error}") from None
    if descriptor is None:
        return
    for metric, (low, high) in descriptor.metric_scales(list(values)).items():
        for position, sample in enumerate(samples):
            raw = sample.line.get(metric)
            number = values[metric][position]
            logged_bool = _is_bool(raw, score_key)  # as the reader tells a true/false value (an object's score too)
            if logged_bool or (math.isfinite(number) and not low <= number <= high):
                shown = ("true" if number else "false") if logged_bool else f"{number:g}"
                raise RunFileError(f"{samples_path}, line {sample.number} ({_item_label(sample.line, sample.record)}): "
                                   f"{metric}: {shown} is not a score of judge {descriptor.name!r}, whose scores run "
                                   f"from {low:g} to {high:g}")


def _judge_from_config(task_config: Mapping[str, Any]) -> LoggedJudge | None:
    metadata = task_config.get("metadata")
    if isinstance(metadata, list):  # some lmms-eval YAMLs write metadata as a list of one-key dicts
        metadata = {k: v for entry in metadata if isinstance(entry, Mapping) for k, v in entry.items()}
    if not isinstance(metadata, Mapping):
        return None
    if metadata.get("judge") is not None:
        try:
            judge = LoggedJudge.from_logged(metadata["judge"])
        except RecordError as problem:
            raise RunFileError(f"the task config's metadata.judge: {problem}") from None
        return judge.as_scorer() if judge is not None else None
    model = metadata.get("judge_model") or metadata.get("gpt_eval_model_name")
    return LoggedJudge(None, str(model), judge_version=_str_or_none(metadata.get("judge_version"))) if model else None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)

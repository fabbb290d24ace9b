"""The leaderboard's length-controlled column: per task, each model's main score re-predicted at the task's
reference caption length (`capjudge.metrics.statistics.length_control`), and the length coefficient beta.

What is read: each run's samples log again, line by line in the order `TaskRun.item_keys` was read (so a
line's caption lines up with its value): the caption the judge saw (the logged record's `judgment.caption`)
and lmms-eval's `target`, which for capjudge's tasks is the item's references (G-VEval: the list of
reference captions, logged by lmms-eval as the list's Python text; AnyCap: one reference caption). An item's
reference length is the median word count of its references; an item no run logs a reference for takes the
median of the models' caption lengths on it instead. Words are whitespace-separated (as the VATEX length
bias counts them).

Only items a model has a value of the main metric for enter, for that model (unjudged items are left out,
never 0). A task gets the column only when at least two models have such items; a run whose judged items
lack a logged caption (a log without records, or records without captions) takes the column away from its
task, with a warning naming the run: a model's length cannot be guessed, and fitting beta without it would
not be "across all models". A caption that is logged but is not text is already refused when the run is
read (`capjudge.metrics.files.task_run`).

A few items identify no beta (`capjudge.metrics.statistics.length_control.IDENTIFICATION_RULE`: too few items
per model, or too many bootstrap resamples undefined): the task keeps the column, which says "not
identified" with no number, the note under the table says why, and no change of order is claimed.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from capjudge.judges.jsonl import numbered_objects
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.runs import Run
from capjudge.metrics.files.task_run import TaskRun, logged_record
from capjudge.metrics.statistics.clusters import ClusterError
from capjudge.metrics.statistics.length_control import (
    IDENTIFICATION_RULE,
    LengthControlled,
    length_controlled,
)

METHOD = (
    "Length-controlled: each model's mean {metric} re-predicted at the task's reference caption length, from "
    "one regression over all models' judged items: score = model effect + item effect + beta x z + error, z "
    "the caption's standardised log word count (so beta is {metric} points per SD of log words); "
    "LC = mean score - beta x mean(z - z_ref) over the model's items, z_ref the item's reference length "
    "({reference}) on the same scale. Brackets: {confidence:.0%} percentile CI from an item bootstrap "
    "({n_resamples} resamples, seed {seed}) that re-estimates beta and every mean in each resample. Shown only "
    "where the data identify beta: " + IDENTIFICATION_RULE + "."
)
# After "TASK: " in the warning of a task whose column a run's unlogged captions took away (the page's plot
# note names that reason when it finds this warning).
NO_CAPTIONS_WARNING = "no length-controlled column: the judged captions are not logged"


@dataclass(frozen=True)
class TaskLengthControl:
    task: str
    metric: str
    higher_is_better: bool
    fit: LengthControlled
    n_by_reference: int  # items whose reference length is their references' median word count
    flips: tuple[tuple[str, str], ...]  # (above raw, above length-controlled): pairs whose order changes

    @property
    def identified(self) -> bool:
        """Whether the data identify beta (`IDENTIFICATION_RULE`): else no score is shown, no flip claimed."""
        return self.fit.not_identified is None

    @property
    def reference_text(self) -> str:
        n = self.fit.n_items
        if self.n_by_reference == n:
            return "the median word count of the item's reference captions"
        if self.n_by_reference == 0:
            return "no reference captions are logged, so the median of the models' caption lengths on the item"
        return (f"the median word count of the item's reference captions for {self.n_by_reference} of {n} items, "
                f"the median of the models' caption lengths on the other {n - self.n_by_reference}")


@dataclass(frozen=True)
class _Captions:
    """One model's judged items of a task: item key, main-metric value, caption words, references' words."""

    keys: list[str]
    values: list[float]
    words: list[int]
    references: dict[str, float]  # item key -> median reference word count (items with references)


def length_control(
    runs: Sequence[Run], main_metrics: Mapping[str, tuple[str, bool]], *, n_resamples: int, seed: int,
    confidence: float,
) -> tuple[dict[str, TaskLengthControl], dict[str, str], list[str]]:
    """task -> its length control, for every task of `main_metrics` (task -> (metric, higher is better))
    where it is defined; task -> why not, where the data define no length coefficient (every model's
    captions as long as its others on every item: said under the task's table, not a warning: nothing is
    wrong with the runs); and one warning per run whose judged captions are not logged."""
    found: dict[str, TaskLengthControl] = {}
    undefined: dict[str, str] = {}
    warnings: list[str] = []
    for task, (metric, higher) in main_metrics.items():
        models: dict[str, _Captions] = {}
        missing: list[str] = []
        for run in runs:
            task_run = run.tasks.get(task)
            if task_run is None or task_run.samples_path is None or metric not in task_run.values:
                continue
            captions = _captions(task_run, metric)
            if isinstance(captions, str):
                missing.append(f"{run.name!r} ({captions})")
            elif captions.keys:
                models[run.name] = captions
        if missing:
            warnings.append(f"{task}: {NO_CAPTIONS_WARNING} in the run of " + "; ".join(missing))
            continue
        if len(models) < 2:
            continue
        try:
            found[task] = _fit(task, metric, higher, models, n_resamples, seed, confidence)
        except ClusterError as problem:
            undefined[task] = f"No length-controlled column: {problem}."
    return found, undefined, warnings


def _captions(task_run: TaskRun, metric: str) -> _Captions | str:
    """The model's judged items with their captions, or what is missing (naming the first such item)."""
    assert task_run.samples_path is not None and task_run.item_keys is not None
    values = task_run.values[metric]
    result = _Captions([], [], [], {})
    for position, (number, line) in enumerate(numbered_objects(task_run.samples_path, RunFileError)):
        key = task_run.item_keys[position]
        references = _references(line.get("target"))
        if references:
            result.references[key] = float(np.median([len(r.split()) for r in references]))
        if not np.isfinite(values[position]):
            continue
        record = logged_record(line, f"{task_run.samples_path}, line {number}")
        caption = record.judgment.caption if record is not None and record.judgment is not None else None
        if caption is None:
            return f"{task_run.samples_path}, line {number}: no judged caption logged"
        result.keys.append(key)
        result.values.append(float(values[position]))
        result.words.append(len(caption.split()))
    return result


def _references(target: Any) -> list[str]:
    """The item's reference captions from lmms-eval's logged `target`: a list of texts, that list as the
    Python text lmms-eval writes it, or one text; anything else is no reference."""
    if isinstance(target, str) and target.startswith("["):
        try:
            target = ast.literal_eval(target)
        except (ValueError, SyntaxError):
            return []
    if isinstance(target, str):
        return [target] if target.strip() else []
    if isinstance(target, list) and target and all(isinstance(t, str) and t.strip() for t in target):
        return target
    return []


def _fit(task: str, metric: str, higher: bool, models: Mapping[str, _Captions], n_resamples: int, seed: int,
         confidence: float) -> TaskLengthControl:
    references: dict[str, float] = {}
    for captions in models.values():
        for key, words in captions.references.items():
            references.setdefault(key, words)
    lengths: dict[str, list[int]] = {}
    for captions in models.values():
        for key, words in zip(captions.keys, captions.words):
            lengths.setdefault(key, []).append(words)
    reference = {key: references.get(key, float(np.median(words))) for key, words in lengths.items()}
    names = [name for name, c in models.items() for _ in c.keys]
    keys = [key for c in models.values() for key in c.keys]
    fit = length_controlled(
        [v for c in models.values() for v in c.values], [w for c in models.values() for w in c.words],
        [reference[key] for key in keys], names, keys, n_resamples=n_resamples, seed=seed, confidence=confidence,
    )
    # No order change is claimed from scores that are not results.
    flips = _flips(fit, higher) if fit.not_identified is None else ()
    return TaskLengthControl(task, metric, higher, fit, sum(key in references for key in lengths), flips)


def _flips(fit: LengthControlled, higher: bool) -> tuple[tuple[str, str], ...]:
    sign = 1.0 if higher else -1.0
    names = sorted(fit.raw)
    flips = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            raw = np.sign(sign * (fit.raw[a] - fit.raw[b]))
            controlled = np.sign(sign * (fit.scores[a].value - fit.scores[b].value))  # type: ignore[operator]
            if raw != 0 and controlled != 0 and raw != controlled:
                flips.append((a, b) if raw > 0 else (b, a))
    return tuple(flips)


def length_note(control: TaskLengthControl, places: int, n_resamples: int, seed: int, confidence: float) -> str:
    """The sentence under a task's table: beta with its interval, the order changes, then the method; or,
    where the data do not identify beta, that it is not identified and why (no number, no order change)."""
    method = METHOD.format(metric=control.metric, reference=control.reference_text, confidence=confidence,
                           n_resamples=n_resamples, seed=seed)
    why = control.fit.not_identified
    if why is not None:
        return (f"Length coefficient beta not identified ({control.fit.n_observations} captions of "
                f"{control.fit.n_items} items): {why}. No length-controlled score is shown and no change of "
                f"order is claimed. {method}")
    beta = control.fit.beta
    interval = (f" [{beta.ci_low:+.{places}f}, {beta.ci_high:+.{places}f}]"
                if beta.ci_low is not None and beta.ci_high is not None else "")
    undefined = f"; {control.fit.n_undefined} resamples undefined" if control.fit.n_undefined else ""
    parts = [(f"Length coefficient beta = {beta.value:+.{places}f}{interval} {control.metric} per SD of log words "
              f"({control.fit.n_observations} captions of {control.fit.n_items} items{undefined}).")]
    if control.flips:
        parts.append("Order changes between the raw and the length-controlled ranking: " + "; ".join(
            f"{raw} above {other} raw, {other} above {raw} length-controlled" for raw, other in control.flips) + ".")
    else:
        parts.append("The length-controlled ranking orders every pair of models as the raw one does.")
    parts.append(method)
    return " ".join(parts)

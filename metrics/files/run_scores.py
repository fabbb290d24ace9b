"""Per-item judge scores read back from a judged run, for `capjudge correlate --run`: the run's judge, or for a
run judged by a panel (capjudge.judges.client.panel) the panel and each of its members, one scorer each.

A run is an lmms-eval output (a results JSON, or a folder holding exactly one) whose task logged its samples
(`--log_samples`, or `capjudge judge`). Each line's record names the item (`judged.item_id`) and the judge;
the scorer's value is the judge's main metric for the item (its descriptor's `main_metric`, e.g.
`gveval_mean`), and a member's is `<main>@<member>`. An unjudged item has no value (None), never 0. A line that
is not a usable record, or a value that is not a number, is a RunFileError naming the file and line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from capjudge.judges.client.panel import member_metric
from capjudge.judges.known_judges import judge_descriptor
from capjudge.metrics.files.judged_by import judged_by_record
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.runs import find_results_files, samples_path
from capjudge.metrics.files.samples_file import read_samples
from capjudge.metrics.files.values import NotANumber, item_number


@dataclass(frozen=True)
class RunScores:
    """Scorer -> {item id -> score or None}, in the run's item order; `members`: the panel's member names
    (empty for a run with one judge, whose scorer is `judge_label`)."""

    task: str
    metric: str
    scores: Mapping[str, Mapping[str, float | None]]
    members: tuple[str, ...]
    samples: Path


def run_scores(path: Path, task: str, judge_label: str = "judge") -> RunScores:
    """The scores of `task` in the run at `path`: `judge_label` for a one-judge run, else "panel" and each
    member by its name."""
    files = find_results_files(Path(path))
    if len(files) != 1:
        raise RunFileError(f"{path}: holds {len(files)} results files; name one run (its *_results.json)")
    samples = samples_path(files[0], task)
    if not samples.is_file():
        raise RunFileError(f"{files[0]}: no samples of task {task!r} beside it ({samples.name}); "
                               "was the run made with --log_samples?")
    lines = read_samples(samples)  # an item logged twice is refused there, as by every reader of runs
    if not lines:
        raise RunFileError(f"{samples}: no items")
    first = lines[0]
    descriptor = judge_descriptor(first.record.judge if first.record is not None else None)
    metric = descriptor.main_metric if descriptor is not None else None
    if metric is None:
        raise RunFileError(f"{first.where}: no judge record naming a known judge; "
                               "cannot tell which metric is the judge's score")
    judged_by = judged_by_record(first.line, first.where)
    # The run's own values are its one judge's, or the panel's (pooled); a panel's members' come after them.
    members = judged_by.logged_apart
    own = "panel" if judged_by.pooled else judge_label
    fields = {own: metric, **{m: member_metric(metric, m) for m in members}}
    scores: dict[str, dict[str, float | None]] = {name: {} for name in fields}
    for sample in lines:
        where, line, record = sample.where, sample.line, sample.record
        if record is None or record.item_id is None:
            raise RunFileError(f"{where}: no judged record with an item id")
        for name, field in fields.items():
            if field not in line:
                raise RunFileError(f"{where}: no {field!r} (the run's {'panel member ' + name if name in members else 'judge'})")
            try:
                scores[name][str(record.item_id)] = item_number(line[field])
            except NotANumber as problem:
                raise RunFileError(f"{where}: {field}: {problem}") from None
    return RunScores(task, metric, scores, members, samples)


"""What a leaderboard warns about: scores from capjudge's embedded judge (a pipeline check, not a judge), tasks
not run or run without per-sample logs, different item sets, different judges or settings, high failure rates,
k > 1 replies that no metric can be traced to, and models left unranked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from capjudge.judges.text import EMBEDDED_JUDGE_CAVEAT, EMBEDDED_JUDGE_MODEL, plural
from capjudge.metrics.files.runs import Run
from capjudge.metrics.leaderboard.replies import TaskReplies
from capjudge.metrics.leaderboard.stats import Estimate, LeaderboardSettings
from capjudge.metrics.leaderboard.table import LeaderboardRow, MetricColumn


def consistency_warnings(
    runs: Sequence[Run], columns: Sequence[MetricColumn], estimates: Mapping[str, Mapping[str, Estimate]], settings: LeaderboardSettings
) -> list[str]:
    notes = embedded_judge_warnings(runs)  # first: it says what every score on the page is worth
    tasks = list(dict.fromkeys(c.task for c in columns))
    for task in tasks:
        present = [run for run in runs if task in run.tasks]
        absent = [run.name for run in runs if task not in run.tasks]
        if absent:
            notes.append(f"{task}: not run for {', '.join(absent)}")
        without_samples = [run.name for run in present if not run.tasks[task].has_samples]
        if without_samples:
            notes.append(
                f"{task}: no per-sample log for {', '.join(without_samples)} (run lmms-eval with --log_samples); "
                "their values are lmms-eval's aggregates, with no CI and no test"
            )
        notes.extend(_item_set_warnings(task, [run for run in present if run.tasks[task].has_samples], columns))
        notes.extend(_judge_warnings(task, present))
    for column in columns:
        if not column.is_failure:
            continue
        for run in runs:
            estimate = estimates[run.name][column.key]
            if estimate.value is not None and estimate.value > settings.failure_warn_rate:
                notes.append(
                    f"{run.name}: {column.label} is {estimate.value:.1%} (above {settings.failure_warn_rate:.0%}); "
                    "its scores cover only the items the judge scored"
                )
    return notes


def embedded_judge_warnings(runs: Sequence[Run]) -> list[str]:
    """The embedded judge's caveat, when a task's scores are its: known by the judge model the runs logged
    (`judge.model`), not by the command that ran, so any page built from such runs says it (the demo's
    leaderboard and report, and `capjudge leaderboard` or `capjudge report` over those runs later)."""
    tasks = list(dict.fromkeys(task for run in runs for task, task_run in run.tasks.items()
                               if any(judge.model == EMBEDDED_JUDGE_MODEL for judge in task_run.judges)))
    if not tasks:
        return []
    return [f"{', '.join(tasks)}: judged by {EMBEDDED_JUDGE_MODEL}, {EMBEDDED_JUDGE_CAVEAT}. For scores that mean "
            "something, judge with a real model (a vision model for frames; `capjudge demo --remote-judge` with "
            "one configured)"]


def _item_set_warnings(task: str, runs: Sequence[Run], columns: Sequence[MetricColumn]) -> list[str]:
    if len(runs) < 2:
        return []
    notes = []
    item_sets = {run.name: set(run.tasks[task].item_keys or ()) for run in runs}
    if len({frozenset(s) for s in item_sets.values()}) > 1:
        common = set.intersection(*item_sets.values())
        sizes = ", ".join(f"{name} {len(items)}" for name, items in item_sets.items())
        notes.append(
            f"{task}: models were run on different item sets ({sizes} items; {len(common)} in common); "
            "paired tests use only the common items"
        )
    main = next((c for c in columns if c.task == task and c.main), None)
    if main is not None:
        judged = {}
        for run in runs:
            task_run = run.tasks[task]
            values = task_run.values.get(main.metric)
            if values is not None:
                judged[run.name] = {key for key, v in zip(task_run.item_keys or (), values) if np.isfinite(v)}
        if len({frozenset(s) for s in judged.values()}) > 1 and len({frozenset(s) for s in item_sets.values()}) == 1:
            sizes = ", ".join(f"{name} {len(items)}" for name, items in judged.items())
            notes.append(f"{task}: models were judged on different item sets ({main.metric} present for: {sizes})")
    return notes


def _judge_warnings(task: str, runs: Sequence[Run]) -> list[str]:
    notes = []
    per_run = {run.name: run.tasks[task].judges for run in runs}
    for name, judges in per_run.items():
        if len(judges) > 1:
            labels = "; ".join(f"{j.label()} ({plural(count, 'item')})" for j, count in judges.items())
            notes.append(f"{task}: {name} was judged by more than one judge or setting: {labels}")
    unknown = [name for name, judges in per_run.items() if not judges]
    known = {name: frozenset(judges) for name, judges in per_run.items() if judges}
    if len(set(known.values())) > 1:
        labels = "; ".join(f"{name}: {', '.join(sorted(j.label() for j in judges))}" for name, judges in known.items())
        notes.append(f"{task}: models were judged by different judge models or settings ({labels})")
    if unknown and len(runs) > 1:
        notes.append(f"{task}: the judge is not recorded for {', '.join(unknown)}; cannot check it matches the others")
    return notes


def reply_warnings(replies: Mapping[tuple[str, str], TaskReplies]) -> list[str]:
    """A run with k > 1 replies per item whose metric cannot be traced to a reply field keeps an items-only
    CI for it, and says so (its judge-noise share is not measurable)."""
    notes = []
    for (name, task), found in replies.items():
        if found.replies_per_item > 1 and found.unmatched:
            notes.append(
                f"{task}: {name} was judged with {found.replies_per_item} replies per item, but no reply value "
                f"averages to {', '.join(found.unmatched)} on every item; those CIs resample items only and "
                "their judge noise is not measured"
            )
    return notes


def unranked_warnings(
    rows: Sequence[LeaderboardRow], columns: Sequence[MetricColumn], rank_column: MetricColumn | None
) -> list[str]:
    """A model with no value for the rank metric (typically: the judge failed on every item) is listed, last
    and without a rank, with its failure rate, so a dead judge shows up as such and never as a low score."""
    if rank_column is None:
        return []
    failure_columns = [c for c in columns if c.task == rank_column.task and c.is_failure]
    notes = []
    for row in rows:
        if row.rank is not None:
            continue
        rates = [
            f"{c.label} {row.estimates[c.key].value:.1%}" for c in failure_columns
            if row.estimates[c.key].value is not None
        ]
        failure = f" ({'; '.join(rates)})" if rates else ""
        notes.append(f"{row.name}: unranked, no judged item has a value for {rank_column.label}{failure}")
    return notes

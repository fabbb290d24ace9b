"""The per-item report: every item of a set of runs, with what the judge saw, said and decided, per model.

    report = build_item_report(["results/runs/good", "results/runs/poor"], out=Path("report"))
    write_page(report, Path("report"))        # capjudge.metrics.item_report.page: report/report.html + report/frames/

Input is what the runs logged: lmms-eval output folders written with `--log_samples`, or `capjudge judge`
output folders (the same shape). Runs are read by `capjudge.metrics.files.runs`, so a model is named exactly as in
the leaderboard and a leaderboard row can link to its items (`items_link`). Items are paired across runs by the
same key the leaderboard uses (the logged item id).

One section per task: runs of different tasks side by side are kept apart, and a section names the runs that
did not run its task. A run whose task has no samples file (run without `--log_samples`) is an error naming
the run: without per-item lines there is nothing to show.

A run judged by a panel of judges shows, per item, each member's judgment beside the panel's and which members
the panel pooled, and per task how its members agreed (capjudge.metrics.item_report.panel).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
from capjudge.metrics.item_report.frames import (
    VIDEO_FAILURES,
    FrameRenderer,
    FrameRequest,
    VisualInput,
    frame_request,
)
from capjudge.judges.known_judges import judge_descriptor
from capjudge.judges.record import JudgedRecord, Judgment, LoggedJudge
from capjudge.metrics.item_report.panel import (
    PanelJudgment,
    PanelRecordError,
    RunPanelAgreement,
    logged_panel_judgment,
    run_panel_agreement,
)
from capjudge.metrics.item_report.views import JudgmentView, view_judgment
from capjudge.judges.jsonl import numbered_objects
from capjudge.metrics.files.judged_by import JudgedBy, judged_by_record
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.runs import Run, read_runs
from capjudge.metrics.files.task_run import TaskRun, logged_record
from capjudge.metrics.leaderboard.caveats import embedded_judge_warnings

PAGE_NAME = "report.html"


class ReportError(ValueError):
    """The runs cannot make an item report; the message names the run and what is missing."""


@dataclass(frozen=True)
class ModelJudgment:
    """One model's caption for an item and how it was judged."""

    model: str
    score: float | None  # the item's value of the task's main metric (None: unjudged)
    judge: int  # index into the section's `judges`
    view: JudgmentView
    panel: PanelJudgment | None = None  # a panel run's: each member's judgment (the page's data has it only then)


@dataclass(frozen=True)
class ReportItem:
    task: str
    item_id: str
    instruction: str | None  # None: the run did not log the prompt
    references: tuple[str, ...]
    caption_type: str | None
    visual: VisualInput
    judgments: tuple[ModelJudgment, ...]  # in the section's model order; models without the item left out
    disagreement: float | None  # max - min of the main score across models (None: fewer than two scored)
    spread: float | None  # the largest spread of k replies among the models (None: k = 1)


@dataclass(frozen=True)
class ReportSection:
    task: str
    main_metric: str
    higher_is_better: bool
    models: tuple[str, ...]
    absent_models: tuple[str, ...]  # runs in the report that did not run this task
    judges: tuple[LoggedJudge, ...]  # as logged, less its descriptor and capjudge release (see _section)
    items: tuple[ReportItem, ...]
    panels: tuple[RunPanelAgreement, ...] = ()  # per run judged by a panel, its members' agreement


@dataclass(frozen=True)
class RunSource:
    name: str
    results: tuple[str, ...]


@dataclass(frozen=True)
class ItemReport:
    sections: tuple[ReportSection, ...]
    runs: tuple[RunSource, ...]
    warnings: tuple[str, ...]


def items_link(task: str, model: str | None = None, page: str = PAGE_NAME) -> str:
    """The address of a task's items (of one model) in the report, for a leaderboard row to link to.

    `report.html#task=<task>&model=<model>` (URL-encoded): the page opens with its task and model filters set
    to these and scrolls to the task's section."""
    fragment = f"task={quote(task, safe='')}"
    if model is not None:
        fragment += f"&model={quote(model, safe='')}"
    return f"{page}#{fragment}"


def build_item_report(arguments: Sequence[str], out: Path, videos_dir: Path | None = None) -> ItemReport:
    """Read the runs (`PATH` or `NAME=PATH` each), re-render the judges' visual input under `out`, and
    collect every item per task. Raises ReportError naming the run for unusable input."""
    try:
        runs, warnings = read_runs(arguments)
    except RunFileError as error:
        raise ReportError(str(error)) from None
    for run in runs:
        for task, task_run in run.tasks.items():
            if not task_run.has_samples:
                raise ReportError(
                    f"run {run.name} ({run.results_path}): task {task} has no per-item samples file "
                    f"(*_samples_{task}.jsonl); the report needs lmms-eval's --log_samples (or a `capjudge judge` output)"
                )
    renderer = FrameRenderer(out, videos_dir)
    tasks = list(dict.fromkeys(task for run in runs for task in run.tasks))
    sections = tuple(_section(task, runs, renderer) for task in tasks)
    sources = tuple(RunSource(run.name, tuple(str(p) for p in run.results_paths)) for run in runs)
    # The leaderboard's caveat of the embedded judge, so the page of its items says it too (the page lists these).
    return ItemReport(sections, sources, (*embedded_judge_warnings(runs), *warnings))


@dataclass(frozen=True)
class _Logged:
    """One sample line of one model, with its main-metric value."""

    line: Mapping[str, Any]
    record: JudgedRecord | None  # None: the line logs no record
    score: float | None
    where: str  # "run NAME: FILE, line N", for messages
    judged_by: JudgedBy  # who judged it: one judge, or a panel whose members' judgments it pools


def _section(task: str, runs: Sequence[Run], renderer: FrameRenderer) -> ReportSection:
    having = [run for run in runs if task in run.tasks]
    first = having[0].tasks[task]
    main_metric = first.metric_names[0] if first.metric_names else "score"
    per_model = {run.name: _logged_items(run, run.tasks[task], main_metric) for run in having}
    judges: list[LoggedJudge] = []

    def judge_index(judge: LoggedJudge | None) -> int:
        # A judge is told apart by what the page shows of it (name, model, endpoint, version, settings): records
        # that differ only in the descriptor facts or capjudge release they log are one judge here.
        identity = LoggedJudge(None, None) if judge is None else replace(judge, descriptor=None, capjudge_version=None)
        if identity not in judges:
            judges.append(identity)
        return judges.index(identity)

    order = list(dict.fromkeys(key for logged in per_model.values() for key in logged))
    entries_of = {key: [(model, logged[key]) for model, logged in per_model.items() if key in logged] for key in order}
    renderer.render_all([(task, *_frames_shown(entries)) for entries in entries_of.values()])
    items = []
    for entries in entries_of.values():
        judgments = []
        for model, entry in entries:
            judge = entry.record.judge if entry.record is not None else None
            index = judge_index(judge)  # the panel's (or the one judge's) before its members'
            judgments.append(ModelJudgment(model, entry.score, index,
                                           view_judgment(judge_descriptor(judge), _judgment(entry.record)),
                                           _panel_judgment(entry, main_metric, judge_index)))
        items.append(_item(task, entries, judgments, renderer))
    return ReportSection(
        task=task, main_metric=main_metric, higher_is_better=first.higher_is_better.get(main_metric, True),
        models=tuple(run.name for run in having), absent_models=tuple(run.name for run in runs if task not in run.tasks),
        judges=tuple(judges), items=tuple(items),
        panels=tuple(_panel_agreement(run.name, run.tasks[task], per_model[run.name]) for run in having
                     if any(entry.judged_by.pooled for entry in per_model[run.name].values())),
    )


def _logged_items(run: Run, task_run: TaskRun, main_metric: str) -> dict[str, _Logged]:
    assert task_run.samples_path is not None and task_run.item_keys is not None
    lines = numbered_objects(task_run.samples_path, ReportError)
    values = task_run.values.get(main_metric)
    logged = {}
    for position, (key, (number, line)) in enumerate(zip(task_run.item_keys, lines)):
        score = None if values is None or np.isnan(values[position]) else float(values[position])
        where = f"run {run.name}: {task_run.samples_path}, line {number}"
        try:
            record = logged_record(line, f"{task_run.samples_path}, line {number}")
            judged_by = judged_by_record(line, f"{task_run.samples_path}, line {number}")
        except RunFileError as error:
            raise ReportError(f"run {run.name}: {error}") from None
        logged[key] = _Logged(line, record, score, where, judged_by)
    return logged


def _panel_judgment(entry: _Logged, main_metric: str,
                    judge_index: Callable[[LoggedJudge | None], int]) -> PanelJudgment | None:
    """Each member's judgment of a pooled item (the page's data has it only then); None for one judge's: its
    one member's judgment is the model's own."""
    if not entry.judged_by.pooled:
        return None
    try:
        return logged_panel_judgment(entry.line, entry.record, entry.judged_by, main_metric, judge_index)
    except PanelRecordError as error:
        raise ReportError(f"{entry.where}: {error}") from None


def _panel_agreement(model: str, task_run: TaskRun, logged: Mapping[str, _Logged]) -> RunPanelAgreement:
    """The agreement of the panel that judged the run's first pooled item (a run's task has one judge, or one
    panel)."""
    entry = next(entry for entry in logged.values() if entry.judged_by.pooled)
    descriptor = judge_descriptor(entry.record.judge if entry.record is not None else None)
    return run_panel_agreement(model, task_run, entry.judged_by, descriptor.score_level if descriptor is not None else None)


def _item(task: str, entries: list[tuple[str, _Logged]], judgments: list[ModelJudgment],
          renderer: FrameRenderer) -> ReportItem:
    line = entries[0][1].line
    item_id, frames = _frames_shown(entries)
    scores = np.array([j.score for j in judgments if j.score is not None], dtype=float)
    spreads = [j.view.spread for j in judgments if j.view.spread is not None]
    return ReportItem(
        task=task,
        item_id=item_id,
        instruction=line.get("input") if isinstance(line.get("input"), str) else None,
        references=_references(line.get("target")),
        caption_type=next((j.view.caption_type for j in judgments if j.view.caption_type), None),
        visual=renderer.render(task, item_id, frames),
        judgments=tuple(judgments),
        disagreement=float(np.ptp(scores)) if scores.size >= 2 else None,
        spread=max(spreads) if spreads else None,
    )


def _frames_shown(entries: list[tuple[str, _Logged]]) -> tuple[str, FrameRequest]:
    """The item's id, and the frames its judge saw: from a model whose judge saw them, when one did (another
    model's judgment may have failed on the video, or its judge model may have dropped the images)."""
    line, record = entries[0][1].line, entries[0][1].record
    item_id = record.item_id if record is not None and record.item_id is not None else str(line.get("doc_id"))
    requests = [frame_request(entry.record.judge if entry.record is not None else None, _judgment(entry.record))
                for _, entry in entries]
    sent = [request for request in requests if request.failure not in VIDEO_FAILURES]
    return item_id, next((request for request in sent if not request.images_dropped), (sent or requests)[0])


def _judgment(record: JudgedRecord | None) -> Judgment | None:
    return record.judgment if record is not None else None


def _references(target: Any) -> tuple[str, ...]:
    """lmms-eval logs the task's target as it is, or as str() of a list (G-VEval's references)."""
    if isinstance(target, str) and target.startswith("["):
        try:
            target = ast.literal_eval(target)
        except (ValueError, SyntaxError):
            return (target,)
    if isinstance(target, (list, tuple)):
        return tuple(str(t) for t in target)
    return () if target is None else (str(target),)

"""The per-item sensitivity page: for every item, its original caption and each perturbed caption in one table,
each with every scorer's judgment (every score, the parse outcome, the reply; with a panel the panel's combined
judgment and each member's), the shift of each score against the original, and the perturbation's expected
direction, with a mark where the judge moved the wrong way.

Built from the checked file (`items_file.read_sensitivity_file`), with the item report's page machinery
(`capjudge.metrics.item_report.page.fill_page`: one self-contained HTML file, its Content-Security-Policy
forbidding any request, the data inlined as JSON and drawn through textContent), its stylesheet and its shared
script helpers. An unjudged caption shows its failure and no score (never 0), and its shifts are not measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.metrics.item_report.page import fill_page, script_json
from capjudge.metrics.sensitivity.items_file import FileCaption, FileItem, FileJudgment, SensitivityFile
from capjudge.metrics.sensitivity.outputs import STAMP_KEY, run_stamp
from capjudge.metrics.sensitivity.perturbations import changes_nothing
from capjudge.metrics.sensitivity.shifts import moved_soundly, moved_wrong_way

PAGE_SUFFIX = ".html"  # the page is the report file's name with this suffix: sensitivity_<task>.html
_TEMPLATE = "sensitivity_items.html"
_STYLES = ("item_report.css", "sensitivity_items.css")
_SCRIPTS = ("page_common.js", "sensitivity_items.js")


def page_title(report: SensitivityFile) -> str:
    return f"What fools the judge, item by item: {report.judge} on {report.task}"


def file_stamp(report: SensitivityFile) -> str:
    """The stamp of the run that wrote the file (`outputs.run_stamp`), which its page carries."""
    return run_stamp(report.task, report.judge, report.command,
                     [(item.item_id, item.original.text) for item in report.items])


def unchanged_counts(report: SensitivityFile) -> dict[str, int]:
    """Perturbation -> its variants that changed nothing (no test of the judge), read off the texts."""
    return {p.name: sum(changes_nothing(item.original.text, item.variants[position].text) for item in report.items)
            for position, p in enumerate(report.perturbations)}


def page_data(report: SensitivityFile) -> dict[str, Any]:
    """What the page's script draws: the run, the shift table, and per item every caption and judgment. The
    run's stamp comes first: `outputs.page_found` reads it from the start of the data without parsing it all."""
    return {
        STAMP_KEY: file_stamp(report),
        "file": report.path.name,
        "format_version": report.format_version,
        "task": report.task,
        "judge": report.judge,
        "command": report.command,
        "seed": report.seed,
        "n_resamples": report.n_resamples,
        "confidence": report.confidence,
        "scorers": list(report.scorers),
        "perturbations": [{"name": p.name, "describe": p.describe,
                           "expectations": [list(pair) for pair in p.expectations]} for p in report.perturbations],
        "unchanged": unchanged_counts(report),
        "shifts": [{"scorer": s.scorer, "perturbation": s.perturbation, "dimension": s.dimension,
                    "expected": s.expected, "mean_shift": s.mean_shift, "ci": list(s.ci),
                    "share_wrong_way": s.share_wrong_way, "verdict": s.verdict, "passed": s.passed,
                    "n_candidates": s.n_candidates, "n_left_out": s.n_left_out, "n_unchanged": s.n_unchanged,
                    "not_measured": s.not_measured} for s in report.shifts],
        "items": [_item(report, item) for item in report.items],
    }


@dataclass(frozen=True)
class WrittenPage:
    path: Path
    items: int
    items_moved_wrong_way: int  # items where some scorer moved some score the wrong way


def render_sensitivity_page(report: SensitivityFile, data: dict[str, Any] | None = None) -> str:
    data = page_data(report) if data is None else data
    return fill_page(_TEMPLATE, page_title(report), _STYLES, _SCRIPTS, script_json(data))


def page_path(report_file: Path) -> Path:
    """Where the page of a report file goes beside it: its name with .html for .json."""
    return report_file.with_suffix(PAGE_SUFFIX)


def write_sensitivity_page(report: SensitivityFile, page: Path) -> WrittenPage:
    """Write the page whole or not at all (a reader never finds half a page)."""
    from capjudge.judges.atomic_files import write_replacing

    data = page_data(report)
    write_replacing(page, render_sensitivity_page(report, data))
    return WrittenPage(page, len(data["items"]), sum(1 for item in data["items"] if item["wrong_way"]))


# ---------------------------------------------------------------------------------------------------------


def _dimensions(item: FileItem) -> list[str]:
    """Every score any scorer gave any caption of the item, in the order first given."""
    names: dict[str, None] = {}
    for caption in (item.original, *item.variants):
        for judgment in caption.judgments.values():
            names.update(dict.fromkeys(name for name, _ in judgment.scores))
    return list(names)


def _item(report: SensitivityFile, item: FileItem) -> dict[str, Any]:
    dimensions = _dimensions(item)
    captions = [_caption(report, dimensions, item.original, None, None)]
    for perturbation, variant in zip(report.perturbations, item.variants):
        captions.append(_caption(report, dimensions, variant, item.original, perturbation.expected))
    wrong = [f"{caption['perturbation']}: {judgment['scorer']} {cell['dimension']}" for caption in captions
             for judgment in caption["judgments"] for cell in judgment["cells"] if cell["wrong_way"]]
    return {"item_id": item.item_id, "cluster": item.cluster, "dimensions": dimensions, "captions": captions,
            "wrong_way": wrong}


def _caption(report: SensitivityFile, dimensions: list[str], caption: FileCaption, original: FileCaption | None,
             expected_of: Any) -> dict[str, Any]:
    # A variant that reads as its original tests nothing: its cells show no shift, sound or wrong-way.
    unchanged = original is not None and changes_nothing(original.text, caption.text)
    expected = {} if expected_of is None else {d: expected_of(d) for d in dimensions if expected_of(d) is not None}
    judgments = []
    for position, scorer in enumerate(report.scorers):
        judgment = caption.judgments[scorer]
        before = dict(original.judgments[scorer].scores) if original is not None else None
        judgments.append({
            "scorer": scorer,
            # With several scorers the first is the panel's combined judgment, the rest its members'.
            "role": "judge" if len(report.scorers) == 1 else ("panel" if position == 0 else "member"),
            **_outcome(judgment),
            "cells": [_cell(dimension, dict(judgment.scores), None if unchanged else before, expected.get(dimension))
                      for dimension in dimensions],
        })
    return {"perturbation": caption.perturbation, "text": caption.text, "change": caption.change,
            "unchanged": unchanged, "judgments": judgments}


def _outcome(judgment: FileJudgment) -> dict[str, Any]:
    return {"failure": judgment.failure, "failure_detail": judgment.failure_detail, "reply": judgment.reply,
            "reply_logged": judgment.reply_logged, "cache_hit": judgment.cache_hit,
            "pooled": None if judgment.pooled is None else list(judgment.pooled),
            "not_pooled": [list(pair) for pair in judgment.not_pooled]}


def _cell(dimension: str, scores: dict[str, float | None], before: dict[str, float | None] | None,
          expected: Any) -> dict[str, Any]:
    """One score of one judgment; for a perturbed caption its shift against the original's same score (None
    when either side has no value: an unjudged caption is never a 0) and whether it moved the wrong way."""
    value = scores.get(dimension)
    previous = None if before is None else before.get(dimension)
    shift = None if value is None or previous is None else value - previous
    measured = shift is not None and expected is not None
    return {"dimension": dimension, "value": value, "shift": shift, "expected": expected,
            "wrong_way": measured and moved_wrong_way(shift, expected),
            "sound": measured and moved_soundly(shift, expected)}

"""MSVD-Eval, G-VEval's human-judgement set: its file loader, its human ratings and its item format.

The file is one JSON object mapping an item id (``vid1301``) to
``{"vname": str, "ref": [str, ...], "candidate": str (optional), "human_score": [[acc, comp, conc, rel, mean], ...]}``
with one inner list per annotator on a 1-5 scale. Every row is validated on load so that a malformed item fails
here, with its id in the message, instead of surfacing later as a NaN inside a correlation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from capjudge.judges.datasets.items import DatasetError, ItemFormat, read_json_lines, record_id
from capjudge.judges.jsonl import read_json

# The columns of each annotator's list, as published: G-VEval's four ACCR dimensions in the rubric's order,
# then their mean. Spelled here, not taken from the judge, so that the file reads without any judge's code;
# they are the G-VEval judge's score names too (tests/judges/datasets/test_datasets.py checks), which is what lets its task
# pair a judge score with the human column of the same name. The G-VEval code correlates baselines with
# column 4 (the mean of the four ACCR dimensions).
SCORE_NAMES: tuple[str, ...] = ("accuracy", "completeness", "conciseness", "relevance", "mean")
MEAN_INDEX = SCORE_NAMES.index("mean")
# Every column is on the annotators' 1-5 scale (the mean of four such ratings is too). A value outside it is a
# different file, or a typo, and would move every coefficient without a word: refused, as VATEX-EVAL's are.
RATING_SCALE = (1, 5)
# The published mean column is the plain mean of the four dimensions; allow for rounding in other copies.
_MEAN_TOLERANCE = 0.01


class MsvdEvalError(ValueError):
    """The file is not MSVD-Eval-shaped; the message names the item and what is wrong with it."""


@dataclass(frozen=True)
class AccrScores:
    """One annotator's judgement of one caption."""

    accuracy: float
    completeness: float
    conciseness: float
    relevance: float
    mean: float

    def as_tuple(self) -> tuple[float, float, float, float, float]:
        return (self.accuracy, self.completeness, self.conciseness, self.relevance, self.mean)


@dataclass(frozen=True)
class MsvdItem:
    """One clip: its reference captions, the candidate caption that was judged, and every annotator's scores."""

    item_id: str
    video_name: str
    references: tuple[str, ...]
    candidate: str | None
    human_scores: tuple[AccrScores, ...]


def load_msvd_eval(path: str | Path) -> tuple[MsvdItem, ...]:
    """Read and validate MSVD-Eval.json; items keep the file's order."""
    path = Path(path)
    # An item id twice would otherwise be scored on its last copy alone, without a word.
    raw = read_json(path, MsvdEvalError, unique_keys=True, top_level_key="item id")
    if not isinstance(raw, dict):
        raise MsvdEvalError(f"{path}: expected a JSON object mapping item id -> item, got {type(raw).__name__}")
    try:
        return tuple(parse_item(str(item_id), row) for item_id, row in raw.items())
    except MsvdEvalError as error:  # the item's problem, with the file it is in
        raise MsvdEvalError(f"{path}: {error}") from None


def parse_item(item_id: str, row: Any) -> MsvdItem:
    """Validate one row of the file; every error names ``item_id``."""
    if not isinstance(row, Mapping):
        raise MsvdEvalError(f"item {item_id!r}: expected an object, got {type(row).__name__}")
    for key in ("vname", "ref", "human_score"):
        if key not in row:
            raise MsvdEvalError(f"item {item_id!r}: missing key {key!r}")
    video_name = row["vname"]
    if not isinstance(video_name, str):
        raise MsvdEvalError(f"item {item_id!r}: 'vname' must be a string")
    references = row["ref"]
    if not isinstance(references, list) or not references or not all(isinstance(r, str) for r in references):
        raise MsvdEvalError(f"item {item_id!r}: 'ref' must be a non-empty list of strings")
    empty = next((number for number, reference in enumerate(references) if not reference.strip()), None)
    if empty is not None:  # a reference with no words: every reference-based score would compare with nothing
        raise MsvdEvalError(f"item {item_id!r}: 'ref' {empty} is empty")
    candidate = row.get("candidate")
    if candidate is not None and not isinstance(candidate, str):
        raise MsvdEvalError(f"item {item_id!r}: 'candidate' must be a string when present")
    return MsvdItem(
        item_id=item_id,
        video_name=video_name,
        references=tuple(references),
        candidate=candidate,
        human_scores=_parse_human_scores(item_id, row["human_score"]),
    )


def _parse_human_scores(item_id: str, value: Any) -> tuple[AccrScores, ...]:
    if not isinstance(value, list) or not value:
        raise MsvdEvalError(f"item {item_id!r}: 'human_score' must be a non-empty list of per-annotator lists")
    annotators = []
    for position, scores in enumerate(value):
        where = f"item {item_id!r}, annotator {position}"
        if not isinstance(scores, list) or len(scores) != len(SCORE_NAMES):
            raise MsvdEvalError(f"{where}: expected a list of {len(SCORE_NAMES)} numbers {list(SCORE_NAMES)}, got {scores!r}")
        for name, score in zip(SCORE_NAMES, scores):
            _check_rating(where, name, score)
        dimensions_mean = sum(scores[:4]) / 4
        if abs(dimensions_mean - scores[MEAN_INDEX]) > _MEAN_TOLERANCE:
            raise MsvdEvalError(
                f"{where}: mean column {scores[MEAN_INDEX]} differs from the mean of the four dimensions "
                f"({dimensions_mean:g})"
            )
        annotators.append(AccrScores(*(float(s) for s in scores)))
    return tuple(annotators)


def _check_rating(where: str, name: str, score: Any) -> None:
    """A rating is a finite number (not a boolean) on the 1-5 scale; else MsvdEvalError naming the column and
    the value."""
    # A float is checked for NaN and infinities; an int of any size compares exactly (math.isfinite would
    # raise OverflowError for 10**400).
    if not isinstance(score, (int, float)) or isinstance(score, bool) or (isinstance(score, float) and not math.isfinite(score)):
        raise MsvdEvalError(f"{where}: scores must be finite numbers, got {name} = {score!r}")
    low, high = RATING_SCALE
    if not low <= score <= high:
        raise MsvdEvalError(f"{where}: {name} = {score!r} is outside the {low}-{high} rating scale")


def human_matrix(items: Sequence[MsvdItem], dimension: str) -> np.ndarray:
    """Scores of one dimension as an (items, annotators) array; NaN where an item has fewer annotators."""
    if dimension not in SCORE_NAMES:
        raise ValueError(f"unknown dimension {dimension!r}; expected one of {SCORE_NAMES}")
    column = SCORE_NAMES.index(dimension)
    width = max((len(item.human_scores) for item in items), default=0)
    matrix = np.full((len(items), width), np.nan)
    for row, item in enumerate(items):
        for annotator, scores in enumerate(item.human_scores):
            matrix[row, annotator] = scores.as_tuple()[column]
    return matrix


# ----------------------------------------------------------------------------------------------------------
# As task items


def read_msvd_eval_file(path: Path) -> list[dict[str, Any]]:
    """Raw records with their ids. MSVD-Eval.json is one object keyed by item id; a .jsonl file (any copy in
    the same shape) has one object per line with an `id` field."""
    if path.suffix.lower() == ".jsonl":
        return read_json_lines(path)
    raw = read_json(path, DatasetError, unique_keys=True, top_level_key="item id")
    if isinstance(raw, dict):
        records = []
        for item_id, row in raw.items():
            if not isinstance(row, dict):
                raise DatasetError(f"{path}: item {item_id!r}: expected an object, got {type(row).__name__}")
            records.append({**row, "id": item_id})
        return records
    if isinstance(raw, list):
        return raw
    raise DatasetError(f"{path}: expected an object keyed by item id (MSVD-Eval's shape) or a list of items")


def parse_msvd_record(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One MSVD-Eval item -> a task row: id, video (file name), references, candidate, human_scores.

    `human_score` (per annotator [accuracy, completeness, conciseness, relevance, mean], 1-5) is optional:
    items without it are judged but take no part in the judge-human correlation.
    """
    item_id = record_id(record, position)
    has_human_scores = record.get("human_score") not in (None, [])
    # parse_item validates the whole MSVD-Eval row (and every annotator's scores); an item without human
    # scores is checked the same way with a stand-in row that only lacks them.
    checked = dict(record) if has_human_scores else {**record, "human_score": [[1, 1, 1, 1, 1]]}
    try:
        item = parse_item(item_id, checked)
    except MsvdEvalError as error:
        raise DatasetError(str(error)) from None
    return {
        "id": item.item_id,
        "video": item.video_name,
        "references": list(item.references),
        "candidate": item.candidate,
        "human_scores": [list(scores.as_tuple()) for scores in item.human_scores] if has_human_scores else [],
    }


MSVD_EVAL_FORMAT = ItemFormat("MSVD-Eval", read_msvd_eval_file, parse_msvd_record)

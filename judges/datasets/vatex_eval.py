"""VATEX-EVAL (EMScore, CVPR 2022): 3,000 VATEX clips x 6 candidate captions, each rated 1-5 by 3 annotators.
Its file loader, its human ratings, its item ids and its item format.

The file (``vid_cans_score_dict.json``, see ``../shared/data/vatex_eval/README.md``) is one JSON object mapping a
VATEX video id (``<youtubeid>_<start>_<end>``) to
``{"vid": id, "cands": [caption, ...], "scores": "[[a1, a2, a3], ...]", "refs": [[reference, ...]]}``:
``scores`` is a STRING holding one row of 3 ratings per candidate (the published copy writes them as floats,
``5.0``), and ``refs`` is a list holding ONE list of the 9 references. Every clip is validated on load, as
MSVD-Eval is (:mod:`capjudge.judges.datasets.msvd_eval`): a malformed clip fails here with its id in the message instead
of surfacing later as a NaN or a shifted row inside a correlation. Nothing is skipped.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from capjudge.judges.datasets.items import DatasetError, ItemFormat
from capjudge.judges.jsonl import read_json

ANNOTATORS = 3
RATING_SCALE = (1, 5)


class VatexEvalError(ValueError):
    """The file is not VATEX-EVAL-shaped; the message names the clip (and candidate) and what is wrong."""


@dataclass(frozen=True)
class VatexCandidate:
    """One rated caption: which clip, which of its candidates, the caption, the clip's references, 3 ratings."""

    clip_id: str
    candidate_index: int
    caption: str
    references: tuple[str, ...]  # the same tuple object for every candidate of a clip
    ratings: tuple[int, int, int]  # annotator 1, 2, 3, in the file's column order

    @property
    def item_id(self) -> str:
        return item_id(self.clip_id, self.candidate_index)


# A candidate's item id is `<clip_id>#<candidate_index>`: one id per candidate because every reader (the
# logged record's `item_id`, captions_file, the run readers, the leaderboard) keys items by one id; VATEX clip
# ids (`<youtubeid>_<start>_<end>`) never hold '#', so it splits back unambiguously.
ITEM_ID_SEPARATOR = "#"


def item_id(clip_id: str, candidate_index: int) -> str:
    """A candidate's item id, `<clip_id>#<candidate_index>`."""
    return f"{clip_id}{ITEM_ID_SEPARATOR}{candidate_index}"


def split_item_id(value: str) -> tuple[str, int] | None:
    """`<clip_id>#<candidate_index>` -> (clip_id, candidate_index); None for an id of another shape."""
    clip_id, separator, index = value.rpartition(ITEM_ID_SEPARATOR)
    if not separator or not clip_id or not index.isdigit():
        return None
    return clip_id, int(index)


def load_vatex_eval(path: str | Path) -> tuple[VatexCandidate, ...]:
    """Read and validate the file; candidates in file order (clip by clip, candidate index ascending)."""
    path = Path(path)
    # A clip id twice would otherwise be scored on its last copy alone, without a word.
    raw = read_json(path, VatexEvalError, unique_keys=True, top_level_key="clip id")
    if not isinstance(raw, dict) or not raw:
        raise VatexEvalError(f"{path}: expected a non-empty JSON object mapping VATEX clip id -> clip")
    return tuple(candidate for clip_id, row in raw.items() for candidate in parse_clip(str(clip_id), row))


def parse_clip(clip_id: str, row: Any) -> tuple[VatexCandidate, ...]:
    """Validate one clip of the file; every error names ``clip_id``."""
    where = f"clip {clip_id!r}"
    if not isinstance(row, Mapping):
        raise VatexEvalError(f"{where}: expected an object, got {type(row).__name__}")
    for key in ("cands", "scores", "refs"):
        if key not in row:
            raise VatexEvalError(f"{where}: missing key {key!r}")
    if "vid" in row and row["vid"] != clip_id:
        raise VatexEvalError(f"{where}: its 'vid' field is {row['vid']!r}, not the key it is stored under")
    captions = _captions(where, row["cands"])
    references = _references(where, row["refs"])
    ratings = _rating_rows(where, row["scores"], len(captions))
    return tuple(
        VatexCandidate(clip_id, index, caption, references, rating_row)
        for index, (caption, rating_row) in enumerate(zip(captions, ratings))
    )


def _captions(where: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) and c.strip() for c in value):
        raise VatexEvalError(f"{where}: 'cands' must be a non-empty list of non-empty caption strings")
    return value


def _references(where: str, value: Any) -> tuple[str, ...]:
    # The published file nests the references once more: [[ref, ...]]. A flat list would make refs[0] the
    # first reference STRING, and "1-ref" scoring would silently use its first character.
    if not isinstance(value, list) or len(value) != 1 or not isinstance(value[0], list):
        raise VatexEvalError(f"{where}: 'refs' must be a list holding one list of reference captions, got {_short(value)}")
    references = value[0]
    if not references or not all(isinstance(r, str) and r.strip() for r in references):
        raise VatexEvalError(f"{where}: 'refs' must hold a non-empty list of non-empty reference strings")
    return tuple(references)


def _rating_rows(where: str, value: Any, n_candidates: int) -> list[tuple[int, int, int]]:
    if not isinstance(value, str):
        raise VatexEvalError(f"{where}: 'scores' must be a string holding a list of rating rows, got {type(value).__name__}")
    try:
        rows = ast.literal_eval(value)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise VatexEvalError(f"{where}: 'scores' is not a Python/JSON list literal: {_short(value)}") from None
    if not isinstance(rows, (list, tuple)):
        raise VatexEvalError(f"{where}: 'scores' must hold a list of rating rows, got {type(rows).__name__}: {_short(value)}")
    if len(rows) != n_candidates:
        raise VatexEvalError(f"{where}: {len(rows)} rating rows for {n_candidates} candidates")
    return [_ratings(f"{where}, candidate {index}", row) for index, row in enumerate(rows)]


def _ratings(where: str, row: Any) -> tuple[int, int, int]:
    low, high = RATING_SCALE
    if not isinstance(row, (list, tuple)) or len(row) != ANNOTATORS:
        raise VatexEvalError(f"{where}: expected {ANNOTATORS} annotator ratings, got {_short(row)}")
    # The published file writes ratings as floats (5.0); a fractional or out-of-scale value is a different file.
    # The range test comes first so that inf (literal_eval reads 1e999) never reaches int().
    if not all(isinstance(r, (int, float)) and not isinstance(r, bool) and low <= r <= high and r == int(r) for r in row):
        raise VatexEvalError(f"{where}: ratings must be whole numbers {low}-{high}, got {_short(row)}")
    return tuple(int(r) for r in row)  # type: ignore[return-value]


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def ratings_matrix(candidates: Sequence[VatexCandidate]) -> np.ndarray:
    """(candidates, 3) float array of the annotators' ratings, rows in the candidates' order."""
    return np.array([c.ratings for c in candidates], dtype=np.float64).reshape(len(candidates), ANNOTATORS)


def clip_ids(candidates: Sequence[VatexCandidate]) -> np.ndarray:
    """The clip id of every candidate (what the clustered bootstrap resamples)."""
    return np.array([c.clip_id for c in candidates], dtype=object)


# ----------------------------------------------------------------------------------------------------------
# As task items


def read_vatex_eval_file(path: Path) -> list[dict[str, Any]]:
    """The file, one record per rated candidate (3,000 clips x 6 = 18,000), validated clip by clip by
    `load_vatex_eval` (its errors name the clip)."""
    try:
        candidates = load_vatex_eval(path)
    except VatexEvalError as error:
        raise DatasetError(str(error)) from None
    return [
        {"clip_id": c.clip_id, "candidate_index": c.candidate_index, "caption": c.caption, "references": c.references}
        for c in candidates
    ]


def parse_vatex_record(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One candidate -> a task row: id (`<clip_id>#<candidate_index>`), clip_id and candidate_index kept apart,
    video `<clip_id>.mp4`, the clip's 9 references (a task may show the judge fewer), candidate. The ratings
    stay in the file: `capjudge vatex` correlates against them."""
    if not isinstance(record, Mapping):
        raise DatasetError(f"record {position + 1}: expected an object, got {type(record).__name__}")
    clip_id, index = record.get("clip_id"), record.get("candidate_index")
    if not isinstance(clip_id, str) or not clip_id or isinstance(index, bool) or not isinstance(index, int):
        raise DatasetError(f"record {position + 1}: needs a clip_id string and an integer candidate_index")
    return {
        "id": item_id(clip_id, index),
        "clip_id": clip_id,
        "candidate_index": index,
        "video": f"{clip_id}.mp4",
        "references": list(record["references"]),
        "candidate": record["caption"],
    }


VATEX_EVAL_FORMAT = ItemFormat("VATEX-EVAL", read_vatex_eval_file, parse_vatex_record)

"""The G-VEval task (tasks/gveval/): MSVD-Eval items, one G-VEval ACCR judgment per caption, the metrics.
VATEX-EVAL's 18,000 rated candidates are items too (`VATEX_EVAL_FORMAT`, with the 1-or-9 `references` setting).

The model describes each video; `GVEvalTask.process_document` judges that caption with `GVEvalJudge` through
the process-wide judge client and returns, per item:

- `gveval_accuracy`, `gveval_completeness`, `gveval_conciseness`, `gveval_relevance`, `gveval_mean`: the
  judge's 0-100 scores, or None when the item could not be judged (aggregated by `mean_of_judged`, which
  excludes None: an unjudged item never counts as 0);
- `gveval_failed`: 1 when the item has no valid judgment (aggregated by `count_failed`);
- `gveval_kendall_b_<dimension>`: {"item": id, "judge": score, "human": [one score per annotator]}, only for
  items that carry human scores (MSVD-Eval does, 1-5 per annotator), aggregated by `kendall_b` (in item-id
  order, so its interval is the same from 1 process or N);
- `judged`: the item's logged record (`capjudge.tasks.judged.judged_task`), aggregated as the number of judged
  items: the item's id, which judge with which settings, and the judgment (the parsed scores, the raw reply,
  the failure kind, whether the reply came from the cache). The leaderboard reads it.

The aggregations the YAML names live in `capjudge.tasks.judged.aggregations`.

Judge settings come from the task YAML's `metadata` (scoring, mode, max_tries) and can be overridden per run
by CAPJUDGE_GVEVAL_SCORING and CAPJUDGE_GVEVAL_MODE, read once per run. With
CAPJUDGE_CONSTRAINED_OUTPUT=1 (the demo's tiny local judge) the local server's output grammar is added to
every request. The judge model is the client's (MODEL_VERSION / CAPJUDGE_JUDGE_MODEL), else the published one.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from capjudge.judges.descriptor import JudgeDescriptor
from capjudge.judges.gveval.judge import (
    local_reply_constraint,
    DEFAULT_SAMPLING,
    DESCRIPTOR,
    MODES,
    GVEvalJudge,
    GVEvalResult,
)
from capjudge.judges.types import ParseFailure
from capjudge.judges.jsonl import read_json
from capjudge.metrics.human_correlation.msvd_eval import MsvdEvalError, parse_item
from capjudge.metrics.human_correlation.vatex_eval import VatexEvalError, load_vatex_eval
from capjudge.tasks.judged.settings import MAX_TRIES_LIMIT, constrained_output_enabled, parse_choice, parse_count, setting
from capjudge.tasks.judged.sources import DatasetError, ItemFormat, read_json_lines, record_id
from capjudge.judges.gveval.parser import SCORE_NAMES
from capjudge.tasks.judged.judged_task import DEFAULT_MAX_CAPTION_CHARS, VIDEO_MISSING, JudgedTask, JudgeSettings
from capjudge.tasks.judged.judged_task import resolve_max_caption_chars, resolve_samples

__all__ = [
    "SCORE_NAMES",
    "MSVD_EVAL_FORMAT",
    "VATEX_EVAL_FORMAT",
    "VIDEO_MISSING",
    "GVEvalSettings",
    "GVEvalTask",
    "item_metrics",
    "judge_item",
    "parse_demo_record",
    "parse_msvd_record",
    "read_msvd_eval_file",
    "vatex_item_id",
]

log = logging.getLogger(__name__)

METRIC_PREFIX = "gveval"
SCORINGS = ("expected", "text")
DEFAULT_MAX_TRIES = 3
# How many of a VATEX-EVAL clip's 9 references the judge is shown: the field's two settings (EMScore's
# "1-ref" = refs[:1], "9-ref" = all). Only tasks whose metadata names `references` read it.
VATEX_REFERENCE_COUNTS = (1, 9)
VATEX_REFERENCES_ENV = "CAPJUDGE_VATEX_REFERENCES"


# ----------------------------------------------------------------------------------------------------------
# Items


def read_msvd_eval_file(path: Path) -> list[dict[str, Any]]:
    """Raw records with their ids. MSVD-Eval.json is one object keyed by item id; a .jsonl file (the demo
    split, or any copy in the same shape) has one object per line with an `id` field."""
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
    if not isinstance(record, Mapping):
        raise DatasetError(f"record {position + 1}: expected an object, got {type(record).__name__}")
    item_id = record_id(record, position)
    has_human_scores = record.get("human_score") not in (None, [])
    # msvd_eval.parse_item validates the whole MSVD-Eval row (and every annotator's scores); an item without
    # human scores is checked the same way with a stand-in row that only lacks them.
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


def parse_demo_record(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One row of the packaged demo split (`tasks/demo/gveval_demo.jsonl`, written by
    `tests/demo_data.py`): id, video, references, already in the task's shape; no human scores."""
    if not isinstance(record, Mapping):
        raise DatasetError(f"record {position + 1}: expected an object, got {type(record).__name__}")
    item_id = record_id(record, position)
    video = record.get("video")
    if not isinstance(video, str) or not video.strip():
        raise DatasetError(f"item {item_id!r}: 'video' must be a file name, got {video!r}")
    references = record.get("references")
    if not isinstance(references, list) or not references or not all(isinstance(r, str) and r.strip() for r in references):
        raise DatasetError(f"item {item_id!r}: 'references' must be a non-empty list of captions")
    return {"id": item_id, "video": video, "references": list(references), "candidate": None, "human_scores": []}


DEMO_FORMAT = ItemFormat("G-VEval demo split", read_json_lines, parse_demo_record)


def vatex_item_id(clip_id: str, candidate_index: int) -> str:
    """A VATEX-EVAL candidate's item id, `<clip_id>#<candidate_index>`. One id per candidate because every
    reader (the logged record's `item_id`, captions_file, the run readers, the leaderboard) keys items by
    one id; VATEX clip ids (`<youtubeid>_<start>_<end>`) never hold '#', so it splits back unambiguously."""
    return f"{clip_id}#{candidate_index}"


def read_vatex_eval_file(path: Path) -> list[dict[str, Any]]:
    """VATEX-EVAL's file, one record per rated candidate (3,000 clips x 6 = 18,000), validated clip by clip
    by `vatex_eval.load_vatex_eval` (its errors name the clip)."""
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
    video `<clip_id>.mp4`, the clip's 9 references (the judge is shown 1 or 9 of them: the `references`
    setting), candidate. The ratings stay in the file: `capjudge vatex` correlates against them."""
    if not isinstance(record, Mapping):
        raise DatasetError(f"record {position + 1}: expected an object, got {type(record).__name__}")
    clip_id, index = record.get("clip_id"), record.get("candidate_index")
    if not isinstance(clip_id, str) or not clip_id or isinstance(index, bool) or not isinstance(index, int):
        raise DatasetError(f"record {position + 1}: needs a clip_id string and an integer candidate_index")
    return {
        "id": vatex_item_id(clip_id, index),
        "clip_id": clip_id,
        "candidate_index": index,
        "video": f"{clip_id}.mp4",
        "references": list(record["references"]),
        "candidate": record["caption"],
    }


VATEX_EVAL_FORMAT = ItemFormat("VATEX-EVAL", read_vatex_eval_file, parse_vatex_record)


# ----------------------------------------------------------------------------------------------------------
# Judge settings


@dataclass(frozen=True)
class GVEvalSettings(JudgeSettings):
    scoring: str
    mode: str
    max_tries: int
    constrained_output: bool
    samples: int = 1
    max_caption_chars: int = DEFAULT_MAX_CAPTION_CHARS
    references: int | None = None  # references shown per item; None: all of them (VATEX tasks: 1 or 9)

    descriptor: ClassVar[JudgeDescriptor] = DESCRIPTOR

    @classmethod
    def resolve(cls, metadata: Mapping[str, Any], env: Mapping[str, str] | None = None) -> GVEvalSettings:
        """Metadata values, overridden by CAPJUDGE_GVEVAL_SCORING / CAPJUDGE_GVEVAL_MODE. Raises ConfigError."""
        return cls(
            scoring=setting(metadata, "scoring", "expected", parse_choice(SCORINGS), env_name="CAPJUDGE_GVEVAL_SCORING", env=env),
            mode=setting(metadata, "mode", "frames", parse_choice(MODES), env_name="CAPJUDGE_GVEVAL_MODE", env=env),
            max_tries=setting(metadata, "max_tries", DEFAULT_MAX_TRIES, parse_count(MAX_TRIES_LIMIT)),
            constrained_output=constrained_output_enabled(env),
            samples=resolve_samples(metadata, env),
            max_caption_chars=resolve_max_caption_chars(metadata, env),
            references=_resolve_reference_count(metadata, env),
        )

    @property
    def needs_video(self) -> bool:  # type: ignore[override]
        return self.mode != "references"

    @property
    def needs_logprobs(self) -> bool:  # type: ignore[override]
        """Expected scoring weighs the top-5 alternatives of each score token."""
        return self.scoring == "expected"

    def local_reply_constraint(self) -> dict[str, Any]:
        return local_reply_constraint()

    def logged_settings(self) -> dict[str, Any]:
        return {
            "scoring": self.scoring,
            "mode": self.mode,
            "max_tries": self.max_tries,
            "sampling": dict(DEFAULT_SAMPLING),
            "constrained_output": self.constrained_output,
            **({"samples": self.samples} if self.samples > 1 else {}),
            **({"references": self.references} if self.references is not None else {}),
        }


def _resolve_reference_count(metadata: Mapping[str, Any], env: Mapping[str, str] | None) -> int | None:
    """Task metadata `references` (the VATEX tasks), overridden by CAPJUDGE_VATEX_REFERENCES; a task without
    the key shows every reference and ignores the variable (it names VATEX's setting, not MSVD-Eval's)."""
    if metadata.get("references") is None:
        return None
    return setting(metadata, "references", None, _parse_reference_count, env_name=VATEX_REFERENCES_ENV, env=env)


def _parse_reference_count(value: Any) -> int:
    counts = " or ".join(str(n) for n in VATEX_REFERENCE_COUNTS)
    if isinstance(value, bool) or str(value).strip() not in {str(n) for n in VATEX_REFERENCE_COUNTS}:
        raise ValueError(f"expected {counts} (references per clip); got {value!r}")
    return int(value)


# ----------------------------------------------------------------------------------------------------------
# The lmms-eval task


class GVEvalTask(JudgedTask):
    """`class: !function utils.GVEvalTask` in tasks/gveval/*.yaml."""

    settings_type = GVEvalSettings

    @classmethod
    def run_judge(cls, doc: Mapping[str, Any], caption: str, settings: GVEvalSettings, client: Any, video: Any) -> GVEvalResult:
        judge = GVEvalJudge(client, scoring=settings.scoring, mode=settings.mode, max_tries=settings.max_tries)  # type: ignore[arg-type]
        references = list(doc.get("references") or ()) if settings.mode != "frames" else ()
        if settings.references is not None:
            references = references[: settings.references]
        return judge.judge(caption, video=video, references=references)

    @classmethod
    def unjudged(cls, doc: Mapping[str, Any], caption: str, settings: GVEvalSettings, failure: ParseFailure) -> GVEvalResult:
        return GVEvalResult.unjudged(failure, settings.scoring)  # type: ignore[arg-type]

    @classmethod
    def combine(cls, results: list[GVEvalResult]) -> GVEvalResult:
        judged = [r for r in results if r.ok]
        if not judged:
            return results[0]
        means = {name: statistics.fmean(getattr(r, name) for r in judged) for name in SCORE_NAMES}
        reasons = "; ".join(r.fallback_reason for r in judged if r.fallback_reason) or None
        return replace(judged[0], **means, dimensions={}, fallback_reason=reasons, reasoning="", raw_reply=None)

    @classmethod
    def metric_values(cls, doc: Mapping[str, Any], result: GVEvalResult) -> dict[str, Any]:
        scores = result.scores()
        metrics: dict[str, Any] = {f"{METRIC_PREFIX}_{name}": scores[name] for name in SCORE_NAMES}
        metrics[f"{METRIC_PREFIX}_failed"] = int(not result.ok)
        human_scores = doc.get("human_scores") or []
        if human_scores:
            for column, name in enumerate(SCORE_NAMES):
                # The item id orders the pairs before the bootstrap (see aggregations._frozen).
                pair = {"item": str(doc["id"]), "judge": scores[name],
                        "human": [annotator[column] for annotator in human_scores]}
                # The same pair feeds the coefficient and both ends of its interval (one cached computation).
                for suffix in ("", "_ci_low", "_ci_high"):
                    metrics[f"{METRIC_PREFIX}_kendall_b_{name}{suffix}"] = pair
        return metrics


judge_item = GVEvalTask.judge_item
item_metrics = GVEvalTask.item_metrics

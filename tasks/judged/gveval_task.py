"""The G-VEval task (tasks/gveval/): MSVD-Eval items, one G-VEval ACCR judgment per caption, the metrics.

The model describes each video; `GVEvalTask.process_document` judges that caption with `GVEvalJudge` through
the process-wide judge client and returns, per item:

- `gveval_accuracy`, `gveval_completeness`, `gveval_conciseness`, `gveval_relevance`, `gveval_mean`: the
  judge's 0-100 scores, or None when the item could not be judged (aggregated by `mean_of_judged`, which
  excludes None: an unjudged item never counts as 0);
- `gveval_failed`: 1 when the item has no valid judgment (aggregated by `count`);
- `gveval_kendall_b_<dimension>`: {"judge": score, "human": [one score per annotator]}, only for items that
  carry human scores (MSVD-Eval does, 1-5 per annotator), aggregated by
  `capjudge.tasks.judged.aggregations.kendall_b`;
- `judged`: the item's logged record (`capjudge.tasks.judged.judged_task`), aggregated as the number of judged
  items: the item's id, which judge with which settings, and the judgment (the parsed scores, the raw reply,
  the failure kind, whether the reply came from the cache). The leaderboard reads it.

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

from capjudge.judges.gveval.judge import (
    local_reply_constraint,
    DEFAULT_SAMPLING,
    JUDGE_VERSION,
    MODES,
    PUBLISHED_MODEL,
    GVEvalJudge,
    GVEvalResult,
)
from capjudge.judges.types import ParseFailure
from capjudge.tasks.judged.aggregations import kendall_b, kendall_b_ci_high, kendall_b_ci_low
from capjudge.metrics.files.jsonl import read_json
from capjudge.metrics.human_correlation.msvd_eval import DIMENSIONS, MsvdEvalError, parse_item
from capjudge.tasks.judged.harness import (
    DatasetError,
    ItemFormat,
    constrained_output_enabled,
    count,
    doc_to_video,
    mean_of_judged,
    parse_choice,
    parse_positive_int,
    read_json_lines,
    record_id,
    setting,
)
from capjudge.judges.gveval.parser import SCORE_NAMES
from capjudge.tasks.judged.judged_task import DEFAULT_MAX_CAPTION_CHARS, VIDEO_MISSING, JudgedTask, JudgeSettings
from capjudge.tasks.judged.judged_task import count_judged, resolve_max_caption_chars, resolve_samples

__all__ = [
    "DIMENSIONS",
    "MSVD_EVAL_FORMAT",
    "VIDEO_MISSING",
    "GVEvalSettings",
    "GVEvalTask",
    "count",
    "count_judged",
    "doc_to_video",
    "item_metrics",
    "judge_item",
    "kendall_b",
    "kendall_b_ci_high",
    "kendall_b_ci_low",
    "mean_of_judged",
    "parse_demo_record",
    "parse_msvd_record",
    "read_msvd_eval_file",
]

log = logging.getLogger(__name__)

JUDGE_NAME = "gveval"
METRIC_PREFIX = "gveval"
SCORINGS = ("expected", "text")
DEFAULT_MAX_TRIES = 3


# ----------------------------------------------------------------------------------------------------------
# Items


def read_msvd_eval_file(path: Path) -> list[dict[str, Any]]:
    """Raw records with their ids. MSVD-Eval.json is one object keyed by item id; a .jsonl file (the demo
    split, or any copy in the same shape) has one object per line with an `id` field."""
    if path.suffix.lower() == ".jsonl":
        return read_json_lines(path)
    raw = read_json(path, DatasetError)
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

    judge_name: ClassVar[str] = JUDGE_NAME
    judge_version: ClassVar[str] = JUDGE_VERSION
    published_model: ClassVar[str] = PUBLISHED_MODEL

    @classmethod
    def resolve(cls, metadata: Mapping[str, Any], env: Mapping[str, str] | None = None) -> GVEvalSettings:
        """Metadata values, overridden by CAPJUDGE_GVEVAL_SCORING / CAPJUDGE_GVEVAL_MODE. Raises ConfigError."""
        return cls(
            scoring=setting(metadata, "scoring", "expected", parse_choice(SCORINGS), env_name="CAPJUDGE_GVEVAL_SCORING", env=env),
            mode=setting(metadata, "mode", "frames", parse_choice(MODES), env_name="CAPJUDGE_GVEVAL_MODE", env=env),
            max_tries=setting(metadata, "max_tries", DEFAULT_MAX_TRIES, parse_positive_int),
            constrained_output=constrained_output_enabled(env),
            samples=resolve_samples(metadata, env),
            max_caption_chars=resolve_max_caption_chars(metadata, env),
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
        }


# ----------------------------------------------------------------------------------------------------------
# The lmms-eval task


class GVEvalTask(JudgedTask):
    """`class: !function utils.GVEvalTask` in tasks/gveval/*.yaml."""

    settings_type = GVEvalSettings

    @classmethod
    def run_judge(cls, doc: Mapping[str, Any], caption: str, settings: GVEvalSettings, client: Any, video: Any) -> GVEvalResult:
        judge = GVEvalJudge(client, scoring=settings.scoring, mode=settings.mode, max_tries=settings.max_tries)  # type: ignore[arg-type]
        references = list(doc.get("references") or ()) if settings.mode != "frames" else ()
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
        metrics: dict[str, Any] = {f"{METRIC_PREFIX}_{name}": scores[name] for name in DIMENSIONS}
        metrics[f"{METRIC_PREFIX}_failed"] = int(not result.ok)
        human_scores = doc.get("human_scores") or []
        if human_scores:
            for column, name in enumerate(DIMENSIONS):
                pair = {"judge": scores[name], "human": [annotator[column] for annotator in human_scores]}
                # The same pair feeds the coefficient and both ends of its interval (one cached computation).
                for suffix in ("", "_ci_low", "_ci_high"):
                    metrics[f"{METRIC_PREFIX}_kendall_b_{name}{suffix}"] = pair
        return metrics


judge_item = GVEvalTask.judge_item
item_metrics = GVEvalTask.item_metrics

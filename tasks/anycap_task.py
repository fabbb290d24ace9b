"""The AnyCapEval video style task (tasks/anycap_style/): instruction-following captions judged against a
reference with the AnyCapEval style rubric, the length rules applied in code.

Each item asks for one caption type (brief, detail, poem, narrative, style — the dataset's "theme") with an
instruction (`conversations[0]`); the model's caption is judged against the reference (`conversations[1]`)
by `AnyCapJudge` through the process-wide judge client. `AnyCapTask.process_document` returns, per item:

- `anycap_score`: the final score (0-4, after the length rules), None when unjudged;
- `anycap_brief`, `anycap_detail`, `anycap_poem`, `anycap_narrative`, `anycap_style`: the final score under
  the item's own type, None under the others (so each is the mean over that type's judged items);
- `anycap_length_capped`: 1 when a length rule lowered the judge's score, 0 when not, None when unjudged;
- `anycap_failed`: 1 when the item has no valid judgment; `anycap_output_words`: the caption's word count;
- `item_id`, `judgment` and `judge` (logged with --log_samples, not aggregated): the item's id (lmms-eval
  drops the document), judge and final scores, the rule that capped, both word counts, the raw reply, the
  failure kind, the cache hit, the judge and its settings.

Judge settings come from the task YAML's `metadata` (tolerance, instruction_rule, max_tries) and can be
overridden per run by CAPJUDGE_ANYCAP_TOLERANCE and CAPJUDGE_ANYCAP_INSTRUCTION_RULE, read when an item is
judged. CAPJUDGE_CONSTRAINED_OUTPUT=1 adds the local llama.cpp server's JSON schema to every request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from capjudge.judges.anycap import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    JUDGE_VERSION,
    PUBLISHED_MAX_TRIES,
    PUBLISHED_MODEL,
    AnyCapJudge,
    AnyCapResult,
)
from capjudge.judges.config import JudgeConfig
from capjudge.judges.length_rule import (
    CAPTION_TYPES,
    DEFAULT_TOLERANCE_PERCENT,
    UnknownCaptionType,
    check_length_tolerance,
    normalise_caption_type,
    parse_tolerance,
)
from capjudge.tasks.harness import (
    DatasetError,
    ItemFormat,
    ObservedClient,
    constrained_output_enabled,
    constrained_request_params,
    count,
    doc_to_video,
    mean_of_judged,
    missing_video_problem,
    parse_bool,
    parse_positive_int,
    read_json_lines,
    record_id,
    setting,
    video_path,
)
from capjudge.tasks.sourced_task import JudgedTask

__all__ = [
    "ANYCAP_FORMAT",
    "CAPTION_TYPES",
    "DEMO_FORMAT",
    "VIDEO_MISSING",
    "AnyCapSettings",
    "AnyCapTask",
    "count",
    "doc_to_video",
    "item_metrics",
    "judge_item",
    "mean_of_judged",
    "parse_anycap_record",
    "parse_demo_record",
    "task_row",
]

log = logging.getLogger(__name__)

JUDGE_NAME = "anycap"
METRIC_PREFIX = "anycap"
VIDEO_MISSING = "video_missing"


# ----------------------------------------------------------------------------------------------------------
# Items


def read_anycap_file(path: Path) -> list[dict[str, Any]]:
    return read_json_lines(path)


def parse_anycap_record(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One AnyCapEval row (the published shape: conversations, restriction) -> a task row."""
    item_id = _item_id(record, position)
    where = f"item {item_id}"
    conversations = record.get("conversations")
    if not isinstance(conversations, list) or len(conversations) < 2:
        raise DatasetError(f"{where}: 'conversations' must hold the instruction and the reference (2 turns)")
    instruction, reference = (_turn_text(conversations[index], where, index) for index in (0, 1))
    restriction = record.get("restriction")
    if not isinstance(restriction, list) or not restriction:
        raise DatasetError(f"{where}: 'restriction' must be [caption_type, length instruction], got {restriction!r}")
    length_restriction = restriction[1] if len(restriction) > 1 else ""
    if not isinstance(length_restriction, str):
        raise DatasetError(f"{where}: restriction[1] must be the length instruction text, got {length_restriction!r}")
    return task_row(item_id, record.get("video"), instruction, reference, restriction[0], length_restriction)


def parse_demo_record(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One row of the packaged demo split (`tasks/demo/anycap_demo.jsonl`, written by
    `capjudge.tasks.demo_data`): id, video, instruction, reference, caption_type, already flat. Its length
    instruction is part of the instruction text."""
    item_id = _item_id(record, position)
    return task_row(
        item_id, record.get("video"), record.get("instruction"), record.get("reference"), record.get("caption_type"), ""
    )


def task_row(
    item_id: str, video: Any, instruction: Any, reference: Any, caption_type: Any, length_restriction: str
) -> dict[str, Any]:
    """The row the task works on: id, video, instruction, reference, caption_type (the prompt's name),
    dataset_caption_type (as written), length_restriction (the instruction's length sentence, or "")."""
    where = f"item {item_id}"
    if not isinstance(video, str) or not video.strip():
        raise DatasetError(f"{where}: 'video' must be a file name, got {video!r}")
    for name, text in (("instruction", instruction), ("reference", reference)):
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{where}: the {name} must be non-empty text, got {text!r}")
    try:
        normalised_type = normalise_caption_type(caption_type, item=item_id)
    except UnknownCaptionType as error:
        raise DatasetError(str(error)) from None
    return {
        "id": item_id,
        "video": video,
        "instruction": instruction,
        "reference": reference,
        "caption_type": normalised_type,
        "dataset_caption_type": caption_type,
        "length_restriction": length_restriction,
    }


def _item_id(record: Any, position: int) -> str:
    if not isinstance(record, Mapping):
        raise DatasetError(f"record {position + 1}: expected an object, got {type(record).__name__}")
    return record_id(record, position)


def _turn_text(turn: Any, where: str, index: int) -> str:
    value = turn.get("value") if isinstance(turn, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: conversations[{index}] has no text 'value'")
    return value


ANYCAP_FORMAT = ItemFormat("AnyCapEval video style", read_anycap_file, parse_anycap_record)
DEMO_FORMAT = ItemFormat("AnyCap demo split", read_anycap_file, parse_demo_record)


# ----------------------------------------------------------------------------------------------------------
# Judge settings


@dataclass(frozen=True)
class AnyCapSettings:
    tolerance: int
    instruction_rule: bool
    max_tries: int
    constrained_output: bool

    @classmethod
    def resolve(cls, metadata: Mapping[str, Any], env: Mapping[str, str] | None = None) -> AnyCapSettings:
        """Metadata values, overridden by CAPJUDGE_ANYCAP_TOLERANCE / CAPJUDGE_ANYCAP_INSTRUCTION_RULE.
        Raises ConfigError."""
        return cls(
            tolerance=setting(
                metadata, "tolerance", DEFAULT_TOLERANCE_PERCENT, parse_tolerance, env_name="CAPJUDGE_ANYCAP_TOLERANCE", env=env
            ),
            instruction_rule=setting(
                metadata, "instruction_rule", False, parse_bool, env_name="CAPJUDGE_ANYCAP_INSTRUCTION_RULE", env=env
            ),
            max_tries=setting(metadata, "max_tries", PUBLISHED_MAX_TRIES, parse_positive_int),
            constrained_output=constrained_output_enabled(env),
        )

    # The style judge always needs the clip's frames and reads the written JSON score only.
    needs_video: ClassVar[bool] = True
    needs_logprobs: ClassVar[bool] = False

    def extra_request_params(self) -> dict[str, Any]:
        return constrained_request_params(JUDGE_NAME) if self.constrained_output else {}

    def identity(self, config: JudgeConfig) -> dict[str, Any]:
        """The sample log's `judge` record: which judge, which model, which settings."""
        return {
            "name": JUDGE_NAME,
            "model": config.model or PUBLISHED_MODEL,
            "endpoint": config.endpoint_label,
            "judge_version": JUDGE_VERSION,
            "settings": {
                "tolerance": self.tolerance,
                "instruction_rule": self.instruction_rule,
                "max_tries": self.max_tries,
                "sampling": {"temperature": DEFAULT_TEMPERATURE, "max_tokens": DEFAULT_MAX_TOKENS},
                "constrained_output": self.constrained_output,
            },
        }


# ----------------------------------------------------------------------------------------------------------
# One item


@dataclass(frozen=True)
class ItemJudgment:
    """One caption's AnyCap judgment as the sample log records it."""

    item_id: str
    caption: str
    video: str | None
    result: AnyCapResult
    raw_reply: str | None
    cache_hit: bool
    requests: int

    def record(self) -> dict[str, Any]:
        return {
            "caption": self.caption,
            "video": self.video,
            **asdict(self.result),
            "raw_reply": self.raw_reply,
            "cache_hit": self.cache_hit,
            "requests": self.requests,
        }


def judge_item(doc: Mapping[str, Any], caption: str, settings: AnyCapSettings, client: Any) -> ItemJudgment:
    """Judge one caption. Never raises for a bad item: a missing video or a failed judgment is an unjudged
    result with its failure kind (the word counts and the length check are still recorded)."""
    item_id = str(doc["id"])
    video = video_path(doc)
    shown_video = str(video) if video else None
    problem = missing_video_problem(doc)
    if problem is not None:
        log.error("AnyCap %s -> item unjudged (%s)", problem, VIDEO_MISSING)
        tolerance = check_length_tolerance(doc["caption_type"], caption, doc["reference"], settings.tolerance, item=item_id)
        result = AnyCapResult.from_checks(None, tolerance, None, failure=VIDEO_MISSING, failure_detail=problem)
        return ItemJudgment(item_id, caption, shown_video, result, raw_reply=None, cache_hit=False, requests=0)
    observed = ObservedClient(client, extra_params=settings.extra_request_params())
    judge = AnyCapJudge(observed, tolerance=settings.tolerance, instruction_rule=settings.instruction_rule, max_tries=settings.max_tries)
    result = judge.judge(
        doc["caption_type"],
        caption,
        doc["reference"],
        video=video,
        # The restriction sentence states the rule alone; the whole instruction is the fallback.
        instruction=doc.get("length_restriction") or doc.get("instruction"),
        item=item_id,
    )
    if not result.ok:
        log.warning("AnyCap item %s unjudged: %s: %s", item_id, result.failure, result.failure_detail[:300])
    return ItemJudgment(item_id, caption, shown_video, result, observed.raw_reply, observed.cache_hit, observed.requests_made)


def item_metrics(doc: Mapping[str, Any], judgment: ItemJudgment, identity: Mapping[str, Any]) -> dict[str, Any]:
    """The per-item values lmms-eval aggregates, plus the `judgment` and `judge` records it logs."""
    result = judgment.result
    final = result.final_score if result.ok else None
    # lmms-eval drops the document from the sample log; the leaderboard matches items across runs by item_id.
    metrics: dict[str, Any] = {"item_id": judgment.item_id, f"{METRIC_PREFIX}_score": final}
    metrics[f"{METRIC_PREFIX}_avg_of_types"] = None if final is None else {"caption_type": result.caption_type, "score": final}
    for caption_type in CAPTION_TYPES:
        metrics[f"{METRIC_PREFIX}_{caption_type}"] = final if caption_type == result.caption_type else None
    metrics[f"{METRIC_PREFIX}_length_capped"] = None if final is None else int(result.capped_by is not None)
    metrics[f"{METRIC_PREFIX}_failed"] = int(not result.ok)
    # Judged items only, as every mean here (the count of an unjudged item stays in its `judgment` record).
    metrics[f"{METRIC_PREFIX}_output_words"] = result.output_words if final is not None else None
    metrics["judgment"] = judgment.record()
    metrics["judge"] = dict(identity)
    return metrics


def mean_of_type_means(items: list[Mapping[str, Any] | None]) -> float:
    """AnyCapEval's published "Avg": the mean of each caption type's mean score, over judged items, types
    with no judged item left out. NaN (with a warning) when nothing was judged."""
    by_type: dict[str, list[float]] = {}
    for item in items:
        if item is not None:
            by_type.setdefault(str(item["caption_type"]), []).append(float(item["score"]))
    return mean_of_judged([sum(scores) / len(scores) for scores in by_type.values()] if by_type else [None] * len(items))


# ----------------------------------------------------------------------------------------------------------
# The lmms-eval task


class AnyCapTask(JudgedTask):
    """`class: !function utils.AnyCapTask` in tasks/anycap_style/*.yaml."""

    settings_type = AnyCapSettings
    judge_item = staticmethod(judge_item)
    item_metrics = staticmethod(item_metrics)

"""The AnyCapEval video style task (tasks/anycap_style/): instruction-following captions judged against a
reference with the AnyCapEval style rubric, the length rules applied in code.

Each item asks for one caption type (brief, detail, poem, narrative, style — the dataset's "theme") with an
instruction (`conversations[0]`); the model's caption is judged against the reference (`conversations[1]`)
by `AnyCapJudge` through the process-wide judge client. `AnyCapTask.process_document` returns, per item:

- `anycap_score`: the final score (0-4, after the length rules), None when unjudged;
- `anycap_avg_of_types`: the item's caption type and final score, None when unjudged (aggregated by
  `mean_of_type_means`: the paper's "Avg");
- `anycap_brief`, `anycap_detail`, `anycap_poem`, `anycap_narrative`, `anycap_style`: the final score under
  the item's own type, None under the others (so each is the mean over that type's judged items);
- `anycap_length_capped`: 1 when a length rule lowered the judge's score, 0 when not, None when unjudged;
- `anycap_failed`: 1 when the item has no valid judgment; `anycap_output_words`: the caption's word count;
- `judged`: the item's logged record (`capjudge.tasks.judged.judged_task`), aggregated as the number of judged
  items: the item's id, the judge and its settings, and the judgment (judge and final scores, the rule that
  capped, both word counts, the raw reply, the failure kind, the cache hit).

The aggregations the YAML names live in `capjudge.tasks.judged.aggregations`.

Judge settings come from the task YAML's `metadata` (tolerance, instruction_rule, max_tries) and can be
overridden per run by CAPJUDGE_ANYCAP_TOLERANCE and CAPJUDGE_ANYCAP_INSTRUCTION_RULE, read once per run. CAPJUDGE_CONSTRAINED_OUTPUT=1 adds the local llama.cpp server's JSON schema to every request.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from capjudge.judges.descriptor import JudgeDescriptor
from capjudge.judges.anycap.judge import (
    local_reply_constraint,
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    DESCRIPTOR,
    PUBLISHED_MAX_TRIES,
    AnyCapJudge,
    AnyCapResult,
)
from capjudge.judges.anycap.length_rule import (
    CAPTION_TYPES,
    DEFAULT_TOLERANCE_PERCENT,
    UnknownCaptionType,
    check_length_tolerance,
    normalise_caption_type,
    parse_tolerance,
)
from capjudge.judges.types import ParseFailure
from capjudge.tasks.judged.settings import MAX_TRIES_LIMIT, constrained_output_enabled, parse_bool, parse_count, setting
from capjudge.tasks.judged.sources import DatasetError, ItemFormat, read_json_lines, record_id
from capjudge.tasks.judged.judged_task import DEFAULT_MAX_CAPTION_CHARS, VIDEO_MISSING, JudgedTask, JudgeSettings
from capjudge.tasks.judged.judged_task import resolve_max_caption_chars, resolve_samples

__all__ = [
    "ANYCAP_FORMAT",
    "CAPTION_TYPES",
    "DEMO_FORMAT",
    "VIDEO_MISSING",
    "AnyCapSettings",
    "AnyCapTask",
    "item_metrics",
    "judge_item",
    "parse_anycap_record",
    "parse_demo_record",
    "task_row",
]

log = logging.getLogger(__name__)

METRIC_PREFIX = "anycap"


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
    `tests/demo_data.py`): id, video, instruction, reference, caption_type, already flat. Its length
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
class AnyCapSettings(JudgeSettings):
    tolerance: int
    instruction_rule: bool
    max_tries: int
    constrained_output: bool
    samples: int = 1
    max_caption_chars: int = DEFAULT_MAX_CAPTION_CHARS

    descriptor: ClassVar[JudgeDescriptor] = DESCRIPTOR
    # The style judge always needs the clip's frames and reads the written JSON score only.
    needs_video: ClassVar[bool] = True
    needs_logprobs: ClassVar[bool] = False

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
            max_tries=setting(metadata, "max_tries", PUBLISHED_MAX_TRIES, parse_count(MAX_TRIES_LIMIT)),
            constrained_output=constrained_output_enabled(env),
            samples=resolve_samples(metadata, env),
            max_caption_chars=resolve_max_caption_chars(metadata, env),
        )

    def local_reply_constraint(self) -> dict[str, Any]:
        return local_reply_constraint()

    def logged_settings(self) -> dict[str, Any]:
        return {
            "tolerance": self.tolerance,
            "instruction_rule": self.instruction_rule,
            "max_tries": self.max_tries,
            "sampling": {"temperature": DEFAULT_TEMPERATURE, "max_tokens": DEFAULT_MAX_TOKENS},
            "constrained_output": self.constrained_output,
            **({"samples": self.samples} if self.samples > 1 else {}),
        }


# ----------------------------------------------------------------------------------------------------------
# The lmms-eval task


class AnyCapTask(JudgedTask):
    """`class: !function utils.AnyCapTask` in tasks/anycap_style/*.yaml."""

    settings_type = AnyCapSettings

    @classmethod
    def run_judge(cls, doc: Mapping[str, Any], caption: str, settings: AnyCapSettings, client: Any, video: Any) -> AnyCapResult:
        judge = AnyCapJudge(client, tolerance=settings.tolerance, instruction_rule=settings.instruction_rule, max_tries=settings.max_tries)
        return judge.judge(
            doc["caption_type"],
            caption,
            doc["reference"],
            video=video,
            # The restriction sentence states the rule alone; the whole instruction is the fallback.
            instruction=doc.get("length_restriction") or doc.get("instruction"),
            item=str(doc["id"]),
        )

    @classmethod
    def unjudged(cls, doc: Mapping[str, Any], caption: str, settings: AnyCapSettings, failure: ParseFailure) -> AnyCapResult:
        """Unjudged, with the word counts and the length check still recorded."""
        tolerance = check_length_tolerance(doc["caption_type"], caption, doc["reference"], settings.tolerance, item=str(doc["id"]))
        return AnyCapResult.from_checks(None, tolerance, None, failure=failure.kind, failure_detail=failure.detail)

    @classmethod
    def combine(cls, results: list[AnyCapResult]) -> AnyCapResult:
        """The mean judge and final scores of the judged replies; capped when any reply was capped (the
        length checks are the caption's, the same for every reply)."""
        judged = [r for r in results if r.ok]
        if not judged:
            return results[0]
        return replace(
            judged[0],
            judge_score=statistics.fmean(r.judge_score for r in judged),  # type: ignore[arg-type]
            final_score=statistics.fmean(r.final_score for r in judged),  # type: ignore[arg-type]
            capped_by=next((r.capped_by for r in judged if r.capped_by is not None), None),
            reason=None,
        )

    @classmethod
    def metric_values(cls, doc: Mapping[str, Any], result: AnyCapResult) -> dict[str, Any]:
        final = result.final_score if result.ok else None
        metrics: dict[str, Any] = {f"{METRIC_PREFIX}_score": final}
        metrics[f"{METRIC_PREFIX}_avg_of_types"] = None if final is None else {"caption_type": result.caption_type, "score": final}
        for caption_type in CAPTION_TYPES:
            metrics[f"{METRIC_PREFIX}_{caption_type}"] = final if caption_type == result.caption_type else None
        metrics[f"{METRIC_PREFIX}_length_capped"] = None if final is None else int(result.capped_by is not None)
        metrics[f"{METRIC_PREFIX}_failed"] = int(not result.ok)
        # Judged items only, as every mean here (the count of an unjudged item stays in its `judgment` record).
        metrics[f"{METRIC_PREFIX}_output_words"] = result.output_words if final is not None else None
        return metrics


judge_item = AnyCapTask.judge_item
item_metrics = AnyCapTask.item_metrics

"""The AnyCapEval video style task (tasks/anycap_style/): instruction-following captions judged against a
reference with the AnyCapEval style rubric, the length rules applied in code.

Each item asks for one caption type (brief, detail, poem, narrative, style — the dataset's "theme") with an
instruction (`conversations[0]`); the model's caption is judged against the reference (`conversations[1]`)
by `AnyCapJudge` through the process-wide judge client. The items are read by
`capjudge.judges.datasets.anycap_video` (or `.demo`), as the YAML's `metadata.dataset` names.
`AnyCapTask.process_document` returns, per item:

- `anycap_score`: the final score (0-4, after the length rules), None when unjudged;
- `anycap_avg_of_types`: the item's caption type and final score, None when unjudged (aggregated by
  `mean_of_type_means`: the paper's "Avg");
- `anycap_brief`, `anycap_detail`, `anycap_poem`, `anycap_narrative`, `anycap_style`: the final score under
  the item's own type, None under the others (so each is the mean over that type's judged items);
- `anycap_length_capped`: 1 when a length rule lowered the judge's score, 0 when not, None when unjudged;
- `anycap_failed`: 1 when the item has no valid judgment; `anycap_output_words`: the caption's word count;
- `judged`: the item's logged record (`capjudge.tasks.harness.judged_task`), aggregated as the number of judged
  items: the item's id, the judge and its settings, and the judgment (judge and final scores, the rule that
  capped, both word counts, the raw reply, the failure kind, the cache hit).

The aggregations the YAML names live in `capjudge.tasks.harness.aggregations`.

Judge settings come from the task YAML's `metadata` (tolerance, instruction_rule, max_tries) and can be
overridden per run by CAPJUDGE_ANYCAP_TOLERANCE and CAPJUDGE_ANYCAP_INSTRUCTION_RULE, read once per run. CAPJUDGE_CONSTRAINED_OUTPUT=1 adds the local llama.cpp server's JSON schema to every request.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from capjudge.judges.client.panel import MEMBER_SEPARATOR
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
from capjudge.judges.anycap.length_rule import DEFAULT_TOLERANCE_PERCENT, check_length_tolerance, parse_tolerance
from capjudge.judges.datasets.anycap_video import CAPTION_TYPES
from capjudge.judges.types import JudgeCaller, ParseFailure
from capjudge.tasks.harness.settings import MAX_TRIES_LIMIT, constrained_output_enabled, parse_bool, parse_count, setting
from capjudge.tasks.harness.judged_task import DEFAULT_MAX_CAPTION_CHARS, VIDEO_MISSING, JudgedTask, JudgeSettings
from capjudge.tasks.harness.judged_task import resolve_max_caption_chars, resolve_samples

__all__ = [
    "CAPTION_TYPES",
    "VIDEO_MISSING",
    "AnyCapSettings",
    "AnyCapTask",
    "item_metrics",
    "judge_item",
]

log = logging.getLogger(__name__)

METRIC_PREFIX = "anycap"


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
    def run_judge(cls, doc: Mapping[str, Any], caption: str, settings: AnyCapSettings, client: JudgeCaller, video: Any) -> AnyCapResult:
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
    def metric_covers(cls, metric: str) -> str:
        """A per-type mean (a panel member's too) covers its type's items only."""
        caption_type = metric.split(MEMBER_SEPARATOR, 1)[0].removeprefix(f"{METRIC_PREFIX}_")
        return f"it counts {caption_type} items only" if caption_type in CAPTION_TYPES else ""

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

"""The G-VEval task (tasks/gveval/): MSVD-Eval items, one G-VEval ACCR judgment per caption, the metrics.
Its items are MSVD-Eval's, VATEX-EVAL's 18,000 rated candidates (with the 1-or-9 `references` setting) or the
demo split's: `capjudge.judges.datasets`, named by each YAML's `metadata.dataset`.

The model describes each video; `GVEvalTask.process_document` judges that caption with `GVEvalJudge` through
the process-wide judge client and returns, per item:

- `gveval_accuracy`, `gveval_completeness`, `gveval_conciseness`, `gveval_relevance`, `gveval_mean`: the
  judge's 0-100 scores, or None when the item could not be judged (aggregated by `mean_of_judged`, which
  excludes None: an unjudged item never counts as 0);
- `gveval_failed`: 1 when the item has no valid judgment (aggregated by `count_failed`);
- `gveval_kendall_b_<dimension>`: {"item": id, "judge": score, "human": [one score per annotator]}, only for
  items that carry human scores (MSVD-Eval does, 1-5 per annotator), aggregated by `kendall_b` (in item-id
  order, so its interval is the same from 1 process or N);
- `judged`: the item's logged record (`capjudge.tasks.harness.judged_task`), aggregated as the number of judged
  items: the item's id, which judge with which settings, and the judgment (the parsed scores, the raw reply,
  the failure kind, whether the reply came from the cache). The leaderboard reads it.

The aggregations the YAML names live in `capjudge.tasks.harness.aggregations`.

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
from capjudge.judges.types import JudgeCaller, ParseFailure
from capjudge.tasks.harness.settings import MAX_TRIES_LIMIT, constrained_output_enabled, parse_choice, parse_count, setting
from capjudge.judges.gveval.parser import SCORE_NAMES
from capjudge.tasks.harness.judged_task import DEFAULT_MAX_CAPTION_CHARS, VIDEO_MISSING, JudgedTask, JudgeSettings
from capjudge.tasks.harness.judged_task import resolve_max_caption_chars, resolve_samples

__all__ = [
    "SCORE_NAMES",
    "VIDEO_MISSING",
    "GVEvalSettings",
    "GVEvalTask",
    "item_metrics",
    "judge_item",
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
    def run_judge(cls, doc: Mapping[str, Any], caption: str, settings: GVEvalSettings, client: JudgeCaller, video: Any) -> GVEvalResult:
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

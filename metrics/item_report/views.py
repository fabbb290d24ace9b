"""What one logged judgment says, laid out for a reader: scores, the judge's words, the length rule, failure.

Input is the `judgment` of a sample line's `judged` record (tasks/judged_task.py `ItemJudgment.record()`):
the judge's `log_fields()` plus caption, video, raw_reply, cache_hit, requests, and with k > 1 replies per
item `samples` (each reply's own record) and `spread` (per score, the standard deviation of the replies).

G-VEval logs the score each dimension was given (the expected value under "expected" scoring, unless it fell
back to the written number, `fallback_reason` saying which and why); the written number is read back from
the raw reply with the judge's own parser, so both are shown without logging more. AnyCap logs its
length-rule decision in full (output and reference words, tolerance, whether the rule applied, the cap).
A judge the report does not know is shown by its logged scores and raw reply.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GVEVAL = "gveval"
ANYCAP = "anycap"
# The spread key of each judge's main score (`judged_task._spread` keys by the result's score names).
MAIN_SCORE_NAME = {GVEVAL: "mean", ANYCAP: "score"}


@dataclass(frozen=True)
class ScoreRow:
    name: str
    value: float | None  # the value the run used (None: unjudged)
    written: float | None = None  # the number written in the reply (G-VEval)
    expected: float | None = None  # the probability-weighted value (G-VEval "expected" scoring)
    note: str | None = None  # why expected is missing, or what the value is


@dataclass(frozen=True)
class LengthDecision:
    """AnyCap's length rule for one caption, as judged."""

    caption_type: str | None
    output_words: int | None
    reference_words: int | None
    tolerance_percent: int | None
    rule_applies: bool | None  # the rule covers this caption type
    within_tolerance: bool | None
    judge_score: float | None
    final_score: float | None
    capped_by: str | None  # the rule that lowered the score, None when nothing did
    restriction: str | None = None
    restriction_satisfied: bool | None = None

    @property
    def capped(self) -> bool:
        return self.capped_by is not None


@dataclass(frozen=True)
class ReplyView:
    """One judge reply: its explanation, its raw text, what it scored, how it was got."""

    reasoning: str | None
    raw: str | None
    scores: tuple[ScoreRow, ...]
    failure: str | None
    failure_detail: str | None
    cached: bool | None
    requests: int | None


@dataclass(frozen=True)
class JudgmentView:
    caption: str | None
    caption_type: str | None
    scores: tuple[ScoreRow, ...]  # the item's scores (with k replies: their combination)
    replies: tuple[ReplyView, ...]  # one per reply the judge gave (k > 1: each of them)
    length: LengthDecision | None
    failure: str | None
    failure_detail: str | None
    requests: int | None  # HTTP requests made for this item (retries included; 0 when all came from the cache)
    cached: bool | None
    spread: float | None  # standard deviation of the main score over k replies (None: k = 1 or < 2 judged)
    flags: tuple[str, ...] = ()


def view_judgment(judge: str | None, judgment: Mapping[str, Any]) -> JudgmentView:
    samples = [s for s in judgment.get("samples") or () if isinstance(s, Mapping)]
    reply_of = {GVEVAL: _gveval_reply, ANYCAP: _anycap_reply}.get(judge or "", _generic_reply)
    replies = tuple(reply_of(sample) for sample in samples) if samples else (reply_of(judgment),)
    # With k replies the item's scores are their combination: only the values (each reply has its own readings).
    combined = tuple(ScoreRow(row.name, row.value) for row in reply_of(judgment).scores) if samples else replies[0].scores
    spread = judgment.get("spread") if isinstance(judgment.get("spread"), Mapping) else {}
    main = MAIN_SCORE_NAME.get(judge or "")
    return JudgmentView(
        caption=_text(judgment.get("caption")),
        caption_type=_text(judgment.get("caption_type")),
        scores=combined,
        replies=replies,
        length=_length_decision(judgment) if judge == ANYCAP else None,
        failure=_text(judgment.get("failure")),
        failure_detail=_text(judgment.get("failure_detail")) or None,
        requests=_int(judgment.get("requests")),
        cached=judgment.get("cache_hit") if isinstance(judgment.get("cache_hit"), bool) else None,
        spread=_number(spread.get(main)) if main else None,
        flags=tuple(str(flag) for flag in judgment.get("flags") or ()),
    )


# ---------------------------------------------------------------------------------------------------------
# G-VEval


def _gveval_reply(record: Mapping[str, Any]) -> ReplyView:
    from capjudge.judges.gveval.parser import (
        DIMENSION_NAMES,
        ParseFailure,
        parse_statements,
        reasoning_text,
    )

    raw = _text(record.get("raw_reply"))
    statements = parse_statements(raw) if raw else None
    if isinstance(statements, ParseFailure):
        statements = None
    scores = record.get("scores") if isinstance(record.get("scores"), Mapping) else {}
    scoring = record.get("scoring")
    fallbacks = _fallbacks(record.get("fallback_reason"), DIMENSION_NAMES)
    rows = []
    for name in DIMENSION_NAMES:
        value = _number(scores.get(name))
        written = statements[name].value if statements and name in statements else None
        if scoring != "expected":
            expected, note = None, "text scoring: the written number is the score"
        elif name in fallbacks:
            expected, note = None, f"no expected value ({fallbacks[name]}): the written number is used"
        else:
            expected, note = value, None
        rows.append(ScoreRow(name, value, written, expected, note))
    rows.append(ScoreRow(
        "mean", _number(scores.get("mean")), _mean([r.written for r in rows]), _mean([r.expected for r in rows]),
    ))
    return ReplyView(
        reasoning=reasoning_text(raw, statements.values()) if raw and statements else None,
        raw=raw, scores=tuple(rows), failure=_text(record.get("failure")),
        failure_detail=_text(record.get("failure_detail")) or None,
        cached=record.get("cache_hit") if isinstance(record.get("cache_hit"), bool) else None,
        requests=_int(record.get("requests")),
    )


def _fallbacks(reason: Any, dimensions: Sequence[str]) -> dict[str, str]:
    """Per dimension, why its expected value was not computed (the parser summarises one shared reason)."""
    if not isinstance(reason, str) or not reason:
        return {}
    named = dict(part.strip().split("=", 1) for part in reason.replace(";", ",").split(",") if "=" in part)
    return named if named else {name: reason for name in dimensions}


# ---------------------------------------------------------------------------------------------------------
# AnyCap


def _anycap_reply(record: Mapping[str, Any]) -> ReplyView:
    capped_by = _text(record.get("capped_by"))
    return ReplyView(
        reasoning=_text(record.get("reason")),
        raw=_text(record.get("raw_reply")),
        scores=(
            ScoreRow("final score", _number(record.get("final_score")),
                     note=f"lowered by the {capped_by} rule" if capped_by else None),
            ScoreRow("judge score", _number(record.get("judge_score"))),
        ),
        failure=_text(record.get("failure")),
        failure_detail=_text(record.get("failure_detail")) or None,
        cached=record.get("cache_hit") if isinstance(record.get("cache_hit"), bool) else None,
        requests=_int(record.get("requests")),
    )


def _length_decision(record: Mapping[str, Any]) -> LengthDecision:
    return LengthDecision(
        caption_type=_text(record.get("caption_type")),
        output_words=_int(record.get("output_words")),
        reference_words=_int(record.get("reference_words")),
        tolerance_percent=_int(record.get("tolerance_percent")),
        rule_applies=_bool(record.get("length_rule_applied")),
        within_tolerance=_bool(record.get("within_tolerance")),
        judge_score=_number(record.get("judge_score")),
        final_score=_number(record.get("final_score")),
        capped_by=_text(record.get("capped_by")),
        restriction=_text(record.get("restriction")),
        restriction_satisfied=_bool(record.get("restriction_satisfied")),
    )


# ---------------------------------------------------------------------------------------------------------
# Any other judge


def _generic_reply(record: Mapping[str, Any]) -> ReplyView:
    scores = record.get("scores") if isinstance(record.get("scores"), Mapping) else {}
    return ReplyView(
        reasoning=_text(record.get("reason") or record.get("reasoning")),
        raw=_text(record.get("raw_reply")),
        scores=tuple(ScoreRow(str(name), _number(value)) for name, value in scores.items()),
        failure=_text(record.get("failure")),
        failure_detail=_text(record.get("failure_detail")) or None,
        cached=record.get("cache_hit") if isinstance(record.get("cache_hit"), bool) else None,
        requests=_int(record.get("requests")),
    )


# ---------------------------------------------------------------------------------------------------------


def _mean(values: Sequence[float | None]) -> float | None:
    import numpy as np

    return None if any(v is None for v in values) or not values else float(np.mean(values))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None

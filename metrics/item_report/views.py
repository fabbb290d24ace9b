"""What one logged judgment says, laid out for a reader: scores, the judge's words, the length rule, failure.

Input is the `judgment` of an item's logged record (`capjudge.judges.record.Judgment`): the judge's own
fields (its `log_fields()`) plus caption, video, raw reply, cache hit, requests, and with k > 1 replies per
item each reply (`ReplySample`). The spread of the judge's main score over the replies is computed from
them, so records written before AnyCap's spread was logged (record version 1) show it too.

Each reply is laid out by its judge's `view_reply` (judges/gveval/reply_view.py: the written number and the
expected value per dimension; judges/anycap/reply_view.py: the final and the judge's score); a judge without
one, or one read back from its logged facts alone, by its declared scores (`generic_reply_view`). A judgment
that logs a length-rule decision (AnyCap's) shows it in full: output and reference words, tolerance, whether
the rule applied, the cap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capjudge.judges.descriptor import JudgeDescriptor
from capjudge.judges.record import Judgment, ReplySample, reply_spread
from capjudge.judges.reply_view import ReplyView, ScoreRow, generic_reply_view, number, text

# A judgment that logs this field logged a length-rule decision (AnyCap's); the page shows it in full.
LENGTH_RULE_FIELD = "length_rule_applied"


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


def view_judgment(judge: JudgeDescriptor | None, judgment: Judgment | None) -> JudgmentView:
    """The view of an item's logged judgment (None: the line logs none) by the judge `judge` describes (None:
    a judge the run does not describe)."""
    if judgment is None:
        judgment = Judgment(caption=None, video=None, fields={}, raw_reply=None, cache_hit=None, requests=None)
    declared = judge.reply_fields if judge is not None else None
    reply_of = judge.view_reply if judge is not None and judge.view_reply else generic_reply_view(declared)
    own = ReplySample(judgment.fields, judgment.raw_reply, judgment.cache_hit, judgment.requests)
    replies = tuple(reply_of(sample) for sample in judgment.samples) if judgment.samples else (reply_of(own),)
    # With k replies the item's scores are their combination: only the values (each reply has its own readings).
    combined = (tuple(ScoreRow(row.name, row.value) for row in reply_of(own).scores) if judgment.samples
                else replies[0].scores)
    spread = reply_spread(judgment.samples, declared).get(declared.main) if declared and declared.main else None
    fields = judgment.fields
    return JudgmentView(
        caption=judgment.caption,
        caption_type=text(fields.get("caption_type")),
        scores=combined,
        replies=replies,
        length=_length_decision(fields) if LENGTH_RULE_FIELD in fields else None,
        failure=judgment.failure,
        failure_detail=judgment.failure_detail or None,
        requests=judgment.requests,
        cached=judgment.cache_hit,
        spread=spread,
        flags=tuple(str(flag) for flag in fields.get("flags") or ()),
    )


# ---------------------------------------------------------------------------------------------------------


def _length_decision(record: Mapping[str, Any]) -> LengthDecision:
    return LengthDecision(
        caption_type=text(record.get("caption_type")),
        output_words=_int(record.get("output_words")),
        reference_words=_int(record.get("reference_words")),
        tolerance_percent=_int(record.get("tolerance_percent")),
        rule_applies=_bool(record.get("length_rule_applied")),
        within_tolerance=_bool(record.get("within_tolerance")),
        judge_score=number(record.get("judge_score")),
        final_score=number(record.get("final_score")),
        capped_by=text(record.get("capped_by")),
        restriction=text(record.get("restriction")),
        restriction_satisfied=_bool(record.get("restriction_satisfied")),
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None

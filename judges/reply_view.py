"""One judge reply laid out for a reader (the item report): its explanation, raw text and scores.

Each judge may declare how its replies are viewed (`JudgeDescriptor.view_reply`, e.g. G-VEval shows the
written and the expected value of each dimension); any other judge, including one read back from its logged
facts alone, is viewed from its declared `ReplyFields` by `generic_reply_view`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from capjudge.judges.record import FAILURE_DETAIL_KEY, ReplyFields, ReplySample


@dataclass(frozen=True)
class ScoreRow:
    name: str
    value: float | None  # the value the run used (None: unjudged)
    written: float | None = None  # the number written in the reply (G-VEval)
    expected: float | None = None  # the probability-weighted value (G-VEval "expected" scoring)
    note: str | None = None  # why expected is missing, or what the value is


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


def generic_reply_view(fields: ReplyFields | None) -> Callable[[ReplySample], ReplyView]:
    """A viewer showing the judge's declared scores (without a declaration: its `scores` mapping)."""

    def view(reply: ReplySample) -> ReplyView:
        record = reply.fields
        if fields is not None and fields.scores:
            rows = tuple(ScoreRow(name, reply.value(fields.values[name])) for name in fields.scores)
        else:
            scores = record.get("scores") if isinstance(record.get("scores"), dict) else {}
            rows = tuple(ScoreRow(str(name), number(value)) for name, value in scores.items())
        return ReplyView(
            reasoning=text(record.get("reason") or record.get("reasoning")),
            raw=reply.raw_reply, scores=rows, failure=reply.failure,
            failure_detail=text(record.get(FAILURE_DETAIL_KEY)) or None,
            cached=reply.cache_hit, requests=reply.requests,
        )

    return view


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def text(value: Any) -> str | None:
    return value if isinstance(value, str) else None

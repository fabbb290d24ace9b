"""How the item report shows one G-VEval reply: per dimension the score used, the number written in the
reply (read back with the judge's own parser) and the expected value under "expected" scoring."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from capjudge.judges.gveval.parser import DIMENSION_NAMES, ParseFailure, parse_statements, reasoning_text
from capjudge.judges.record import ReplySample
from capjudge.judges.reply_view import ReplyView, ScoreRow, number, text


def view_gveval_reply(reply: ReplySample) -> ReplyView:
    record = reply.fields
    raw = reply.raw_reply
    statements = parse_statements(raw) if raw else None
    if isinstance(statements, ParseFailure):
        statements = None
    scores = record.get("scores") if isinstance(record.get("scores"), Mapping) else {}
    scoring = record.get("scoring")
    fallbacks = _fallbacks(record.get("fallback_reason"), DIMENSION_NAMES)
    rows = []
    for name in DIMENSION_NAMES:
        value = number(scores.get(name))
        written = statements[name].value if statements and name in statements else None
        if scoring != "expected":
            expected, note = None, "text scoring: the written number is the score"
        elif name in fallbacks:
            expected, note = None, f"no expected value ({fallbacks[name]}): the written number is used"
        else:
            expected, note = value, None
        rows.append(ScoreRow(name, value, written, expected, note))
    rows.append(ScoreRow(
        "mean", number(scores.get("mean")), _mean([r.written for r in rows]), _mean([r.expected for r in rows]),
    ))
    return ReplyView(
        reasoning=reasoning_text(raw, statements.values()) if raw and statements else None,
        raw=raw, scores=tuple(rows), failure=reply.failure, failure_detail=text(record.get("failure_detail")) or None,
        cached=reply.cache_hit, requests=reply.requests,
    )


def _fallbacks(reason: Any, dimensions: Sequence[str]) -> dict[str, str]:
    """Per dimension, why its expected value was not computed (the parser summarises one shared reason)."""
    if not isinstance(reason, str) or not reason:
        return {}
    named = dict(part.strip().split("=", 1) for part in reason.replace(";", ",").split(",") if "=" in part)
    return named if named else {name: reason for name in dimensions}


def _mean(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) or not values else statistics.fmean(values)  # type: ignore[arg-type]

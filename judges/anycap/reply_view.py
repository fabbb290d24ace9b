"""How the item report shows one AnyCap reply: the final score (and which length rule lowered it) and the
judge's own score, with its reason."""

from __future__ import annotations

from capjudge.judges.record import ReplySample
from capjudge.judges.reply_view import ReplyView, ScoreRow, number, text


def view_anycap_reply(reply: ReplySample) -> ReplyView:
    record = reply.fields
    capped_by = text(record.get("capped_by"))
    return ReplyView(
        reasoning=text(record.get("reason")),
        raw=reply.raw_reply,
        scores=(
            ScoreRow("final score", number(record.get("final_score")),
                     note=f"lowered by the {capped_by} rule" if capped_by else None),
            ScoreRow("judge score", number(record.get("judge_score"))),
        ),
        failure=reply.failure,
        failure_detail=text(record.get("failure_detail")) or None,
        cached=reply.cache_hit,
        requests=reply.requests,
    )

"""The per-battle page of an arena verdict file (OUT/arena_<task>.html): for every item and pair of models, both
captions, and per judge (panel member) both orders' verdicts on every rubric dimension with the replies; a
position-inconsistent verdict (the order changed it) is marked, a failed order is shown as failed (its kind
and why), never as a tie. Above the battles, each judge's position bias and ranking (`verdict_report`).

Built from the checked file (`read_arena_file`: its hashes, every field, duplicate keys refused) with the item
report's page machinery (`page.fill_page`: one self-contained HTML file whose Content-Security-Policy forbids
any request, the data inlined as JSON and drawn through textContent). The data starts with the verdict
file's stamp, so a rerun replaces its own page only (`capjudge.metrics.sensitivity.outputs.page_found`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from capjudge.judges.pairwise.record import OrderVerdict, PairRecord
from capjudge.judges.pairwise.verdicts import OVERALL
from capjudge.metrics.arena.position_bias import both_orders_verdict
from capjudge.metrics.arena.verdict_report import VerdictReport, ordered_verdicts
from capjudge.metrics.arena.verdict_text import STAMP_KEY
from capjudge.metrics.item_report.page import fill_page, script_json

_TEMPLATE = "arena_items.html"
_STYLES = ("item_report.css", "arena_items.css")
_SCRIPTS = ("page_common.js", "arena_items.js")


def arena_page_title(report: VerdictReport) -> str:
    return f"Arena battles, both orders: {report.judge} on {report.task}"


def _order(order: OrderVerdict) -> dict[str, Any]:
    return {"verdicts": None if order.verdicts is None else dict(order.verdicts), "failure": order.failure,
            "failure_detail": order.failure_detail, "reply": order.reply, "cache_hit": order.cache_hit}


def _judgment(record: PairRecord) -> dict[str, Any]:
    # Consistent: both orders name the same model's caption (or both a tie); None when an order failed.
    consistent = {dimension: (record.a_first.verdicts[dimension] == record.b_first.verdicts[dimension]
                              if record.both_orders() else None)  # type: ignore[index]
                  for dimension in record.dimensions}
    overall = ordered_verdicts(record, OVERALL)
    return {"member": record.member, "judge_model": record.judge_model, "judge_version": record.judge_version,
            "dimensions": list(record.dimensions), "a_first": _order(record.a_first), "b_first": _order(record.b_first),
            "consistent": consistent, "flipped": record.flipped(OVERALL),
            "for_ranking": both_orders_verdict(overall.forward, overall.backward)}


def _battles(records: Sequence[PairRecord]) -> list[dict[str, Any]]:
    battles: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in records:
        key = (record.item_id, record.model_a, record.model_b)
        if key not in battles:
            battles[key] = {"item_id": record.item_id, "cluster": record.cluster, "model_a": record.model_a,
                            "model_b": record.model_b, "caption_a": record.caption_a, "caption_b": record.caption_b,
                            "length": dict(record.length), "judgments": []}
        battles[key]["judgments"].append(_judgment(record))
    return list(battles.values())


def _summary(report: VerdictReport) -> list[dict[str, Any]]:
    rows = []
    for member in report.members:
        bias, ratings = member.overall.bias, member.overall.ratings
        controlled = member.length_controlled
        rows.append({
            "member": member.member, "judge_model": member.judge_model, "pairs": member.pairs,
            "failed_orders": member.failed_orders, "pairs_with_a_failed_order": bias.n_failed,
            "consistency": [bias.consistency.value, bias.consistency.ci_low, bias.consistency.ci_high],
            "fairness": [bias.fairness.value, bias.fairness.ci_low, bias.fairness.ci_high],
            "flipped": [bias.flipped.value, bias.flipped.ci_low, bias.flipped.ci_high],
            "inconsistent_ties": bias.inconsistent_ties,
            "ranking": [] if ratings is None else [[m, ratings.ratings[m].value] for m in ratings.ranking],
            "no_ranking": member.overall.no_ratings,
            "length_controlled": [] if controlled is None else [[m, controlled.ratings[m].value]
                                                               for m in controlled.ranking],
        })
    return rows


def arena_page_data(report: VerdictReport, records: Sequence[PairRecord]) -> dict[str, Any]:
    """What the page's script draws; the stamp first (read from the page's head without parsing it all)."""
    return {STAMP_KEY: report.stamp, "file": report.verdict_file, "task": report.task, "judge": report.judge,
            "command": report.command, "models": list(report.models), "confidence": report.settings.confidence,
            "members": [member.member for member in report.members], "summary": _summary(report),
            "battles": _battles(records)}


def render_arena_page(report: VerdictReport, records: Sequence[PairRecord]) -> str:
    return fill_page(_TEMPLATE, arena_page_title(report), _STYLES, _SCRIPTS, script_json(arena_page_data(report, records)))

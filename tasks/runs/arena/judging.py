"""The arena's judging: every planned pair, in both orders, by every member of who judges the task (one judge
or a panel), through the task's own judging machinery, as `capjudge sensitivity` judges outside lmms-eval:
the task is built as lmms-eval builds it (settings, environment overrides, pre-flight probe of each member),
and the orders are judged by `judge_by_members` (capjudge.tasks.harness.members: each member at its own client's
concurrency, through its process-wide client, so the same reply cache and rate budget as every other judgment,
with the progress bar; every reply on disk before it returns). Only the per-item function differs: an order
of a pair through the judge's pairwise prompt (capjudge.tasks.runs.arena.pairwise_judges).

Exactly 2 x pairs requests per member when every reply parses (re-asks when one does not, up to max_tries);
a rerun asks nothing: every order is a cache hit. One `PairRecord` per (item, pair, member).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.judges.pairwise.record import OrderVerdict, PairRecord
from capjudge.judges.pairwise.verdicts import OVERALL, for_models
from capjudge.tasks.runs.arena.pairs import PlannedPair
from capjudge.tasks.runs.arena.pairwise_judges import OrderJudgment, PairwiseJudge, judge_order


def orders_to_ask(pairs: Sequence[PlannedPair]) -> list[tuple[Mapping[str, Any], str]]:
    """(doc, order key) of both orders of every pair: what the judging store (and a dry run) counts."""
    return [(pair.doc, pair.order_key(a_first)) for pair in pairs for a_first in (True, False)]


def order_judge(judge: PairwiseJudge, pairs: Sequence[PlannedPair]):
    """The per-order function `judge_by_members` (and `price_items`) call: (doc, order key, client) -> judgment."""
    shown = {(pair.item_id, pair.order_key(a_first)): pair.shown(a_first) for pair in pairs for a_first in (True, False)}

    def judge_one(doc: Mapping[str, Any], key: str, client: Any) -> OrderJudgment:
        first, second = shown[(str(doc["id"]), key)]
        return judge_order(judge, doc, first, second, client)

    return judge_one


@dataclass(frozen=True)
class MemberCounts:
    """What one judge (or panel member) did: the summary's row."""

    member: str
    pairs: int
    both_orders: int  # pairs with verdicts in both orders
    flips: int  # of those, pairs whose overall verdict changed with the order
    failed_orders: int
    requests: int
    cache_hits: int  # orders answered from the reply cache


def judge_pairs(task: Any, judge: PairwiseJudge, pairs: Sequence[PlannedPair]) -> list[PairRecord]:
    """Both orders of every pair by every member; one record per (pair, member), pairs in plan order."""
    from capjudge.judges.client.registry import shared_client
    from capjudge.tasks.harness.members import judge_by_members
    from capjudge.tasks.harness.prejudge import item_key

    who = task.who_judges()
    try:
        store = judge_by_members(orders_to_ask(pairs), who.members, order_judge(judge, pairs),
                                 lambda member, doc: shared_client(member.config), workers=None,
                                 description=f"capjudge: arena of {task.config.task}")
    finally:
        for member in who.members:  # every reply on disk before the records are made: a crash loses none
            shared_client(member.config).flush_cache()
    records = []
    for pair in pairs:
        a_first = store.take(item_key(pair.doc, pair.order_key(True)))
        b_first = store.take(item_key(pair.doc, pair.order_key(False)))
        assert a_first is not None and b_first is not None, "judge_by_members judged every order"
        length = judge.length(pair.doc, pair.caption_a, pair.caption_b)
        for member in who.members:
            records.append(PairRecord(
                pair.item_id, pair.cluster, pair.model_a, pair.model_b, pair.caption_a, pair.caption_b,
                judge.settings.judge_name, member.name, str(member.identity.get("model")), judge.version,
                judge.dimensions, _order(a_first[member.name], True), _order(b_first[member.name], False), length))
    return records


def _order(judgment: OrderJudgment, a_shown_first: bool) -> OrderVerdict:
    result = judgment.result
    verdicts = None if result.verdicts is None else {
        name: for_models(verdict, a_shown_first) for name, verdict in result.verdicts.items()}
    return OrderVerdict(verdicts, result.failure_kind, result.failure_detail or None, judgment.raw_reply,
                        judgment.cache_hit, judgment.requests)


def member_counts(records: Sequence[PairRecord], members: Sequence[str]) -> list[MemberCounts]:
    """Each member's row of the summary, from its records."""
    rows = []
    for member in members:
        mine = [record for record in records if record.member == member]
        orders = [order for record in mine for order in (record.a_first, record.b_first)]
        rows.append(MemberCounts(member, len(mine), sum(r.both_orders() for r in mine),
                                 sum(r.flipped(OVERALL) for r in mine), sum(not o.ok for o in orders),
                                 sum(o.requests for o in orders), sum(o.cache_hit for o in orders)))
    return rows

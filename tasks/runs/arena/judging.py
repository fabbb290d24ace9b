"""The arena's judging: every planned pair, in both orders, by every member of who judges the task (one judge
or a panel), through the task's own judging machinery, as `capjudge sensitivity` judges outside lmms-eval:
the task is built as lmms-eval builds it (settings, environment overrides, pre-flight probe of each member),
and the orders are judged by `judge_by_members` (capjudge.tasks.harness.members: each member at its own client's
concurrency, through its process-wide client, so the same reply cache and rate budget as every other judgment,
with the progress bar; every reply on disk before it returns). Only the per-item function differs: an order
of a pair through the judge's pairwise prompt (capjudge.tasks.runs.arena.pairwise_judges).

Exactly 2 x pairs requests per member when every reply parses (re-asks when one does not, up to max_tries);
a rerun asks nothing: every order is a cache hit. One `PairRecord` per (item, pair, member), and with a panel
one more, the panel's own verdict from its members' (capjudge.tasks.harness.panel_pairwise).

With `--batch` the orders go through the OpenAI Batch API first (`batch_pairs`: the judging stage's batch rounds,
capjudge.tasks.runs.judging.batch_stage, with the orders as its lines), then the records are made from the cache.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.judges.pairwise.record import OrderVerdict, PairRecord
from capjudge.judges.pairwise.verdicts import OVERALL, for_models
from capjudge.tasks.runs.arena.pairs import PlannedPair
from capjudge.tasks.runs.arena.pairwise_judges import OrderJudgment, PairwiseJudge, judge_order


def asked_order(pairs: Sequence[PlannedPair]) -> dict[tuple[str, str], str]:
    """(item, order key) of both orders of every pair -> the order key that is asked for it: its own, or that of
    the first order of the item that shows the same two captions in the same places (two candidates with the same
    words, paired with a third): one request, never the same one twice under two names."""
    first_showing: dict[tuple[str, str, str], str] = {}
    asked = {}
    for pair in pairs:
        for a_first in (True, False):
            key = pair.order_key(a_first)
            asked[(pair.item_id, key)] = first_showing.setdefault((pair.item_id, *pair.shown(a_first)), key)
    return asked


def orders_to_ask(pairs: Sequence[PlannedPair]) -> list[tuple[Mapping[str, Any], str]]:
    """(doc, order key) of every order asked (`asked_order`'s distinct ones): what the judging store (and a dry
    run) counts."""
    docs = {pair.item_id: pair.doc for pair in pairs}
    return [(docs[item], key) for item, key in dict.fromkeys((item, key) for (item, _), key in asked_order(pairs).items())]


def order_judge(judge: PairwiseJudge, pairs: Sequence[PlannedPair],
                for_order: Callable[[Any, Mapping[str, Any], str], Any] | None = None):
    """The per-order function `judge_by_members` (and `price_items`) call: (doc, order key, client) -> judgment.
    `for_order(client, doc, key)`, when given, makes the order's own client of what `client_of` gave (a Batch
    API line is one order: its recorder is per order, not per item)."""
    shown = {(pair.item_id, pair.order_key(a_first)): pair.shown(a_first) for pair in pairs for a_first in (True, False)}

    def judge_one(doc: Mapping[str, Any], key: str, client: Any) -> OrderJudgment:
        first, second = shown[(str(doc["id"]), key)]
        return judge_order(judge, doc, first, second, client if for_order is None else for_order(client, doc, key))

    return judge_one


def orders_left_to_ask(task: Any, judge: PairwiseJudge, pairs: Sequence[PlannedPair]) -> bool:
    """Whether a run would send a request: some member's reply cache holds no usable reply to some order (each
    order built by the run's own per-order function and looked up read-only, as `capjudge arena --dry-run`
    looks). The run probes its judges (pre-flight) only then: a fully cached rerun sends nothing at all."""
    from functools import partial

    from capjudge.judges.client.cache_reader import any_request_left

    judge_one = order_judge(judge, pairs)
    return any_request_left([member.config for member in task.who_judges().members],
                            (partial(judge_one, doc, key) for doc, key in orders_to_ask(pairs)))


def order_line_id(doc: Mapping[str, Any], key: str) -> str:
    """One order's id among a run's Batch API lines: the item and a digest of the order (the models' names are
    anyone's text; the digest keeps the id short and free of separators)."""
    return f"{doc['id']}/{hashlib.sha256(key.encode('utf-8')).hexdigest()[:16]}"


def _judge_orders(task: Any, judge: PairwiseJudge, pairs: Sequence[PlannedPair], recorder_for: Any | None,
                  description: str) -> Any:
    """Both orders of every pair by every member: through each member's shared client, or (`recorder_for`, the
    batch stage's) through a per-order Batch API recorder. Every reply on disk before it returns."""
    from capjudge.judges.client.registry import shared_client
    from capjudge.tasks.harness.members import judge_by_members

    who = task.who_judges()
    if recorder_for is None:
        client_of, for_order = (lambda member, doc: shared_client(member.config)), None
    else:
        client_of = lambda member, doc: member  # noqa: E731 - the order's recorder is made per order, below
        for_order = lambda member, doc, key: recorder_for(member, order_line_id(doc, key))  # noqa: E731
    try:
        return judge_by_members(orders_to_ask(pairs), who.members, order_judge(judge, pairs, for_order), client_of,
                                workers=None, description=description)
    finally:
        for member in who.members:  # every reply on disk before the records are made: a crash loses none
            shared_client(member.config).flush_cache()


def batch_pairs(task: Any, judge: PairwiseJudge, pairs: Sequence[PlannedPair], folder: Path, options: Any) -> Any:
    """Both orders of every pair through the Batch API (`options`: BatchOptions) into the members' reply caches;
    the batch stage's summary. The state files name the plan (a digest of every pair), so another plan's
    state in the same folder is refused, never mixed in."""
    from capjudge.tasks.runs.judging.batch_stage import run_batches

    plan = json.dumps([[p.item_id, p.model_a, p.caption_a, p.model_b, p.caption_b] for p in pairs], ensure_ascii=False)
    run = {"task": task.config.task, "arena_orders": str(2 * len(pairs)),
           "arena_plan": hashlib.sha256(plan.encode("utf-8")).hexdigest()}
    return run_batches(task, folder, options, run=run, command="capjudge arena --batch",
                       collect=lambda recorder_for, description: _judge_orders(task, judge, pairs, recorder_for,
                                                                                description))


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


def judge_pairs(task: Any, judge: PairwiseJudge, pairs: Sequence[PlannedPair],
                recorder_for: Any | None = None) -> list[PairRecord]:
    """Both orders of every pair by every member; one record per (pair, member), pairs in plan order.
    `recorder_for`: after `batch_pairs`, the batch stage's cache-only recorders (nothing asked online)."""
    from capjudge.tasks.harness.prejudge import item_key

    who = task.who_judges()
    store = _judge_orders(task, judge, pairs, recorder_for, f"capjudge: arena of {task.config.task}")
    asked = asked_order(pairs)
    taken: dict[tuple[str, str], Any] = {}

    def judgments_of(pair: PlannedPair, a_first: bool) -> tuple[Any, bool]:
        """The members' judgments of one order, and whether an earlier record already reported them."""
        key = (pair.item_id, asked[(pair.item_id, pair.order_key(a_first))])
        if key in taken:
            return taken[key], True
        taken[key] = store.take(item_key(pair.doc, key[1]))
        assert taken[key] is not None, "judge_by_members judged every order"
        return taken[key], False

    records = []
    for pair in pairs:
        (a_first, a_again), (b_first, b_again) = judgments_of(pair, True), judgments_of(pair, False)
        length = judge.length(pair.doc, pair.caption_a, pair.caption_b)
        mine = [PairRecord(
            pair.item_id, pair.cluster, pair.model_a, pair.model_b, pair.caption_a, pair.caption_b,
            judge.settings.judge_name, member.name, str(member.identity.get("model")), judge.version,
            judge.dimensions, _order(a_first[member.name], True, a_again), _order(b_first[member.name], False, b_again),
            length)
            for member in who.members]
        records += who.pair_records(mine)  # with a panel, also the panel's own verdict from its members'
    return records


def _order(judgment: OrderJudgment, a_shown_first: bool, reported: bool = False) -> OrderVerdict:
    """One order's verdicts about the models; `reported`: an earlier record holds this same request's judgment
    (the same captions in the same places), so this one claims no request and no cache hit of its own."""
    result = judgment.result
    verdicts = None if result.verdicts is None else {
        name: for_models(verdict, a_shown_first) for name, verdict in result.verdicts.items()}
    return OrderVerdict(verdicts, result.failure_kind, result.failure_detail or None, judgment.raw_reply,
                        judgment.cache_hit and not reported, 0 if reported else judgment.requests)


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

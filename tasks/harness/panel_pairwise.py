"""A panel's own pairwise verdict, from its members' (`capjudge arena` with CAPJUDGE_PANEL), as the pointwise
panel's score is the judge's combination of its members' (capjudge.tasks.harness.panel_judging).

Per pair, per order and per rubric dimension: the members that gave that order a verdict vote, 'A' (model_a's
caption) 1 point, 'B' 0, 'tie' 0.5; the panel says 'A' above half the points, 'B' below, 'tie' at exactly half
(a split panel is a tie, never a coin flip). With fewer voting members than the panel's quorum the order is
unjudged for the panel (`panel_below_quorum`, naming who did not judge it), never decided by what is left.
Each order is combined on its own, so a panel of position-biased members is position-biased too, and the
report measures it like any judge's.

The panel's record is one more record per pair, member `COMBINED` (a name no member can take: member names have
no spaces), its requests 0 (the members' rows count theirs) and its replies none (its members' are beside it).
"""

from __future__ import annotations

from collections.abc import Sequence

from capjudge.judges.pairwise.record import OrderVerdict, PairRecord

COMBINED = "combined panel"
PANEL_BELOW_QUORUM = "panel_below_quorum"
_POINTS = {"A": 1.0, "tie": 0.5, "B": 0.0}


def combined_record(members: Sequence[PairRecord], quorum: int, panel_model: str) -> PairRecord:
    """The panel's record of one pair from its members' records of it (in panel order)."""
    first = members[0]
    return PairRecord(first.item_id, first.cluster, first.model_a, first.model_b, first.caption_a, first.caption_b,
                      first.judge, COMBINED, panel_model, first.judge_version, first.dimensions,
                      _combined_order([m.a_first for m in members], [m.member for m in members], first, quorum),
                      _combined_order([m.b_first for m in members], [m.member for m in members], first, quorum),
                      first.length)


def _combined_order(orders: Sequence[OrderVerdict], names: Sequence[str], record: PairRecord,
                    quorum: int) -> OrderVerdict:
    voting = [order for order in orders if order.ok]
    cache_hit = all(order.cache_hit for order in orders)
    if len(voting) < quorum:
        missing = ", ".join(f"{name}: {order.failure}" for name, order in zip(names, orders) if not order.ok)
        return OrderVerdict(None, PANEL_BELOW_QUORUM,
                            f"item {record.item_id}, {record.model_a} vs {record.model_b}: {len(voting)} of "
                            f"{len(orders)} panel members gave a verdict, fewer than the quorum of {quorum} "
                            f"(not judged: {missing})", None, cache_hit, 0)
    verdicts = {}
    for dimension in record.dimensions:
        points = sum(_POINTS[order.verdicts[dimension]] for order in voting) / len(voting)  # type: ignore[index]
        verdicts[dimension] = "A" if points > 0.5 else "B" if points < 0.5 else "tie"
    return OrderVerdict(verdicts, None, None, None, cache_hit, 0)

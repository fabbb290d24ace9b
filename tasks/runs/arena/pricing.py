"""`capjudge arena --dry-run`: what an arena will ask and cost, before a single request.

The pairs are planned exactly as the run plans them; each order's request is built by the run's own per-order
function (capjudge.tasks.runs.arena.judging.order_judge) against `capjudge estimate`'s counting client (frames
sampled and encoded, tokens counted, nothing sent) and priced as `capjudge estimate` prices a task
(`price_items`): the same `CostEstimate`, a panel's members on lines of their own, and each judge's reply cache
looked into (read-only) for what a run would replay instead of sending. The task must be built inside
`capjudge.tasks.harness.judged_task.counting_requests_only` (no judge or key needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capjudge.tasks.runs.judging.estimate import CostEstimate, price_items
from capjudge.tasks.runs.arena.judging import order_judge, orders_to_ask
from capjudge.tasks.runs.arena.pairs import PlannedPair
from capjudge.tasks.runs.arena.pairwise_judges import PairwiseJudge

if TYPE_CHECKING:
    from capjudge.tasks.harness.who_judges import WhoJudges


@dataclass(frozen=True)
class ArenaEstimate:
    models: int
    items: int
    pairs: int
    cost: CostEstimate
    distinct: int  # orders asked: 2 x pairs, less those showing the same captions as another (asked once)

    def lines(self) -> list[str]:
        same = (f" ({2 * self.pairs - self.distinct:,} orders show the same two captions as another and are asked "
                "once)" if self.distinct != 2 * self.pairs else "")
        return [f"arena: {self.models} models, {self.items} items, {self.pairs} pairs x 2 orders = "
                f"{self.distinct} requests per judge{same}{self.cost.cache_note()}", *self.cost.lines()]


def price_pairs(task: Any, judge: PairwiseJudge, pairs: Sequence[PlannedPair], models: int, *, output_tokens: float,
                prices: tuple[float, float] | None, who: WhoJudges) -> ArenaEstimate:
    """Every order the run will ask, built and counted (none sent), priced as `capjudge estimate` prices a task."""
    asked = orders_to_ask(pairs)
    cost = price_items(task, f"{task.config.task} (arena)", len(asked), asked, reask_rate=0.0,
                       output_tokens=output_tokens, prices=prices, who=who, unit="orders",
                       judge_one=order_judge(judge, pairs))
    return ArenaEstimate(models, len({pair.item_id for pair in pairs}), len(pairs), cost, len(asked))

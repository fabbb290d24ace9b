"""`capjudge sensitivity --dry-run`: what a sensitivity run will ask and cost, before a single request.

The judgments are planned exactly as the run plans them (the same perturbed texts); each one's request is
built by the task's own per-item function against `capjudge estimate`'s counting client (frames sampled and
encoded, tokens counted, nothing sent), and priced as `capjudge estimate` prices a task: the same
`CostEstimate`, its panel lines included, and each judge's reply cache looked into (read-only) for what a run
would replay instead of sending: what is left to send and pay for. The task must be built inside
`capjudge.tasks.harness.judged_task.counting_requests_only` (no judge or key needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capjudge.tasks.runs.judging.estimate import CostEstimate, price_items
from capjudge.tasks.runs.sensitivity.judging import PlannedItem, judgments_to_ask

if TYPE_CHECKING:
    from capjudge.tasks.harness.who_judges import WhoJudges


@dataclass(frozen=True)
class SensitivityEstimate:
    items: int
    perturbations: int
    judgments: int  # distinct (item, text): (1 + perturbations) x items unless a variant repeats a caption
    cost: CostEstimate

    def lines(self) -> list[str]:
        planned = self.items * (1 + self.perturbations)
        repeated = "" if planned == self.judgments else f" ({planned - self.judgments} repeat another caption of their item: judged once)"
        return [f"sensitivity: {self.items} items x (1 original + {self.perturbations} perturbations) = "
                f"{planned} judgments{repeated}; {self.judgments} to ask{self.cost.cache_note()}",
                *self.cost.lines()]


def price_planned(task: Any, planned: Sequence[PlannedItem], perturbations: int, *, output_tokens: float,
                  prices: tuple[float, float] | None, who: WhoJudges) -> SensitivityEstimate:
    """Every judgment the run will ask, built and counted (none sent) and priced as `capjudge estimate` prices a
    task (`price_items`, with `who`: the task's `who_judges()`, built where no key is needed)."""
    asked = judgments_to_ask(planned)
    cost = price_items(task, f"{task.config.task} (sensitivity)", len(asked), asked, reask_rate=0.0,
                       output_tokens=output_tokens, prices=prices, who=who, unit="judgments")
    return SensitivityEstimate(len(planned), perturbations, len(asked), cost)

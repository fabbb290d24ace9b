"""`capjudge sensitivity --dry-run`: what a sensitivity run will ask and cost, before a single request.

The judgments are planned exactly as the run plans them (the same perturbed texts); each one's request is
built by the task's own per-item function against `capjudge estimate`'s counting client (frames sampled and
encoded, tokens counted, nothing sent), and priced as `capjudge estimate` prices a task: the same
`CostEstimate`, its panel lines included. The task must be built inside
`capjudge.tasks.judged.judged_task.counting_requests_only` (no judge, key or cache needed).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.tasks.judging.estimate import CostEstimate, EstimateError, EstimatingClient, MemberCost
from capjudge.tasks.sensitivity.judging import PlannedItem, judgments_to_ask


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
                f"{planned} judgments{repeated}; {self.judgments} to ask (a rerun asks none: all from the cache)",
                *self.cost.lines()]


def price_planned(task: Any, planned: Sequence[PlannedItem], perturbations: int, *, output_tokens: float,
                  prices: tuple[float, float] | None) -> SensitivityEstimate:
    from capjudge.judges.client.config import configured_model
    from capjudge.judges.client.panel import configured_panel

    asked = judgments_to_ask(planned)
    client = EstimatingClient(configured_model())
    settings = task.settings()
    quiet = logging.getLogger("capjudge.tasks.judged.judged_task")  # every item "fails" as not sent: not news
    level, quiet.level = quiet.level, logging.ERROR
    try:
        for doc, text in asked:
            type(task).judge_item(doc, text, settings, client)
    finally:
        quiet.setLevel(level)
    if not client.estimates:
        raise EstimateError(f"task {task.config.task!r}: no judgment could be built into a request (missing videos?)")
    requests = len(client.estimates)
    text_tokens = sum(e.text for e in client.estimates)
    image_tokens = sum(e.images for e in client.estimates)
    output = requests * output_tokens

    def priced(at: tuple[float, float] | None) -> float | None:
        return None if at is None else ((text_tokens + image_tokens) * at[0] + output * at[1]) / 1e6

    panel = configured_panel(task.config.metadata or {}, configs=False)
    members = tuple(
        MemberCost(m.name, m.model, priced(m.prices or prices),
                   "the panel file" if m.prices else "--price-input/--price-output" if prices else "")
        for m in (panel.members if panel is not None else ()))
    cost = CostEstimate(f"{task.config.task} (sensitivity)", len(asked), requests, text_tokens, image_tokens, output,
                        priced(prices), members)
    return SensitivityEstimate(len(planned), perturbations, len(asked), cost)

"""Judging every item with a panel of judges (capjudge.judges.client.panel), and what the run logs of it.

Each member judges every item exactly as a run with that one judge would (same requests, same cache keys,
same per-item record), through its own client (capjudge.tasks.harness.members). Per item the task then logs
and aggregates:

- each member's metrics under `<metric>@<member>` (`gveval_mean@qwen`, `gveval_failed@qwen`, the member's
  record as `judged@qwen`), so every single-judge figure exists per member;
- the panel's under the task's usual names: the judge's own combination of the members' results (G-VEval:
  the mean of each score; AnyCap: the mean score, and `<main>_median`, the median of the members' grades),
  from the members that judged the item. With fewer than the panel's quorum the item is unjudged for the
  panel (`panel_below_quorum`), never scored from what is there. The panel's record (`judged`) says which
  members judged the item and why the others did not;
- the members' main scores side by side (`panel_*` metrics), from which the aggregations compute the
  agreement: Krippendorff's alpha, pairwise Kendall tau-b, each member's offset from the panel.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from capjudge.judges.client.panel import (
    ALPHA_METRIC,
    CI_HIGH,
    CI_LOW,
    KENDALL_METRIC,
    OFFSET_METRIC,
    Panel,
    member_metric,
    pair_name,
)
from capjudge.judges.descriptor import JudgeDescriptor
from capjudge.judges.types import ParseFailure
from capjudge.tasks.harness.aggregations import count_failed, count_failed_by, mean_of_judged, panel_statistic
from capjudge.tasks.harness.item_judgment import ItemJudgment
from capjudge.tasks.harness.members import Member
from capjudge.judges.types import Usage

PANEL_BELOW_QUORUM = "panel_below_quorum"
MEDIAN_SUFFIX = "_median"
# The per-item metrics that carry the members' main scores to the agreement aggregations.
CI_SUFFIXES = ("", CI_LOW, CI_HIGH)


def agreement_metrics(members: Sequence[str]) -> list[tuple[str, str, tuple[int, ...]]]:
    """(metric name, statistic, member positions) for every agreement figure of a panel with `members`:
    alpha across all, tau-b per pair, offset per member; each with its interval's ends."""
    figures: list[tuple[str, str, tuple[int, ...]]] = []
    for suffix in CI_SUFFIXES:
        figures.append((f"{ALPHA_METRIC}{suffix}", f"alpha{suffix}", ()))
    for i, first in enumerate(members):
        for j in range(i + 1, len(members)):
            for suffix in CI_SUFFIXES:
                figures.append((member_metric(f"{KENDALL_METRIC}{suffix}", pair_name(first, members[j])),
                                f"kendall_b{suffix}", (i, j)))
    for i, member in enumerate(members):
        for suffix in CI_SUFFIXES:
            figures.append((member_metric(f"{OFFSET_METRIC}{suffix}", member), f"offset{suffix}", (i,)))
    return figures


def panel_judgment(judgments: Mapping[str, ItemJudgment], panel: Panel, combine: Callable[[list[Any]], Any],
                   unjudged: Callable[[ParseFailure], Any]) -> ItemJudgment:
    """The panel's judgment of one item from its members' (in panel order)."""
    first = next(iter(judgments.values()))
    judged = [name for name, judgment in judgments.items() if judgment.ok]
    missing = {name: judgment.result.failure_kind for name, judgment in judgments.items() if not judgment.ok}
    kinds = set(missing.values())
    if len(judged) >= panel.quorum:
        result = combine([judgments[name].result for name in judged])
    elif not judged and len(kinds) == 1:  # the item itself could not be judged (no video, caption too long)
        result = first.result
    else:
        result = unjudged(ParseFailure(PANEL_BELOW_QUORUM, (
            f"item {first.item_id}: {len(judged)} of {len(judgments)} panel members judged it, fewer than the "
            f"quorum of {panel.quorum} (not judged: " + ", ".join(f"{n}: {k}" for n, k in missing.items()) + ")")))
    return ItemJudgment(
        first.item_id, first.caption, first.video, result, raw_reply=None,
        cache_hit=all(j.cache_hit for j in judgments.values()), requests=sum(j.requests for j in judgments.values()),
        usage=sum((j.usage for j in judgments.values()), Usage()),
        panel={"judged_by": judged, "not_judged": missing, "quorum": panel.quorum},
    )


def main_values(member_metrics: Mapping[str, Mapping[str, Any]], main: str) -> list[float | None]:
    """Each member's value of the main metric for one item (None: not judged), in panel order."""
    return [None if values.get(main) is None else float(values[main]) for values in member_metrics.values()]


def agreement_values(item_id: str, members: Sequence[str], mains: list[float | None],
                     panel_main: float | None) -> dict[str, Any]:
    """The per-item values of every agreement metric: the same payload under each name (one cached
    computation serves them all, as for the judge-human coefficients). The item id lets the aggregation put
    the items in one order whatever order lmms-eval gathers them in (under `accelerate launch` the ranks'
    items arrive interleaved), so a bootstrap interval is the same from 1 process or N."""
    payload = {"item": item_id, "members": list(mains), "panel": panel_main}
    return {name: payload for name, _, _ in agreement_metrics(members)}


def median_of(mains: list[float | None], panel_ok: bool) -> float | None:
    """The median of the members' grades for an item the panel judged (None otherwise)."""
    judged = [value for value in mains if value is not None]
    return statistics.median(judged) if panel_ok and judged else None


def panel_item_metrics(judgments: Mapping[str, ItemJudgment], panel: Panel, members: Sequence[Member],
                       identity: Mapping[str, Any], descriptor: JudgeDescriptor, combine: Callable[[list[Any]], Any],
                       unjudged: Callable[[str, ParseFailure], Any],
                       item_metrics: Callable[[ItemJudgment, Mapping[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """One item's metrics with a panel: the panel's (under the task's names, its record logged with `identity`),
    each member's (`<metric>@<member>`), the members' median grade (ordinal judges) and the agreement values.
    `unjudged(caption, failure)` and `item_metrics(judgment, identity)` are the judge's task's."""
    caption = next(iter(judgments.values())).caption
    combined = panel_judgment(judgments, panel, combine, lambda failure: unjudged(caption, failure))
    metrics = item_metrics(combined, identity)
    by_member = {}
    for member in members:
        member_metrics = item_metrics(judgments[member.name], member.identity)
        by_member[member.name] = member_metrics
        metrics.update({member_metric(name, member.name): value for name, value in member_metrics.items()})
    main = descriptor.main_metric
    if main is not None:
        mains = main_values(by_member, main)
        metrics.update(agreement_values(combined.item_id, panel.names, mains, metrics.get(main)))
        if descriptor.score_level == "ordinal":
            metrics[main + MEDIAN_SUFFIX] = median_of(mains, combined.ok)
    return metrics


def panel_aggregations(base: Mapping[str, Any], members: Sequence[str], descriptor: JudgeDescriptor) -> dict[str, Any]:
    """The YAML's aggregations (`base`) with a panel: also each member's (`<metric>@<member>`, failure counts
    that name the member), the panel's median grade (ordinal judges) and its agreement figures."""
    aggregations = dict(base)
    for member in members:
        for metric, aggregate in base.items():
            aggregations[member_metric(metric, member)] = (
                count_failed_by(f"panel member {member!r}") if aggregate is count_failed else aggregate)
    for metric, aggregate in base.items():
        if aggregate is count_failed:
            aggregations[metric] = count_failed_by("the panel")
    main = descriptor.main_metric
    if main is not None:
        if descriptor.score_level == "ordinal" and main in base:
            aggregations[main + MEDIAN_SUFFIX] = mean_of_judged
        for name, statistic, positions in agreement_metrics(members):
            aggregations[name] = panel_statistic(statistic, positions, descriptor.score_level)
    return aggregations


def panel_higher_is_better(base: Mapping[str, Any], members: Sequence[str], descriptor: JudgeDescriptor) -> dict[str, Any]:
    """The YAML's directions (`base`) with a panel: also each member's, the median grade's and the agreement
    figures' (an offset is neither better high nor low: it is a direction)."""
    better = dict(base)
    for member in members:
        better.update({member_metric(metric, member): value for metric, value in base.items()})
    main = descriptor.main_metric
    if main is not None:
        if main in base:
            better[main + MEDIAN_SUFFIX] = base[main]
        for name, statistic, _ in agreement_metrics(members):
            better[name] = not statistic.startswith("offset")  # an offset is neither: it is a direction
    return better

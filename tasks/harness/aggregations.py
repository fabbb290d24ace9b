"""Every aggregation function capjudge's task YAMLs name: lmms-eval hands each the list of per-item values of
one metric and writes what it returns into its results JSON. The task folders' `utils.py` import them from
here, e.g.::

    metric_list:
      - metric: gveval_kendall_b_accuracy
        aggregation: !function utils.kendall_b        # utils.py: from capjudge.tasks.harness.aggregations import kendall_b
        higher_is_better: true

Means (`mean_of_judged`, `mean_of_type_means`) are over judged items only: an unjudged item (None) is
excluded, never counted as 0, and with no judged item the mean is NaN, with a warning that names the task and
the metric (lmms-eval hands an aggregation its values only, so `named_means` binds each mean to its name: a
task's `aggregation()` returns the bound ones) and, for a metric only some items have (AnyCap's per-type
means), which items those are. Counts:
`count_failed` (unjudged items; it also decides whether the run may end as a success, see run_outcome) and
`count_judged` (the `judged` metric, whose per-item value is the logged record).

Judge-human correlation. A task's ``process_results`` returns, for the metric key, one ``{"judge": float |
None, "human": float | list[float]}`` per document (``human`` a list when several annotators rated it).
Every function returns a plain float on the -1..1 scale. Documents without a judge score are dropped;
several annotators are expanded (the G-VEval protocol, see correlation.py). An undefined coefficient is
NaN — never 0 — and its reason is logged. The interval functions use the item-level bootstrap (1000
resamples, seed 0); one computation serves the value and both bounds.
"""

from __future__ import annotations

import functools
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.judges.run_outcome import check_failure_rate
from capjudge.metrics.statistics.correlation import BootstrapSettings, Coefficient, CorrelationResult, correlate

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------------------------------
# Means and counts


@dataclass(frozen=True)
class MeanName:
    """Which mean this is, for its warning: the task, the metric, and the items the metric covers when only
    some have it (e.g. "poem items only"; '' when every judged item has it)."""

    task: str
    metric: str
    covers: str = ""

    def no_value(self, n_items: int) -> str:
        covers = f" ({self.covers})" if self.covers else ""
        return f"{self.task}: {self.metric} has no judged item among {n_items}{covers}: its mean is undefined (NaN)"


def mean_of_judged(items: Sequence[float | None], name: MeanName | None = None) -> float:
    """Mean over the items that have a value; unjudged items (None) are excluded, never counted as 0.
    With no judged item at all the mean is undefined: NaN, and a warning says why (naming the metric when
    `name` is given, as `named_means` does)."""
    values = [float(value) for value in items if value is not None]
    if not values:
        logger.warning("%s", name.no_value(len(items)) if name is not None
                       else f"no judged item among {len(items)}: the mean is undefined (NaN)")
        return math.nan
    return statistics.fmean(values)


def mean_of_type_means(items: Sequence[Mapping[str, Any] | None], name: MeanName | None = None) -> float:
    """AnyCapEval's published "Avg": the mean of each caption type's mean score, over judged items, types
    with no judged item left out. NaN (with a warning) when nothing was judged."""
    by_type: dict[str, list[float]] = {}
    for item in items:
        if item is not None:
            by_type.setdefault(str(item["caption_type"]), []).append(float(item["score"]))
    if not by_type:
        return mean_of_judged([None] * len(items), name)
    return statistics.fmean(sum(scores) / len(scores) for scores in by_type.values())


def named_means(task: str, aggregations: Mapping[str, Any], covers: Callable[[str], str] = lambda metric: "") -> dict[str, Any]:
    """`aggregations` with each mean bound to its metric's name (`covers(metric)`: the items it covers, when
    only some), so that a mean left undefined says which task and metric it is. Other aggregations as given."""
    named = dict(aggregations)
    for metric, aggregate in aggregations.items():
        if aggregate is mean_of_judged or aggregate is mean_of_type_means:
            named[metric] = _bound(aggregate, MeanName(task, metric, covers(metric)))
    return named


def _bound(aggregate: Callable[..., float], name: MeanName) -> Callable[[Sequence[Any]], float]:
    def mean(items: Sequence[Any]) -> float:
        return aggregate(items, name)

    mean.__name__ = f"{aggregate.__name__}[{name.metric}]"
    return mean


def count_failed(items: Sequence[int | bool]) -> int:
    """How many of a task's items are unjudged (each contributes 1 or 0); this also decides whether the run
    may end as a success: above CAPJUDGE_MAX_FAILURE_RATE the run still writes its results and samples,
    then exits non-zero."""
    failed = int(sum(int(value) for value in items))
    check_failure_rate(failed, len(items))
    return failed


def count_judged(records: Sequence[Mapping[str, Any]]) -> int:
    """Aggregation of `judged` (whose per-item value is the logged record): how many items have a valid
    judgment."""
    return sum(1 for record in records if record["judgment"]["failure"] is None)


# ----------------------------------------------------------------------------------------------------------
# Judge-human correlation

HARNESS_SETTINGS = BootstrapSettings(n_resamples=1000, seed=0, confidence=0.95, ci_method="bca")


def _frozen(items: Sequence[Mapping[str, Any]]) -> tuple[tuple[Any, Any], ...]:
    """The (judge, human) pairs, in item-id order when every pair names its item (the tasks' pairs do): the
    order lmms-eval gathers items in depends on the number of processes, and the bootstrap's seeded resamples
    depend on the order, so without it an interval from `accelerate launch` would differ from one process's."""
    keyed = []
    for position, item in enumerate(items):
        if not isinstance(item, Mapping) or "judge" not in item or "human" not in item:
            raise TypeError(f"aggregation item {position}: expected {{'judge': ..., 'human': ...}}, got {item!r}")
        keyed.append((item.get("item"), (_freeze(item["judge"]), _freeze(item["human"]))))
    if keyed and all(key is not None for key, _ in keyed):
        keyed.sort(key=lambda entry: str(entry[0]))
    return tuple(pair for _, pair in keyed)


def _freeze(value: Any) -> Any:
    """Lists become tuples (recursively) so a batch can key the cache; correlation.py accepts either."""
    return tuple(_freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


@functools.lru_cache(maxsize=8)
def _correlation(frozen: tuple[tuple[Any, Any], ...]) -> CorrelationResult:
    judge = [j for j, _ in frozen]
    human = [h for _, h in frozen]
    return correlate(judge, human, annotators="expand", settings=HARNESS_SETTINGS)


def _coefficient(items: Sequence[Mapping[str, Any]], name: str) -> Coefficient:
    coefficient = _correlation(_frozen(items))[name]
    if coefficient.value is None:
        logger.warning("%s is undefined over %d documents: %s", name, len(items), coefficient.undefined_reason)
    return coefficient


def _float(value: float | None) -> float:
    return math.nan if value is None else float(value)


def _value(items: Sequence[Mapping[str, Any]], name: str) -> float:
    return _float(_coefficient(items, name).value)


def _ci_low(items: Sequence[Mapping[str, Any]], name: str) -> float:
    return _float(_coefficient(items, name).ci_low)


def _ci_high(items: Sequence[Mapping[str, Any]], name: str) -> float:
    return _float(_coefficient(items, name).ci_high)


def kendall_b(items: Sequence[Mapping[str, Any]]) -> float:
    return _value(items, "kendall_b")


def kendall_b_ci_low(items: Sequence[Mapping[str, Any]]) -> float:
    return _ci_low(items, "kendall_b")


def kendall_b_ci_high(items: Sequence[Mapping[str, Any]]) -> float:
    return _ci_high(items, "kendall_b")


# Only Kendall's tau-b has wrappers: it is the coefficient the task YAMLs report (G-VEval's headline figure).
# tau-c, Pearson and Spearman, with their CIs, come from `capjudge correlate` over a run's samples.


# ----------------------------------------------------------------------------------------------------------
# Judge panels (capjudge.tasks.harness.panel_judging): member failure counts and the members' agreement


def count_failed_by(who: str) -> Callable[[Sequence[int | bool]], int]:
    """`count_failed` for the judgments of `who` (a panel member, the panel): the failure-rate rule applies
    to each, and the line that ends the run names whose judgments failed."""

    def count(items: Sequence[int | bool]) -> int:
        failed = int(sum(int(value) for value in items))
        check_failure_rate(failed, len(items), who)
        return failed

    count.__name__ = f"count_failed_by[{who}]"
    return count


def _frozen_panel(items: Sequence[Mapping[str, Any]]) -> tuple[tuple[tuple[float | None, ...], float | None], ...]:
    """The members' and the panel's scores per item, in item-id order: the order lmms-eval gathers items in
    depends on the number of processes, and a bootstrap's resamples (seeded) depend on the order."""
    keyed = []
    for position, item in enumerate(items):
        if not isinstance(item, Mapping) or not {"item", "members", "panel"} <= set(item):
            raise TypeError(f"aggregation item {position}: expected {{'item': id, 'members': [...], 'panel': ...}}, "
                            f"got {item!r}")
        keyed.append((str(item["item"]), tuple(item["members"]), item["panel"]))
    return tuple((members, panel) for _, members, panel in sorted(keyed, key=lambda entry: entry[0]))


@functools.lru_cache(maxsize=8)
def _panel_agreement(frozen: tuple[tuple[tuple[float | None, ...], float | None], ...], level: str) -> Any:
    import numpy as np

    from capjudge.metrics.statistics.panel_agreement import panel_agreement

    scores = np.array([[math.nan if v is None else v for v in members] for members, _ in frozen], dtype=np.float64)
    panel = np.array([math.nan if p is None else p for _, p in frozen], dtype=np.float64)
    names = tuple(str(i) for i in range(scores.shape[1]))
    return panel_agreement(scores, panel, names, level, HARNESS_SETTINGS)  # type: ignore[arg-type]


def panel_statistic(statistic: str, positions: tuple[int, ...], level: str) -> Callable[[Sequence[Mapping[str, Any]]], float]:
    """The aggregation of one agreement figure (`panel_judging.agreement_metrics`): `alpha`, `kendall_b` of
    members (i, j) or `offset` of member i, each or its interval's `_ci_low` / `_ci_high`. NaN (with a
    warning) when undefined: never 0."""
    name, _, end = statistic.partition("_ci_")
    part = {"": "value", "low": "ci_low", "high": "ci_high"}[end]

    def aggregate(items: Sequence[Mapping[str, Any]]) -> float:
        agreement = _panel_agreement(_frozen_panel(items), level)
        if name == "alpha":
            figure = agreement.alpha.value_ci
        elif name == "kendall_b":
            figure = agreement.pair(str(positions[0]), str(positions[1])).kendall_b.value_ci
        else:
            figure = agreement.offset(str(positions[0])).offset
        value = getattr(figure, part)
        if value is None and part == "value":
            logger.warning("panel %s %s is undefined over %d items", name, positions or "", len(items))
        return _float(value)

    aggregate.__name__ = f"panel_{statistic}"
    return aggregate

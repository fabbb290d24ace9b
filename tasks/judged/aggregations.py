"""Aggregation functions an lmms-eval task YAML can reference, so harness results carry judge-human correlation.

A task's ``process_results`` returns, for the metric key, one ``{"judge": float | None, "human": float |
list[float]}`` per document (``human`` a list when several annotators rated it); lmms-eval hands the list of
those to the aggregation named in the YAML, e.g.::

    metric_list:
      - metric: gveval_kendall_b
        aggregation: !function utils.kendall_b        # utils.py: from capjudge.tasks.judged.aggregations import *
        higher_is_better: true

Every function returns a plain float on the -1..1 scale (lmms-eval writes it into its results JSON).
Documents without a judge score are dropped; several annotators are expanded (the G-VEval protocol, see
correlation.py). An undefined coefficient is NaN — never 0 — and its reason is logged. The interval functions
use the item-level bootstrap (1000 resamples, seed 0); one computation serves the value and both bounds.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from capjudge.metrics.statistics.correlation import BootstrapSettings, Coefficient, CorrelationResult, correlate

logger = logging.getLogger(__name__)

HARNESS_SETTINGS = BootstrapSettings(n_resamples=1000, seed=0, confidence=0.95, ci_method="bca")


def _frozen(items: Sequence[Mapping[str, Any]]) -> tuple[tuple[Any, Any], ...]:
    frozen = []
    for position, item in enumerate(items):
        if not isinstance(item, Mapping) or "judge" not in item or "human" not in item:
            raise TypeError(f"aggregation item {position}: expected {{'judge': ..., 'human': ...}}, got {item!r}")
        frozen.append((_freeze(item["judge"]), _freeze(item["human"])))
    return tuple(frozen)


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
__all__ = ["kendall_b", "kendall_b_ci_low", "kendall_b_ci_high"]

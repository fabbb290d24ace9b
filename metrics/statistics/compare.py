"""Is one scorer closer to the humans than another? Differences of correlations on the same items.

Both scorers are correlated with the same human scores on the same items, so their correlations are
dependent; comparing two independent confidence intervals would be wrong. Two answers:

* a paired item-level bootstrap of the difference (one index matrix, both scorers evaluated on each resample);
* for Pearson, Williams' t-test for two dependent correlations sharing one variable.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capjudge.metrics.statistics.bootstrap import (
    COEFFICIENT_NAMES,
    WEIGHTED_STATISTICS,
    CoefficientName,
    Interval,
    bootstrap_distribution,
    bootstrap_intervals,
    draw_item_indices,
)
from capjudge.metrics.statistics.correlation import (
    DEFAULT_ANNOTATOR_MODE,
    DEFAULT_SETTINGS,
    AnnotatorMode,
    BootstrapSettings,
    PairSet,
    as_judge_vector,
    build_pairs,
    choose_interval,
    scipy_coefficient,
    undefined_reason,
)


@dataclass(frozen=True)
class WilliamsTest:
    """Williams' test of H0: corr(first, human) == corr(second, human), given corr(first, second)."""

    t: float
    df: int
    p_value: float  # two-sided
    r_between_scorers: float


@dataclass(frozen=True)
class CorrelationDifference:
    """``first_value - second_value`` for one coefficient, with a paired bootstrap interval."""

    coefficient: CoefficientName
    first: str
    second: str
    first_value: float | None
    second_value: float | None
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str | None
    n: int
    n_items: int
    undefined_reason: str | None = None
    intervals: tuple[Interval, ...] = ()
    williams: WilliamsTest | None = None


def williams_test(r12: float, r13: float, r23: float, n: int) -> WilliamsTest:
    """Williams' (1959) t for dependent correlations r12 and r13 that share variable 1, as given in
    J. H. Steiger (1980), "Tests for comparing elements of a correlation matrix", Psychological Bulletin 87(2),
    245-251, eq. (7); recommended for comparing evaluation metrics by Graham & Baldwin (2014).

        t = (r12 - r13) * sqrt( (n-1)(1+r23) / ( 2 (n-1)/(n-3) |R| + rbar^2 (1-r23)^3 ) ),  df = n - 3
        |R| = 1 - r12^2 - r13^2 - r23^2 + 2 r12 r13 r23,  rbar = (r12 + r13) / 2
    """
    from scipy import stats

    if n <= 3:
        raise ValueError(f"Williams' test needs more than 3 pairs, got {n}")
    determinant = 1 - r12**2 - r13**2 - r23**2 + 2 * r12 * r13 * r23
    mean_r = (r12 + r13) / 2
    denominator = 2 * (n - 1) / (n - 3) * determinant + mean_r**2 * (1 - r23) ** 3
    if denominator <= 0:  # |R| = 0 and r23 = 1: the two scorers are the same up to a linear map
        raise ValueError(f"Williams' test is undefined for perfectly correlated scorers (r23 = {r23:g})")
    t = (r12 - r13) * math.sqrt((n - 1) * (1 + r23) / denominator)
    df = n - 3
    return WilliamsTest(t=float(t), df=df, p_value=float(2 * stats.t.sf(abs(t), df)), r_between_scorers=float(r23))


def compare_scorers(
    first: Sequence[float | None] | np.ndarray,
    second: Sequence[float | None] | np.ndarray,
    human: Sequence[Any] | np.ndarray,
    *,
    names: tuple[str, str] = ("first", "second"),
    annotators: AnnotatorMode = DEFAULT_ANNOTATOR_MODE,
    human_index: int | None = None,
    coefficients: Iterable[CoefficientName] = COEFFICIENT_NAMES,
    settings: BootstrapSettings = DEFAULT_SETTINGS,
    item_ids: Sequence[str] | None = None,
) -> tuple[CorrelationDifference, ...]:
    """Differences of every coefficient on the items both scorers scored (and the humans rated)."""
    first_vector = as_judge_vector(first, item_ids)
    second_vector = as_judge_vector(second, item_ids)
    if first_vector.shape != second_vector.shape:
        raise ValueError(f"{first_vector.size} scores for {names[0]!r} but {second_vector.size} for {names[1]!r}")
    both = np.isfinite(first_vector) & np.isfinite(second_vector)
    # Masking each scorer with the other's gaps gives both the same pairs in the same order.
    pairs_a = build_pairs(np.where(both, first_vector, np.nan), human, annotators, human_index=human_index, item_ids=item_ids)
    pairs_b = build_pairs(np.where(both, second_vector, np.nan), human, annotators, human_index=human_index, item_ids=item_ids)
    reason = (
        undefined_reason(pairs_a.judge, pairs_a.human, names[0], "human")
        or undefined_reason(pairs_b.judge, pairs_b.human, names[1], "human")
    )
    indices = None
    if reason is None and settings.n_resamples > 0:
        indices = draw_item_indices(pairs_a.n_items, settings.n_resamples, settings.seed)
    return tuple(_difference(name, pairs_a, pairs_b, names, reason, indices, settings) for name in coefficients)


def _difference(
    name: CoefficientName,
    pairs_a: PairSet,
    pairs_b: PairSet,
    names: tuple[str, str],
    reason: str | None,
    indices: np.ndarray | None,
    settings: BootstrapSettings,
) -> CorrelationDifference:
    n, n_items = int(pairs_a.judge.size), pairs_a.n_items
    if reason is not None:
        return CorrelationDifference(name, names[0], names[1], None, None, None, None, None, None, n, n_items, reason)
    value_a, _ = scipy_coefficient(name, pairs_a.judge, pairs_a.human)
    value_b, _ = scipy_coefficient(name, pairs_b.judge, pairs_b.human)
    difference = value_a - value_b
    intervals: list[Interval] = []
    if indices is not None:
        statistic = WEIGHTED_STATISTICS[name]
        distribution = bootstrap_distribution(
            lambda w: statistic(pairs_a.judge, pairs_a.human, w) - statistic(pairs_b.judge, pairs_b.human, w),
            difference,
            pairs_a.item_of_pair,
            n_items,
            indices,
        )
        intervals = bootstrap_intervals(distribution, settings.confidence)
    williams = None
    if name == "pearson" and n_items > 3 and np.ptp(pairs_a.judge) > 0 and np.ptp(pairs_b.judge) > 0:
        r_between, _ = scipy_coefficient("pearson", pairs_a.judge, pairs_b.judge)
        try:
            # Degrees of freedom from items: with annotators expanded, one item gives several pairs that
            # are not independent observations, so counting pairs would make p too small.
            williams = williams_test(value_a, value_b, r_between, n_items)
        except ValueError:
            williams = None  # the scorers are linearly identical; the bootstrap interval still says so
    primary = choose_interval(intervals, settings.ci_method)
    return CorrelationDifference(
        coefficient=name,
        first=names[0],
        second=names[1],
        first_value=value_a,
        second_value=value_b,
        difference=difference,
        ci_low=primary.low if primary else None,
        ci_high=primary.high if primary else None,
        ci_method=primary.method if primary else None,
        n=n,
        n_items=n_items,
        intervals=tuple(intervals),
        williams=williams,
    )

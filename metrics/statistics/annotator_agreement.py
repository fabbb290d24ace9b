"""The annotator ceiling: how well humans agree with each other, reported next to judge-human figures.

A judge cannot be expected to agree with one annotator better than another annotator does, so the ceiling
gives the judge-human numbers their scale. Two views:

* Krippendorff's alpha (interval and ordinal), from the ``krippendorff`` package (scipy has none), with an
  item-level bootstrap interval;
* Kendall tau-b between every pair of annotators, computed exactly like the judge-human tau-b (same code,
  same bootstrap), so the two are directly comparable.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

import numpy as np

from capjudge.metrics.statistics.bootstrap import (
    BootstrapDistribution,
    Interval,
    bootstrap_intervals,
    draw_item_indices,
)
from capjudge.metrics.statistics.correlation import (
    DEFAULT_SETTINGS,
    BootstrapSettings,
    Coefficient,
    build_pairs,
    choose_interval,
    correlate_pairs,
)
from capjudge.metrics.statistics.small_samples import under_rule
from capjudge.metrics.statistics.value_ci import ValueCI

AlphaLevel = Literal["interval", "ordinal"]
ALPHA_LEVELS: tuple[AlphaLevel, ...] = ("interval", "ordinal")


@dataclass(frozen=True)
class AlphaResult:
    """Krippendorff's alpha at one level of measurement. ``value is None`` exactly when it is undefined."""

    level: AlphaLevel
    value: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str | None
    n_items: int  # items rated by at least two annotators (the only ones alpha can use)
    n_annotators: int
    undefined_reason: str | None = None
    intervals: tuple[Interval, ...] = ()

    @property
    def value_ci(self) -> ValueCI:
        """Alpha with its interval, under the small-sample rule (too few items or zero width: alpha alone)."""
        return under_rule(ValueCI(self.value, self.ci_low, self.ci_high), self.n_items, "item")[0]


# Who the two raters of a pair are: annotators by their column, judges (a panel's members) by name.
Rater = TypeVar("Rater", int, str)
# A pair's tau-b: computed here, a Coefficient (with its n, p and intervals); read back from a run's
# aggregates (capjudge.metrics.files.panel_figures), its value and interval alone.
PairTau = TypeVar("PairTau", Coefficient, ValueCI)


@dataclass(frozen=True)
class PairAgreement(Generic[Rater, PairTau]):
    """Kendall tau-b between rater ``first`` and rater ``second``: the one shape of a pair's agreement, for
    human annotators (the ceiling), a panel's judges, and a panel run's figures as its results hold them."""

    first: Rater
    second: Rater
    kendall_b: PairTau


@dataclass(frozen=True)
class AgreementResult:
    """The ceiling for one human target (e.g. one ACCR dimension)."""

    target: str
    alphas: tuple[AlphaResult, ...]
    annotator_pairs: tuple[PairAgreement[int, Coefficient], ...]

    def alpha(self, level: AlphaLevel) -> AlphaResult:
        return next(a for a in self.alphas if a.level == level)


def annotator_agreement(
    human: np.ndarray,
    target: str = "",
    settings: BootstrapSettings = DEFAULT_SETTINGS,
) -> AgreementResult:
    """Agreement among the columns of an (items, annotators) matrix; NaN marks a missing rating."""
    human = np.asarray(human, dtype=np.float64)
    if human.ndim != 2:
        raise ValueError(f"expected an (items, annotators) matrix, got shape {human.shape}")
    alphas = tuple(krippendorff_alpha(human, level, settings) for level in ALPHA_LEVELS)
    pairs = tuple(
        PairAgreement(first, second, _pairwise_kendall_b(human[:, first], human[:, second], settings))
        for first, second in itertools.combinations(range(human.shape[1]), 2)
    )
    return AgreementResult(target=target, alphas=alphas, annotator_pairs=pairs)


def _pairwise_kendall_b(first: np.ndarray, second: np.ndarray, settings: BootstrapSettings) -> Coefficient:
    pairs = build_pairs(first, second, "mean")
    result = correlate_pairs(pairs, coefficients=("kendall_b",), settings=settings, labels=("first annotator's", "second annotator's"))
    return result["kendall_b"]


def krippendorff_alpha(human: np.ndarray, level: AlphaLevel, settings: BootstrapSettings = DEFAULT_SETTINGS) -> AlphaResult:
    """Alpha over items rated by at least two annotators, with a bootstrap over those items."""
    rated_twice = np.isfinite(human).sum(axis=1) >= 2
    usable = human[rated_twice]
    n_items, n_annotators = int(usable.shape[0]), int(human.shape[1])
    value, reason = _alpha_or_reason(usable, level)
    if value is None:
        return AlphaResult(level, None, None, None, None, n_items, n_annotators, undefined_reason=reason)
    intervals: list[Interval] = []
    if settings.n_resamples > 0:
        distribution = _alpha_distribution(usable, level, value, settings)
        intervals = bootstrap_intervals(distribution, settings.confidence)
    primary = choose_interval(intervals, settings.ci_method)
    return AlphaResult(
        level=level,
        value=value,
        ci_low=primary.low if primary else None,
        ci_high=primary.high if primary else None,
        ci_method=primary.method if primary else None,
        n_items=n_items,
        n_annotators=n_annotators,
        intervals=tuple(intervals),
    )


def _alpha_or_reason(usable: np.ndarray, level: AlphaLevel) -> tuple[float | None, str | None]:
    import krippendorff

    if usable.shape[0] < 2:
        return None, f"only {usable.shape[0]} item(s) rated by two or more annotators; at least 2 are needed"
    values = usable[np.isfinite(usable)]
    if np.ptp(values) == 0:
        return None, f"every rating is the same ({values[0]:g}), so there is no disagreement to measure"
    # krippendorff wants (annotators, items) "reliability data" with NaN for a missing rating.
    alpha = float(krippendorff.alpha(reliability_data=usable.T, level_of_measurement=level))
    if not np.isfinite(alpha):
        return None, "krippendorff.alpha returned a non-finite value (no expected disagreement)"
    return alpha, None


def _alpha_distribution(usable: np.ndarray, level: AlphaLevel, estimate: float, settings: BootstrapSettings) -> BootstrapDistribution:
    """The package evaluates one data set per call, so resamples are looped over (B calls, n_items for BCa)."""
    indices = draw_item_indices(usable.shape[0], settings.n_resamples, settings.seed)
    resampled = np.array([_alpha_or_nan(usable[rows], level) for rows in indices])
    keep_all = np.ones(usable.shape[0], dtype=bool)
    jackknife = []
    for left_out in range(usable.shape[0]):
        keep_all[left_out] = False
        jackknife.append(_alpha_or_nan(usable[keep_all], level))
        keep_all[left_out] = True
    jackknife_values = np.array(jackknife)
    finite = np.isfinite(resampled)
    return BootstrapDistribution(
        estimate=estimate,
        resampled=resampled[finite],
        jackknife=jackknife_values[np.isfinite(jackknife_values)],
        n_undefined=int((~finite).sum()),
    )


def _alpha_or_nan(usable: np.ndarray, level: AlphaLevel) -> float:
    value, _ = _alpha_or_reason(usable, level)
    return np.nan if value is None else value

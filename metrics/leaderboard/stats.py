"""The leaderboard's statistics: a metric's mean with its item-bootstrap CI, the paired difference between
two models with its CI and a permutation test, and Holm's correction.

All seeded (see `LeaderboardSettings`):
- CI of a mean: percentile interval of the item bootstrap (items resampled with replacement,
  `capjudge.metrics.statistics.bootstrap.draw_item_indices`), vectorised over resamples. When the items' values are
  means of k > 1 judge replies and the replies are given, the two-level bootstrap of
  `capjudge.metrics.statistics.reply_bootstrap` instead (items, then replies within items), which also says which
  share of the CI's width is judge noise. With one reply per item nothing changes.
- Difference from the top model: on the items both models have a value for, the mean per-item difference,
  its paired item-bootstrap CI, and a paired permutation test (per-item sign flips, `scipy.stats.
  permutation_test`, exact when 2^n is within the permutation budget). p-values are Holm-corrected across
  the models compared with the top one in that column; "differs" means corrected p < alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from capjudge.metrics.statistics.bootstrap import (
    BootstrapDistribution,
    draw_item_indices,
    percentile_interval,
)
from capjudge.metrics.statistics.correlation import MAX_RESAMPLES, MAX_SEED, check_count, check_level
from capjudge.metrics.statistics.reply_bootstrap import ReplySet, two_level_draws, two_level_interval
from capjudge.metrics.statistics.small_samples import is_zero_width, too_few_units
from capjudge.metrics.statistics.value_ci import ValueCI


# The bound of `capjudge leaderboard --permutations` (capjudge.tasks.cli.bounds, which this layer cannot import;
# a test pins them equal): scipy draws every permutation at once, permutations x items x 8 bytes.
MAX_PERMUTATIONS = 10_000


@dataclass(frozen=True)
class LeaderboardSettings:
    n_resamples: int = 2000  # item-bootstrap resamples for CIs
    n_permutations: int = 9999  # permutation-test budget (exact enumeration when 2^n fits)
    seed: int = 0
    confidence: float = 0.95
    alpha: float = 0.05
    failure_warn_rate: float = 0.02
    # The length-controlled column (capjudge.metrics.leaderboard.length_column); --no-length-control turns it off.
    length_control: bool = True
    # The arena (capjudge.metrics.leaderboard.arena_column): Elo ratings from per-item battles; --no-arena turns it off.
    arena: bool = True

    def __post_init__(self) -> None:
        # The bounds of `capjudge leaderboard`'s flags, so the Python API refuses what the command refuses: an
        # unchecked value ended in numpy's errors (2.5 resamples, seed -1) or out of memory (10**8 resamples).
        check_count("n_resamples", self.n_resamples, 0, MAX_RESAMPLES)
        check_count("n_permutations", self.n_permutations, 1, MAX_PERMUTATIONS)
        check_count("seed", self.seed, 0, MAX_SEED)
        check_level("confidence", self.confidence)
        check_level("alpha", self.alpha)
        check_level("failure_warn_rate", self.failure_warn_rate, inclusive=True)
        for name in ("length_control", "arena"):
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):  # "no" is true in Python: the column would be shown
                raise ValueError(f"{name} must be True or False, got a {type(value).__name__}")


@dataclass(frozen=True)
class Estimate:
    """A metric's value for one model: mean over the items with a value, and its CI (None when the small-sample
    rule withholds it, from fewer than 5 items or of zero width; without resamples; or without a per-sample log);
    two-level when the items' values are means of k > 1 judge replies (then `noise_share` says how much of its
    width is judge noise)."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int  # items with a value
    source: Literal["samples", "harness", "missing"]
    replies: int = 1  # judge replies logged per item (k); the CI is two-level when k > 1 and noise is measurable
    # Share of the CI's width that is judge noise (see capjudge.metrics.statistics.reply_bootstrap.two_level_interval);
    # None when not measurable (one reply per item, or no reply values behind this metric).
    noise_share: float | None = None

    @property
    def value_ci(self) -> ValueCI:
        return ValueCI(self.value, self.ci_low, self.ci_high)


@dataclass(frozen=True)
class Comparison:
    """This model minus the reference (the column's top model) on their common items."""

    reference: str
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_adjusted: float | None  # Holm, across the models compared with the same reference
    n_common: int
    significant: bool | None  # None: not testable (no common items or no per-sample log)

    @property
    def value_ci(self) -> ValueCI:
        """The difference with its interval."""
        return ValueCI(self.difference, self.ci_low, self.ci_high)


def mean_estimate(values: np.ndarray, settings: LeaderboardSettings, replies: np.ndarray | None = None) -> Estimate:
    """Mean over the finite values, with the item-bootstrap percentile CI; with `replies` ((n_items, k), the
    judged replies each value is the mean of, NaN for none) and k > 1, the two-level CI and its noise share."""
    values = np.asarray(values, dtype=float)
    has_value = np.isfinite(values)
    finite = values[has_value]
    k = 1 if replies is None else int(replies.shape[1])
    if finite.size == 0:
        return Estimate(None, None, None, 0, "samples", replies=k)
    value = float(finite.mean())
    if k > 1:
        two_level = _two_level_interval(finite, [ReplySet(replies[has_value])], settings)
        if two_level is not None:
            low, high, share = two_level
            return Estimate(value, low, high, int(finite.size), "samples", replies=k, noise_share=share)
    interval = _bootstrap_mean_interval(finite, settings)
    if interval is None:
        return Estimate(value, None, None, int(finite.size), "samples", replies=k)
    return Estimate(value, interval[0], interval[1], int(finite.size), "samples", replies=k)


def _two_level_interval(
    values: np.ndarray, reply_sets: Sequence[ReplySet], settings: LeaderboardSettings
) -> tuple[float, float, float] | None:
    if too_few_units(values.size) or settings.n_resamples < 2:  # the small-sample rule
        return None
    draws = two_level_draws(values, reply_sets, settings.n_resamples, np.random.default_rng(settings.seed))
    if draws is None:
        return None
    low, high, share = two_level_interval(draws, settings.confidence)
    estimate = float(values.mean())
    low, high = min(low, estimate), max(high, estimate)
    return None if is_zero_width(low, high) else (low, high, share)


def _bootstrap_mean_interval(values: np.ndarray, settings: LeaderboardSettings) -> tuple[float, float] | None:
    # The small-sample rule (capjudge.metrics.statistics.small_samples): no interval from fewer than 5 items, nor
    # one of zero width (two models equal on every item gave '+0.0 [+0.0, +0.0]').
    if too_few_units(values.size) or settings.n_resamples < 2:
        return None
    rng = np.random.default_rng(settings.seed)
    # Bounded memory: resample in chunks of rows; one generator keeps the draws identical to one big matrix.
    rows_per_chunk = max(1, 4_000_000 // values.size)
    means = []
    for start in range(0, settings.n_resamples, rows_per_chunk):
        rows = min(rows_per_chunk, settings.n_resamples - start)
        means.append(values[draw_item_indices(values.size, rows, rng)].mean(axis=1))
    distribution = BootstrapDistribution(float(values.mean()), np.concatenate(means), np.empty(0), 0)
    interval = percentile_interval(distribution, settings.confidence)
    if interval is None:
        return None
    # Percentiles of a constant sample can differ from the mean by round-off; keep the estimate inside.
    estimate = distribution.estimate
    low, high = min(interval.low, estimate), max(interval.high, estimate)
    return None if is_zero_width(low, high) else (low, high)


def paired_comparison(
    values: np.ndarray,
    reference: np.ndarray,
    reference_name: str,
    settings: LeaderboardSettings,
    replies: np.ndarray | None = None,
    reference_replies: np.ndarray | None = None,
) -> Comparison:
    """`values - reference` on the items where both are finite (arrays aligned item by item). With either
    side's replies ((n_items, k), k > 1) the difference's CI is two-level; the permutation test flips the
    signs of the per-item differences of the k-reply means either way (exact under its null: the two models'
    replies to an item are exchangeable)."""
    from scipy.stats import permutation_test

    both = np.isfinite(values) & np.isfinite(reference)
    n_common = int(both.sum())
    if n_common == 0:
        return Comparison(reference_name, None, None, None, None, None, 0, None)
    differences = values[both] - reference[both]
    difference = float(differences.mean())
    reply_sets = [ReplySet(matrix[both], sign) for matrix, sign in ((replies, 1.0), (reference_replies, -1.0))
                  if matrix is not None and matrix.shape[1] > 1]
    two_level = _two_level_interval(differences, reply_sets, settings) if reply_sets else None
    interval = two_level[:2] if two_level is not None else _bootstrap_mean_interval(differences, settings)
    if n_common < 2 or not np.any(differences):
        p_value = 1.0 if n_common >= 2 else None
    else:
        result = permutation_test(
            (values[both], reference[both]),
            lambda x, y, axis: np.mean(x - y, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=settings.n_permutations,
            alternative="two-sided",
            rng=np.random.default_rng(settings.seed),
        )
        p_value = float(result.pvalue)
    return Comparison(
        reference=reference_name,
        difference=difference,
        ci_low=interval[0] if interval else None,
        ci_high=interval[1] if interval else None,
        p_value=p_value,
        p_adjusted=p_value,
        n_common=n_common,
        significant=None if p_value is None else p_value < settings.alpha,
    )


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (controls the family-wise error rate)."""
    m = len(p_values)
    order = np.argsort(p_values, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for step, index in enumerate(order):
        running = max(running, min(1.0, (m - step) * p_values[index]))
        adjusted[index] = running
    return adjusted.tolist()

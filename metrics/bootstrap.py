"""Item-level bootstrap for correlation coefficients, vectorised over resamples.

Why weights: an item can contribute several (judge, human) pairs (one per annotator, the G-VEval "expand"
protocol), and those pairs are not independent, so resampling must pick ITEMS and keep each item's pairs
together. Drawing the (B, n_items) index matrix once and turning it into a (B, n_pairs) matrix of
multiplicities lets every coefficient be computed for all B resamples at once, exactly as if each resample
had been materialised by repetition (the tests check this against scipy on ``np.repeat``-ed data).
The same index matrix serves every coefficient and both judges of a comparison, which makes differences
paired.

Intervals: percentile, and BCa (Efron 1987, "Better bootstrap confidence intervals", JASA 82:171-185) with
the acceleration from the leave-one-item-out jackknife — the same construction scipy.stats.bootstrap uses,
done here because scipy's resampler cannot share one index matrix across statistics and judges.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import ndtr, ndtri

CoefficientName = Literal["pearson", "spearman", "kendall_b", "kendall_c"]
COEFFICIENT_NAMES: tuple[CoefficientName, ...] = ("kendall_b", "kendall_c", "pearson", "spearman")

# Above this many pairs the (P, P) concordance matrix of the vectorised Kendall statistic gets too large
# (memory P*P*8 bytes, time B*P*P); beyond it each resample is expanded and handed to scipy instead.
_MAX_PAIRS_FOR_MATRIX_KENDALL = 2500
# Weight matrices are evaluated in blocks of about this many elements (32 MB of float64).
_WEIGHT_ELEMENTS_PER_BLOCK = 4_000_000


@dataclass(frozen=True)
class Interval:
    """A two-sided confidence interval and how it was obtained."""

    low: float
    high: float
    method: Literal["percentile", "bca", "fisher-z"]
    confidence: float


@dataclass(frozen=True)
class BootstrapDistribution:
    """Resampled values of one statistic, the jackknife values BCa needs, and how many resamples were undefined."""

    estimate: float
    resampled: np.ndarray  # (B,) finite values only
    jackknife: np.ndarray  # (n_items,) finite values only
    n_undefined: int


def draw_item_indices(n_items: int, n_resamples: int, seed: int | np.random.Generator) -> np.ndarray:
    """The (B, n_items) matrix of item indices drawn with replacement; drawn once per call, seeded."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return rng.integers(0, n_items, size=(n_resamples, n_items))


def resample_weights(item_of_pair: np.ndarray, n_items: int, indices: np.ndarray) -> np.ndarray:
    """Multiplicity of every pair in every resample: the number of times its item was drawn."""
    item_counts = np.zeros((indices.shape[0], n_items), dtype=np.int64)
    rows = np.repeat(np.arange(indices.shape[0]), indices.shape[1])
    np.add.at(item_counts, (rows, indices.ravel()), 1)
    return item_counts[:, item_of_pair].astype(np.float64)


def jackknife_weights(item_of_pair: np.ndarray, n_items: int, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Weights that leave out one item (all of its pairs) per row, for left-out items start..stop-1."""
    left_out = np.arange(start, n_items if stop is None else stop)
    return (left_out[:, None] != item_of_pair[None, :]).astype(np.float64)


# ---------------------------------------------------------------------------------------------------------
# Weighted coefficients: row b of `w` gives each pair's multiplicity; the result equals the coefficient of the
# sample in which pair p appears w[b, p] times (ties counted the way scipy counts them). NaN where undefined.
# ---------------------------------------------------------------------------------------------------------


def weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    total = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        # Row-wise means of each variable (x and y may themselves be per-row, as for ranks).
        mean_x = (w * x).sum(axis=1) / total
        mean_y = (w * y).sum(axis=1) / total
        dx = x - mean_x[:, None]
        dy = y - mean_y[:, None]
        covariance = (w * dx * dy).sum(axis=1)
        variance_x = (w * dx * dx).sum(axis=1)
        variance_y = (w * dy * dy).sum(axis=1)
        # Round-off can give a tiny non-zero variance for a constant resample: treat it as constant.
        scale_x = np.maximum(np.abs(x).max(), 1.0) ** 2 * total * 1e-12
        scale_y = np.maximum(np.abs(y).max(), 1.0) ** 2 * total * 1e-12
        defined = (variance_x > scale_x) & (variance_y > scale_y)
        r = np.where(defined, covariance / np.sqrt(variance_x * variance_y), np.nan)
    return np.clip(r, -1.0, 1.0)


def _tie_groups(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group index of each value among the sorted distinct values, and the one-hot (P, G) group matrix."""
    distinct, group = np.unique(values, return_inverse=True)
    onehot = np.zeros((values.size, distinct.size))
    onehot[np.arange(values.size), group] = 1.0
    return group, onehot


def weighted_midranks(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(B, P) mid-ranks each pair would get in each resample (ties share the average rank, as in rankdata)."""
    group, onehot = _tie_groups(values)
    group_weight = w @ onehot  # (B, G): how many copies of each distinct value the resample holds
    below = np.cumsum(group_weight, axis=1) - group_weight
    group_rank = below + (group_weight + 1.0) / 2.0
    return group_rank[:, group]


def weighted_spearman(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    return weighted_pearson(weighted_midranks(x, w), weighted_midranks(y, w), w)


def _tied_pair_count(values: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per resample: pairs tied on `values`, and the number of distinct values present."""
    _, onehot = _tie_groups(values)
    group_weight = w @ onehot
    tied = (group_weight * (group_weight - 1.0) / 2.0).sum(axis=1)
    distinct = (group_weight > 0).sum(axis=1)
    return tied, distinct


def weighted_kendall(x: np.ndarray, y: np.ndarray, w: np.ndarray, variant: Literal["b", "c"]) -> np.ndarray:
    """Kendall tau-b or tau-c with the same tie conventions as scipy.stats.kendalltau."""
    if x.size > _MAX_PAIRS_FOR_MATRIX_KENDALL:
        return _kendall_by_expansion(x, y, w, variant)
    # concordance[i, j] = +1 concordant, -1 discordant, 0 tied in x or y (including a pair with itself).
    concordance = np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])
    # Each unordered pair of copies counted once: S = sum_{i<j} w_i w_j c_ij = w C w / 2.
    s = ((w @ concordance) * w).sum(axis=1) / 2.0
    total = w.sum(axis=1)
    all_pairs = total * (total - 1.0) / 2.0
    tied_x, distinct_x = _tied_pair_count(x, w)
    tied_y, distinct_y = _tied_pair_count(y, w)
    with np.errstate(invalid="ignore", divide="ignore"):
        if variant == "b":
            denominator = np.sqrt((all_pairs - tied_x) * (all_pairs - tied_y))
            tau = np.where(denominator > 0, s / denominator, np.nan)
        else:
            classes = np.minimum(distinct_x, distinct_y)
            defined = (classes > 1) & (total > 1)
            tau = np.where(defined, 2.0 * s / (total**2 * (classes - 1.0) / classes), np.nan)
    return np.clip(tau, -1.0, 1.0)


def _kendall_by_expansion(x: np.ndarray, y: np.ndarray, w: np.ndarray, variant: Literal["b", "c"]) -> np.ndarray:
    from scipy.stats import kendalltau

    out = np.full(w.shape[0], np.nan)
    for row, weights in enumerate(w.astype(np.int64)):
        xs, ys = np.repeat(x, weights), np.repeat(y, weights)
        if np.ptp(xs) > 0 and np.ptp(ys) > 0:
            out[row] = kendalltau(xs, ys, variant=variant).statistic
    return out


WEIGHTED_STATISTICS: dict[CoefficientName, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "pearson": weighted_pearson,
    "spearman": weighted_spearman,
    "kendall_b": lambda x, y, w: weighted_kendall(x, y, w, "b"),
    "kendall_c": lambda x, y, w: weighted_kendall(x, y, w, "c"),
}


def bootstrap_distribution(
    statistic: Callable[[np.ndarray], np.ndarray],
    estimate: float,
    item_of_pair: np.ndarray,
    n_items: int,
    indices: np.ndarray,
) -> BootstrapDistribution:
    """Evaluate ``statistic(weights) -> (rows,)`` on every resample and every jackknife sample.

    Weight matrices are built a block of rows at a time so that large sets (many items, many pairs) never
    hold a full (n_items, n_pairs) jackknife matrix in memory.
    """
    rows_per_block = max(1, _WEIGHT_ELEMENTS_PER_BLOCK // max(1, item_of_pair.size))
    resampled = np.concatenate([
        statistic(resample_weights(item_of_pair, n_items, indices[start : start + rows_per_block]))
        for start in range(0, indices.shape[0], rows_per_block)
    ])
    jackknife = np.concatenate([
        statistic(jackknife_weights(item_of_pair, n_items, start, min(n_items, start + rows_per_block)))
        for start in range(0, n_items, rows_per_block)
    ])
    finite = np.isfinite(resampled)
    return BootstrapDistribution(
        estimate=estimate,
        resampled=resampled[finite],
        jackknife=jackknife[np.isfinite(jackknife)],
        n_undefined=int((~finite).sum()),
    )


def percentile_interval(distribution: BootstrapDistribution, confidence: float) -> Interval | None:
    if distribution.resampled.size < 2:
        return None
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(distribution.resampled, [100 * alpha, 100 * (1 - alpha)])
    return Interval(float(low), float(high), "percentile", confidence)


def bca_interval(distribution: BootstrapDistribution, confidence: float) -> Interval | None:
    """Bias-corrected and accelerated interval; None when the bias correction is infinite (all resamples on
    one side of the estimate) or too few resamples are defined."""
    values, estimate = distribution.resampled, distribution.estimate
    if values.size < 2 or distribution.jackknife.size < 3:
        return None
    # Proportion below the estimate, counting ties as half (as scipy.stats.bootstrap does).
    below = (np.count_nonzero(values < estimate) + np.count_nonzero(values <= estimate)) / (2.0 * values.size)
    if below <= 0.0 or below >= 1.0:
        return None
    bias = ndtri(below)
    deviations = distribution.jackknife.mean() - distribution.jackknife
    spread = (deviations**2).sum()
    acceleration = (deviations**3).sum() / (6.0 * spread**1.5) if spread > 0 else 0.0
    alpha = (1.0 - confidence) / 2.0
    levels = []
    for z_alpha in (ndtri(alpha), ndtri(1.0 - alpha)):
        shifted = bias + z_alpha
        levels.append(ndtr(bias + shifted / (1.0 - acceleration * shifted)))
    low, high = np.percentile(values, [100 * levels[0], 100 * levels[1]])
    return Interval(float(low), float(high), "bca", confidence)

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

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import ndtr, ndtri

CoefficientName = Literal["pearson", "spearman", "kendall_b", "kendall_c"]
COEFFICIENT_NAMES: tuple[CoefficientName, ...] = ("kendall_b", "kendall_c", "pearson", "spearman")

# Above this many pairs the (P, P) concordance matrix of the vectorised Kendall statistic gets too large
# (memory P*P*8 bytes, time B*P*P); beyond it S is counted per rating level (`_kendall_s_by_counting`) or,
# when both sides are continuous, each resample is expanded and handed to scipy.
_MAX_PAIRS_FOR_MATRIX_KENDALL = 2500
# Above it, when one side takes at most this many distinct values (ratings), S is counted per level instead.
_MAX_LEVELS_FOR_COUNTING_KENDALL = 64
# Weight matrices are evaluated in blocks of about this many elements (32 MB of float64).
_WEIGHT_ELEMENTS_PER_BLOCK = 4_000_000
# BCa's acceleration needs a jackknife. Leaving out one item at a time costs one statistic evaluation per
# item, which dominates everything above a few thousand items (an O(n log n) statistic evaluated n times).
# Above this many items the jackknife leaves out one of `_JACKKNIFE_GROUPS` random groups of items instead
# (a delete-a-group jackknife; the acceleration is a ratio of moments, so the group size cancels out).
_MAX_LEAVE_ONE_OUT_ITEMS = 2500
_JACKKNIFE_GROUPS = 200


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
    jackknife: np.ndarray  # (n_items,) or (groups,) finite values only; see jackknife_units
    n_undefined: int


def draw_item_indices(n_items: int, n_resamples: int, seed: int | np.random.Generator) -> np.ndarray:
    """The (B, n_items) matrix of item indices drawn with replacement; drawn once per call, seeded."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return rng.integers(0, n_items, size=(n_resamples, n_items))


def item_counts(n_items: int, indices: np.ndarray) -> np.ndarray:
    """(rows, n_items): how many times each item was drawn in each resample."""
    n_rows = indices.shape[0]
    flat = (np.arange(n_rows)[:, None] * n_items + indices).ravel()
    return np.bincount(flat, minlength=n_rows * n_items).reshape(n_rows, n_items).astype(np.float64)


def resample_weights(item_of_pair: np.ndarray, n_items: int, indices: np.ndarray) -> np.ndarray:
    """Multiplicity of every pair in every resample: the number of times its item was drawn."""
    return item_counts(n_items, indices)[:, item_of_pair]


def jackknife_units(item_of_pair: np.ndarray, n_items: int) -> tuple[np.ndarray, int]:
    """What the jackknife leaves out, per pair: its item, or (above `_MAX_LEAVE_ONE_OUT_ITEMS` items) its
    item's group, with groups drawn by a fixed-seed permutation so results are reproducible."""
    if n_items <= _MAX_LEAVE_ONE_OUT_ITEMS:
        return item_of_pair, n_items
    group_of_item = np.empty(n_items, dtype=np.int64)
    group_of_item[np.random.default_rng(0).permutation(n_items)] = np.arange(n_items) % _JACKKNIFE_GROUPS
    return group_of_item[item_of_pair], _JACKKNIFE_GROUPS


def jackknife_item_weights(group_of_item: np.ndarray, start: int, stop: int) -> np.ndarray:
    """(stop - start, n_items) weights, row r leaving out every item of jackknife unit start + r."""
    return (np.arange(start, stop)[:, None] != group_of_item[None, :]).astype(np.float64)


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


def _group_weights(values: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group index of each value among the sorted distinct values, and the (B, G) weight each resample puts on
    each distinct value (summed without a dense (P, G) one-hot matrix, which continuous scores would make P x P)."""
    distinct, group = np.unique(values, return_inverse=True)
    order = np.argsort(group, kind="stable")
    starts = np.searchsorted(group[order], np.arange(distinct.size))
    return group, np.add.reduceat(w[:, order], starts, axis=1)


def weighted_midranks(values: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(B, P) mid-ranks each pair would get in each resample (ties share the average rank, as in rankdata)."""
    group, group_weight = _group_weights(values, w)  # (B, G): copies of each distinct value in the resample
    below = np.cumsum(group_weight, axis=1) - group_weight
    group_rank = below + (group_weight + 1.0) / 2.0
    return group_rank[:, group]


def weighted_spearman(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    return weighted_pearson(weighted_midranks(x, w), weighted_midranks(y, w), w)


def _tied_pair_count(values: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per resample: pairs tied on `values`, and the number of distinct values present."""
    _, group_weight = _group_weights(values, w)
    tied = (group_weight * (group_weight - 1.0) / 2.0).sum(axis=1)
    distinct = (group_weight > 0).sum(axis=1)
    return tied, distinct


def weighted_kendall(x: np.ndarray, y: np.ndarray, w: np.ndarray, variant: Literal["b", "c"]) -> np.ndarray:
    """Kendall tau-b or tau-c with the same tie conventions as scipy.stats.kendalltau."""
    if x.size <= _MAX_PAIRS_FOR_MATRIX_KENDALL:
        # concordance[i, j] = +1 concordant, -1 discordant, 0 tied in x or y (including a pair with itself).
        concordance = np.sign(x[:, None] - x[None, :]) * np.sign(y[:, None] - y[None, :])
        # Each unordered pair of copies counted once: S = sum_{i<j} w_i w_j c_ij = w C w / 2.
        s = ((w @ concordance) * w).sum(axis=1) / 2.0
    elif min(np.unique(x).size, np.unique(y).size) <= _MAX_LEVELS_FOR_COUNTING_KENDALL:
        s = _kendall_s_by_counting(x, y, w) if np.unique(y).size <= np.unique(x).size else _kendall_s_by_counting(y, x, w)
    else:
        return _kendall_by_expansion(x, y, w, variant)
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


def _kendall_s_by_counting(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Kendall's S (concordant minus discordant weighted pairs) for every row of `w`, when `y` takes few
    distinct values (human ratings do): O(rows * pairs * levels) instead of the O(pairs^2) matrix.

    Walking the pairs in x order, an item's concordant partners are the items with smaller x (strictly: an
    x-tie counts for nothing) and smaller y, its discordant ones those with smaller x and larger y. Cumulative
    weights per y level, read at the start of the item's x-tie group, give both counts for all rows at once.
    """
    levels, y_level = np.unique(y, return_inverse=True)
    n_pairs = x.size
    order = np.argsort(x, kind="stable")
    xs, ys_level = x[order], y_level[order]
    new_group = np.r_[True, xs[1:] != xs[:-1]]
    group_start = np.maximum.accumulate(np.where(new_group, np.arange(n_pairs), 0))
    has_earlier_group = group_start > 0
    previous = np.maximum(group_start - 1, 0)
    ws = w[:, order]
    s = np.zeros(w.shape[0])
    for level in range(levels.size):
        # Weight strictly before each item's x-tie group at this y level...
        running = np.cumsum(ws * (ys_level == level), axis=1)
        before = np.where(has_earlier_group, running[:, previous], 0.0)
        # ...is concordant with items above this level and discordant with items below it.
        s += (ws * before) @ np.sign(ys_level - level).astype(np.float64)
    return s


def _kendall_by_expansion(x: np.ndarray, y: np.ndarray, w: np.ndarray, variant: Literal["b", "c"]) -> np.ndarray:
    from scipy.stats import kendalltau

    out = np.full(w.shape[0], np.nan)
    for row, weights in enumerate(w.astype(np.int64)):
        xs, ys = np.repeat(x, weights), np.repeat(y, weights)
        if np.ptp(xs) > 0 and np.ptp(ys) > 0:
            out[row] = kendalltau(xs, ys, variant=variant).statistic
    return out


class ClusteredKendall:
    """Kendall tau-b / tau-c of (x, y) under any weighting of ITEMS (clusters of pairs), without expanding
    the weights to pairs: for clustered bootstraps over many pairs (VATEX-EVAL: 3,000 clips, up to 54,000
    rated pairs), where the per-pair counting of `weighted_kendall` dominates the run time.

    Kendall's S over a resample in which item a is drawn W_a times is a quadratic form in W:
    S = sum_{a,b} W_a W_b M_ab, with M_ab = sum over pairs i in a, j in b with x_j < x_i of sign(y_i - y_j)
    (an x-tie counts for nothing; copies of one pair tie on x). M is built once, walking the pairs in x order
    with running per-item counts of each y level, so it needs y (or x: S is symmetric) to take few values;
    then every resample costs one row of a matrix product. Ties and class counts come from per-item counts
    of each distinct value. The results equal `weighted_kendall` on the expanded weights exactly (integers
    in float64).
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, item_of_pair: np.ndarray, n_items: int) -> None:
        if np.unique(x).size < np.unique(y).size:
            x, y = y, x  # S is symmetric in x and y: walk the side with more distinct values
        self._s_matrix = _kendall_s_matrix(x, y, item_of_pair, n_items)
        self._x_counts = _value_counts_by_item(x, item_of_pair, n_items)
        self._y_counts = _value_counts_by_item(y, item_of_pair, n_items)
        self._pairs_per_item = np.bincount(item_of_pair, minlength=n_items).astype(np.float64)
        self._evaluated: dict[bytes, tuple[np.ndarray, ...]] = {}

    @classmethod
    def supports(cls, x: np.ndarray, y: np.ndarray) -> bool:
        return min(np.unique(x).size, np.unique(y).size) <= _MAX_LEVELS_FOR_COUNTING_KENDALL

    def __call__(self, item_weights: np.ndarray, variant: Literal["b", "c"]) -> np.ndarray:
        s, total, tied_x, tied_y, classes = self._parts(item_weights)
        all_pairs = total * (total - 1.0) / 2.0
        with np.errstate(invalid="ignore", divide="ignore"):
            if variant == "b":
                denominator = np.sqrt((all_pairs - tied_x) * (all_pairs - tied_y))
                tau = np.where(denominator > 0, s / denominator, np.nan)
            else:
                defined = (classes > 1) & (total > 1)
                tau = np.where(defined, 2.0 * s / (total**2 * (classes - 1.0) / classes), np.nan)
        return np.clip(tau, -1.0, 1.0)

    def _parts(self, item_weights: np.ndarray) -> tuple[np.ndarray, ...]:
        """S, pair count, tied pairs on each side and classes per row; kept per weight block, because tau-b
        and tau-c of one protocol are evaluated on the same blocks and the matrix product is the cost."""
        key = hashlib.blake2b(np.ascontiguousarray(item_weights).tobytes(), digest_size=16).digest()
        if key not in self._evaluated:
            s = ((item_weights @ self._s_matrix) * item_weights).sum(axis=1)
            total = item_weights @ self._pairs_per_item
            x_totals = np.asarray(self._x_counts.T @ item_weights.T).T  # (rows, distinct x): copies of each value
            y_totals = np.asarray(self._y_counts.T @ item_weights.T).T
            self._evaluated[key] = (
                s, total,
                (x_totals * (x_totals - 1.0) / 2.0).sum(axis=1),
                (y_totals * (y_totals - 1.0) / 2.0).sum(axis=1),
                np.minimum((x_totals > 0).sum(axis=1), (y_totals > 0).sum(axis=1)),
            )
        return self._evaluated[key]


def _kendall_s_matrix(x: np.ndarray, y: np.ndarray, item_of_pair: np.ndarray, n_items: int) -> np.ndarray:
    """M of `ClusteredKendall`: one pass over the x-tie groups in x order, with the running count of pairs
    strictly below in x per (y level, item). (A blocked, vectorised pass measured 6-10x slower: its scatter
    of (block, items) products costs more than this loop's one small product per group.)

    A tie group spanning several items (x with few values: caption length in words, a mean of three ratings)
    adds to each of its items' rows once, from that item's count of pairs per y level: the rows of one item's
    pairs would be summed anyway, and scattering one row per pair (np.add.at over the group) cost VATEX-EVAL
    1-4 s per matrix against 0.1 s (every sum is of integers, so the order of adding changes nothing)."""
    levels, y_level = np.unique(y, return_inverse=True)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    boundaries = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1], True])
    signs = np.sign(levels[:, None] - levels[None, :])  # signs[l, m] = sign(level l - level m)
    below = np.zeros((levels.size, n_items))  # pairs with smaller x, per y level and item
    s_matrix = np.zeros((n_items, n_items))
    for start, stop in zip(boundaries[:-1].tolist(), boundaries[1:].tolist()):
        group = order[start:stop]
        group_levels, group_items = y_level[group], item_of_pair[group]
        first_item = group_items[0]
        if stop - start == 1 or (group_items == first_item).all():  # one item (pooled rows share theirs): no scatter
            s_matrix[first_item] += signs[group_levels].sum(axis=0) @ below
            below[:, first_item] += np.bincount(group_levels, minlength=levels.size)
        else:
            items, item_index = np.unique(group_items, return_inverse=True)
            per_item_levels = np.zeros((items.size, levels.size))
            np.add.at(per_item_levels, (item_index, group_levels), 1.0)
            s_matrix[items] += (per_item_levels @ signs) @ below  # `items` are distinct: no add.at needed
            np.add.at(below, (group_levels, group_items), 1.0)
    return s_matrix


def _value_counts_by_item(values: np.ndarray, item_of_pair: np.ndarray, n_items: int):
    """Sparse (n_items, distinct values): how many of each item's pairs take each value."""
    from scipy.sparse import csr_matrix

    _, value_index = np.unique(values, return_inverse=True)
    ones = np.ones(values.size)
    return csr_matrix((ones, (item_of_pair, value_index)), shape=(n_items, int(value_index.max()) + 1))


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
    """Evaluate ``statistic(pair_weights) -> (rows,)`` on every resample and every jackknife sample."""
    return item_bootstrap_distribution(
        lambda item_weights: statistic(item_weights[:, item_of_pair]), estimate, n_items, indices, row_size=item_of_pair.size
    )


def item_bootstrap_distribution(
    statistic: Callable[[np.ndarray], np.ndarray],
    estimate: float,
    n_items: int,
    indices: np.ndarray,
    row_size: int | None = None,
) -> BootstrapDistribution:
    """Evaluate ``statistic(item_weights) -> (rows,)`` on every resample and every jackknife sample, where row
    b of ``item_weights`` holds each item's multiplicity (statistics that work per item, such as
    `ClusteredKendall`, never expand to pairs).

    Weight matrices are built a block of rows at a time (`row_size`: the widest matrix the statistic builds
    per row, default n_items), so large sets never hold a full jackknife matrix in memory.
    """
    rows_per_block = max(1, _WEIGHT_ELEMENTS_PER_BLOCK // max(1, row_size or n_items))
    resampled = np.concatenate([
        statistic(item_counts(n_items, indices[start : start + rows_per_block]))
        for start in range(0, indices.shape[0], rows_per_block)
    ])
    group_of_item, n_units = jackknife_units(np.arange(n_items), n_items)
    jackknife = np.concatenate([
        statistic(jackknife_item_weights(group_of_item, start, min(n_units, start + rows_per_block)))
        for start in range(0, n_units, rows_per_block)
    ])
    finite = np.isfinite(resampled)
    return BootstrapDistribution(
        estimate=estimate,
        resampled=resampled[finite],
        jackknife=jackknife[np.isfinite(jackknife)],
        n_undefined=int((~finite).sum()),
    )


def bootstrap_intervals(distribution: BootstrapDistribution, confidence: float) -> list[Interval]:
    """The percentile and BCa intervals of `distribution`, each where it can be formed (see `choose_interval`)."""
    return [i for i in (percentile_interval(distribution, confidence), bca_interval(distribution, confidence)) if i]


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

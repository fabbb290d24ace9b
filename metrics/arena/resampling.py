"""The item-clustered bootstrap every arena statistic shares: items (or clips) drawn with replacement, as
per-item draw counts, a block of resamples at a time; and percentile intervals from the draws.

An item's battles (or a clip's pairs) stay together: they share the item's video and references, so they
are not independent. A statistic that is a sum over battles is then a product of the (resamples, items)
count matrix with per-item sums, exactly as if each resample had been materialised by repetition. The draws
are those of `capjudge.metrics.statistics.bootstrap.draw_item_indices` from one seeded generator, so the same
seed gives the same resamples whatever the block size.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from capjudge.metrics.statistics.bootstrap import draw_item_indices, item_counts
from capjudge.metrics.statistics.value_ci import ValueCI

# Count matrices are built about this many elements at a time (16 MB of float64).
_ELEMENTS_PER_BLOCK = 2_000_000


def count_blocks(n_items: int, n_resamples: int, seed: int) -> Iterator[np.ndarray]:
    """(rows, n_items) draw counts, block after block, n_resamples rows in all."""
    rng = np.random.default_rng(seed)
    rows_per_block = max(1, _ELEMENTS_PER_BLOCK // max(1, n_items))
    for start in range(0, n_resamples, rows_per_block):
        rows = min(rows_per_block, n_resamples - start)
        yield item_counts(n_items, draw_item_indices(n_items, rows, rng))


def resampled_sums(per_item: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    """(n_resamples, k): the column sums of `per_item` (n_items, k) in every resample."""
    blocks = [counts @ per_item for counts in count_blocks(per_item.shape[0], n_resamples, seed)]
    return np.concatenate(blocks) if blocks else np.empty((0, per_item.shape[1]))


def percentile_ci(value: float | None, draws: np.ndarray, confidence: float) -> ValueCI:
    """`value` with the percentile interval of its finite draws (none from fewer than two)."""
    finite = draws[np.isfinite(draws)]
    if value is None or not np.isfinite(value) or finite.size < 2:
        return ValueCI(value)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(finite, [100 * alpha, 100 * (1 - alpha)])
    return ValueCI(float(value), float(low), float(high))


def ratio_ci(numerator: np.ndarray, denominator: np.ndarray, n_resamples: int, seed: int,
             confidence: float) -> ValueCI:
    """sum(numerator) / sum(denominator) over items, with its item-clustered percentile interval; a resample
    that draws no denominator is undefined and left out."""
    total = float(denominator.sum())
    value = float(numerator.sum()) / total if total > 0 else None
    if value is None or n_resamples < 2:
        return ValueCI(value)
    sums = resampled_sums(np.column_stack([numerator, denominator]).astype(np.float64), n_resamples, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        draws = np.where(sums[:, 1] > 0, sums[:, 0] / sums[:, 1], np.nan)
    return percentile_ci(value, draws, confidence)

"""Length-controlled model scores: each model's mean score re-predicted at a reference caption length, from
one regression fitted across all models' items, with an item (cluster) bootstrap.

The model: y_im = a_m + g_i + beta * z_im + e_im, y the score model m's caption of item i got, z its
standardised log word count (`capjudge.metrics.statistics.length_bias.standardised_log_length`: score units
per SD of log words), a_m a model effect, g_i an item effect (items differ in difficulty and in how long a
good caption is). Model effects matter: without them a better model that also writes longer captions would
make length look rewarded. beta is the OLS slope with both effects, by Frisch-Waugh-Lovell: the item
effects are absorbed by demeaning within item (exact also when some model lacks some items), then the
item-demeaned scores are regressed on the item-demeaned model dummies (one left out) and z, a regression
with as many coefficients as models.

The length-controlled score of a model is its mean at the reference length:
LC_m = mean_i(y_im) - beta * mean_i(z_im - zref_i), zref_i the item's reference length on the captions'
scale. A model is not pulled toward another model's length, only toward each item's reference.

Interval: items are resampled with replacement (`Clusters.resample_counts`) and beta and every mean are
re-estimated in each resample. Within-item demeaning does not depend on how often an item is drawn, so a
resample's normal equations are the per-item cross products weighted by the item's draw count: one matrix
product per resample, exactly as if the resample had been materialised (a duplicated item is a new item
with its own effect). A resample whose design is singular (no length variation within items beyond the
models) or that draws none of a model's items is undefined, counted, and left out of the percentiles.

When beta counts as identified (`IDENTIFICATION_RULE`, `LengthControlled.not_identified`): a regression with
an effect per item and per model fits a few items exactly whatever the truth is, and its bootstrap then
describes only the resamples that happen to identify beta (two items: about half of them, each giving the
same beta, so a zero-width interval around a number far outside the score's range). So beta, and every
length-controlled score, is a result only with at least `MIN_ITEMS_PER_MODEL` items for every model and at
most `MAX_UNDEFINED_SHARE` of the resamples undefined; otherwise readers show no number and claim no order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from capjudge.metrics.statistics.bootstrap import (
    BootstrapDistribution,
    percentile_interval,
)
from capjudge.metrics.statistics.clusters import Clusters
from capjudge.metrics.statistics.length_bias import (
    LengthBiasError,
    standardised_log_length,
)
from capjudge.metrics.statistics.value_ci import ValueCI

MIN_ITEMS_PER_MODEL = 5
MAX_UNDEFINED_SHARE = 0.10
IDENTIFICATION_RULE = (
    f"beta counts as identified when every model has at least {MIN_ITEMS_PER_MODEL} judged items with logged "
    f"captions and at most {MAX_UNDEFINED_SHARE:.0%} of the bootstrap resamples leave it undefined"
)


@dataclass(frozen=True)
class LengthControlled:
    """beta (score units per SD of log words) and each model's length-controlled score, with intervals."""

    beta: ValueCI
    scores: dict[str, ValueCI]  # model -> LC_m
    raw: dict[str, float]  # model -> mean score over the same items (the leaderboard's mean)
    n_items: int
    n_observations: int
    n_undefined: int  # resamples whose beta was undefined
    items_per_model: dict[str, int]  # model -> its items in the fit
    n_resamples: int  # bootstrap resamples drawn (0: none, no interval)

    @property
    def not_identified(self) -> str | None:
        """Why these data do not identify beta under `IDENTIFICATION_RULE` (None: they do)."""
        few = {name: n for name, n in self.items_per_model.items() if n < MIN_ITEMS_PER_MODEL}
        if few:
            counts = ", ".join(f"{name}: {n}" for name, n in few.items())
            return (f"too few items: fewer than {MIN_ITEMS_PER_MODEL} judged items with captions for "
                    f"{len(few)} of {len(self.items_per_model)} models ({counts})")
        if self.n_resamples and self.n_undefined > MAX_UNDEFINED_SHARE * self.n_resamples:
            return (f"{self.n_undefined} of {self.n_resamples} bootstrap resamples "
                    f"({self.n_undefined / self.n_resamples:.0%}, more than {MAX_UNDEFINED_SHARE:.0%}) leave "
                    f"beta undefined: its interval would describe only the resamples that happen to identify it")
        return None


def length_controlled(
    scores: Sequence[float] | np.ndarray,
    word_counts: Sequence[float] | np.ndarray,
    reference_words: Sequence[float] | np.ndarray,
    models: Sequence[str],
    items: Sequence[str],
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> LengthControlled:
    """One observation per (model, item) that model has a score for: its score, its caption's word count,
    the item's reference word count. Raises LengthBiasError when beta is not defined."""
    clusters = Clusters.of(items)
    y = clusters.aligned(scores, "scores")
    words = clusters.aligned(word_counts, "word counts")
    z = standardised_log_length(words)
    z_reference = standardised_log_length(clusters.aligned(reference_words, "reference word counts"), scale_from=words)
    names, model_of = np.unique(np.asarray([str(m) for m in models]), return_inverse=True)
    if model_of.size != y.size:
        raise LengthBiasError(f"{model_of.size} model labels for {y.size} scores")
    pairs = model_of * clusters.n + clusters.of_candidate
    if np.unique(pairs).size != pairs.size:
        raise LengthBiasError("a model has two scores for one item")
    # Regressors: dummies of every model but the first, and z; everything demeaned within item.
    design = np.column_stack([(model_of == m).astype(np.float64) for m in range(1, names.size)] + [z])
    design = design - _item_means(clusters, design)
    target = y - clusters.means(y)
    per_item_xx = _per_item_sums(clusters, design[:, :, None] * design[:, None, :])  # (items, p, p)
    per_item_xy = _per_item_sums(clusters, design * target[:, None])  # (items, p)
    full_xx = per_item_xx.sum(axis=0)
    if np.linalg.matrix_rank(full_xx) < full_xx.shape[0]:
        raise LengthBiasError("no caption length varies within items beyond the models' own lengths: "
                              "the length coefficient is undefined")
    beta = float(np.linalg.solve(full_xx, per_item_xy.sum(axis=0))[-1])
    offset = z - z_reference
    estimates = {str(names[m]): _lc(y[model_of == m], offset[model_of == m], beta) for m in range(names.size)}
    raw = {str(names[m]): float(y[model_of == m].mean()) for m in range(names.size)}
    per_model = {str(names[m]): int((model_of == m).sum()) for m in range(names.size)}
    if n_resamples < 2:
        return LengthControlled(ValueCI(beta), {n: ValueCI(v) for n, v in estimates.items()}, raw,
                                clusters.n, int(y.size), 0, per_model, 0)
    counts = clusters.resample_counts(n_resamples, seed)  # (B, items)
    beta_draws = _beta_draws(counts, per_item_xx, per_item_xy)
    scores_ci = {}
    for m in range(names.size):
        mine = model_of == m
        drawn = counts[:, clusters.of_candidate[mine]]  # (B, this model's items): each one's draw count
        n_drawn = drawn.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = (drawn @ y[mine]) / n_drawn - beta_draws * (drawn @ offset[mine]) / n_drawn
        name = str(names[m])
        scores_ci[name] = _with_interval(estimates[name], np.where(n_drawn > 0, draws, np.nan), confidence)
    return LengthControlled(_with_interval(beta, beta_draws, confidence), scores_ci, raw, clusters.n, int(y.size),
                            int((~np.isfinite(beta_draws)).sum()), per_model, int(n_resamples))


def _lc(y: np.ndarray, offset: np.ndarray, beta: float) -> float:
    return float(y.mean() - beta * offset.mean())


def _item_means(clusters: Clusters, matrix: np.ndarray) -> np.ndarray:
    return np.column_stack([clusters.means(matrix[:, j]) for j in range(matrix.shape[1])])


def _per_item_sums(clusters: Clusters, values: np.ndarray) -> np.ndarray:
    flat = values.reshape(values.shape[0], -1)
    sums = np.column_stack([clusters.sums(flat[:, j]) for j in range(flat.shape[1])])
    return sums.reshape((clusters.n, *values.shape[1:]))


def _beta_draws(counts: np.ndarray, per_item_xx: np.ndarray, per_item_xy: np.ndarray) -> np.ndarray:
    """beta in every resample (NaN where the resample's design is singular)."""
    xx = np.einsum("bi,ipq->bpq", counts, per_item_xx)
    xy = counts @ per_item_xy
    full = np.linalg.matrix_rank(xx) == xx.shape[1]
    draws = np.full(counts.shape[0], np.nan)
    if full.any():
        draws[full] = np.linalg.solve(xx[full], xy[full][:, :, None])[:, -1, 0]
    return draws


def _with_interval(estimate: float, draws: np.ndarray, confidence: float) -> ValueCI:
    finite = np.isfinite(draws)
    interval = percentile_interval(BootstrapDistribution(estimate, draws[finite], np.empty(0), int((~finite).sum())),
                                   confidence)
    return ValueCI(estimate) if interval is None else ValueCI(estimate, interval.low, interval.high)

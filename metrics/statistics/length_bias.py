"""Length bias: how much a score rises with caption length when the clip is held fixed, and how much more
than the humans' scores rise on the same candidates.

The model, per scorer: score_ij = a_j + beta * z_ij + e_ij, with j the clip (a fixed effect each: clips differ
in difficulty and in how long a good caption is) and z the standardised log word count (log because one word
more matters less in a long caption; standardised over all candidates so beta is "score units per SD of
log length"; the standardisation is fixed from the full sample, not redone per resample). With clip fixed
effects the OLS slope is the slope of the within-clip demeaned data: beta = sum(z~ y~) / sum(z~^2).

A length coefficient alone is not bias: longer captions can be better. The EXCESS coefficient, the judge's
beta minus the humans' beta on the same candidates, is the part the humans do not share. Its interval is a
paired clustered bootstrap: both slopes are computed on the same resampled clips in every resample. Each
clip's contribution to both sums is fixed by its demeaned values, so a resample's slope is
counts @ Sxy / counts @ Sxx (clips drawn twice count twice, as materialising them would).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from capjudge.metrics.statistics.bootstrap import BootstrapDistribution, Interval, percentile_interval
from capjudge.metrics.statistics.clusters import ClusterError, Clusters
from capjudge.metrics.statistics.small_samples import under_rule
from capjudge.metrics.statistics.value_ci import ValueCI

DEFAULT_RESAMPLES = 1000


class LengthBiasError(ClusterError):
    """Inputs on which no length coefficient is defined."""


@dataclass(frozen=True)
class LengthSlope:
    """One scorer's within-clip slope on the standardised log word count, with its clustered percentile CI."""

    slope: float
    interval: Interval | None  # None without resamples (or too few defined)
    n_candidates: int
    n_clusters: int
    n_undefined: int  # resamples whose clips had no length variation within any clip

    @property
    def value_ci(self) -> ValueCI:
        """The slope with its interval, under the small-sample rule (few clips, zero width: the slope alone)."""
        return _shown(self.slope, self.interval, self.n_clusters)[0]

    @property
    def no_interval(self) -> str:
        """Why `value_ci` has no interval under the small-sample rule ("" when it has one, or had none)."""
        return _shown(self.slope, self.interval, self.n_clusters)[1]


@dataclass(frozen=True)
class ExcessLengthBias:
    """The judge's and the humans' slopes, and their difference (judge minus humans) with a paired CI."""

    judge: LengthSlope
    human: LengthSlope
    excess: float
    interval: Interval | None
    n_undefined: int

    @property
    def value_ci(self) -> ValueCI:
        """The excess with its paired interval, under the small-sample rule."""
        return _shown(self.excess, self.interval, self.judge.n_clusters)[0]

    @property
    def no_interval(self) -> str:
        return _shown(self.excess, self.interval, self.judge.n_clusters)[1]


def _shown(value: float, interval: Interval | None, n_clips: int) -> tuple[ValueCI, str]:
    """`value` with `interval` as the small-sample rule lets it be shown (clips are the resampled units), and why
    not where it does not."""
    figure = ValueCI(value, *((interval.low, interval.high) if interval is not None else (None, None)))
    return under_rule(figure, n_clips, "clip")


def standardised_log_length(
    word_counts: Sequence[float] | np.ndarray, scale_from: Sequence[float] | np.ndarray | None = None
) -> np.ndarray:
    """z-scores of log word counts (counts below 1 count as 1: an empty caption has no log). With
    `scale_from`, standardised by those counts' mean and SD instead (e.g. a reference length put on the
    captions' scale)."""
    logs = _log_words(word_counts)
    basis = logs if scale_from is None else _log_words(scale_from)
    spread = basis.std()
    if spread == 0:
        raise LengthBiasError("every caption has the same word count: no length coefficient is defined")
    return (logs - basis.mean()) / spread


def _log_words(word_counts: Sequence[float] | np.ndarray) -> np.ndarray:
    return np.log(np.maximum(np.asarray(word_counts, dtype=np.float64), 1.0))


@dataclass(frozen=True)
class _WithinClipDesign:
    clusters: Clusters
    length: np.ndarray  # demeaned z
    counts: np.ndarray | None  # (B, clusters), shared by every scorer of a comparison

    def sums(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        demeaned = scores - self.clusters.means(scores)
        return self.clusters.sums(self.length * demeaned), self.clusters.sums(self.length * self.length)

    def slope_and_draws(self, scores: np.ndarray) -> tuple[float, np.ndarray | None]:
        sxy, sxx = self.sums(scores)
        slope = float(sxy.sum() / sxx.sum())
        if self.counts is None:
            return slope, None
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = (self.counts @ sxy) / (self.counts @ sxx)
        # A resample with no within-clip length variation at all has 0/0: undefined, not zero.
        return slope, np.where(self.counts @ sxx > 0, draws, np.nan)


def _design(word_counts, cluster_ids, n_resamples: int, seed: int) -> _WithinClipDesign:
    clusters = Clusters.of(cluster_ids)
    z = standardised_log_length(clusters.aligned(word_counts, "word counts"))
    demeaned = z - clusters.means(z)
    if not np.any(np.abs(demeaned) > 1e-12):
        raise LengthBiasError("no clip has candidates of different lengths: the within-clip slope is undefined")
    counts = clusters.resample_counts(n_resamples, seed) if n_resamples > 0 else None
    return _WithinClipDesign(clusters, demeaned, counts)


def _interval(estimate: float, draws: np.ndarray | None, confidence: float) -> tuple[Interval | None, int]:
    if draws is None:
        return None, 0
    finite = np.isfinite(draws)
    distribution = BootstrapDistribution(estimate, draws[finite], np.empty(0), int((~finite).sum()))
    return percentile_interval(distribution, confidence), distribution.n_undefined


def _slope(design: _WithinClipDesign, scores: np.ndarray, confidence: float) -> tuple[LengthSlope, np.ndarray | None]:
    slope, draws = design.slope_and_draws(scores)
    interval, undefined = _interval(slope, draws, confidence)
    clusters = design.clusters
    return LengthSlope(slope, interval, clusters.n_candidates, clusters.n, undefined), draws


def length_slope(
    scores: Sequence[float] | np.ndarray,
    word_counts: Sequence[float] | np.ndarray,
    cluster_ids: Sequence[str] | np.ndarray,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> LengthSlope:
    """One scorer's length coefficient with clip fixed effects and a clip-bootstrap percentile CI."""
    design = _design(word_counts, cluster_ids, n_resamples, seed)
    return _slope(design, design.clusters.aligned(scores, "scores"), confidence)[0]


def excess_length_bias(
    judge_scores: Sequence[float] | np.ndarray,
    human_scores: Sequence[float] | np.ndarray,
    word_counts: Sequence[float] | np.ndarray,
    cluster_ids: Sequence[str] | np.ndarray,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> ExcessLengthBias:
    """Judge slope minus human slope on the same candidates (human_scores: one value per candidate, e.g. the
    raters' mean), each with its own CI, and the difference with a paired CI (the same clip resamples)."""
    design = _design(word_counts, cluster_ids, n_resamples, seed)
    judge, judge_draws = _slope(design, design.clusters.aligned(judge_scores, "judge scores"), confidence)
    human, human_draws = _slope(design, design.clusters.aligned(human_scores, "human scores"), confidence)
    excess = judge.slope - human.slope
    difference = None if judge_draws is None else judge_draws - human_draws
    interval, undefined = _interval(excess, difference, confidence)
    return ExcessLengthBias(judge, human, excess, interval, undefined)

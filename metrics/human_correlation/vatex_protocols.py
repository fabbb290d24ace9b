"""VATEX-EVAL's correlation protocols, each named for the paper whose numbers it reproduces, with clustered CIs.

Inputs are arrays: one scorer value per candidate, a (candidates, 3) matrix of the annotators' ratings, and the
clip id of every candidate (see :mod:`capjudge.judges.datasets.vatex_eval`).

* ``emscore_per_annotator`` — EMScore's protocol (ShiYaya/emscore ``compute_correlation_uniquehuman``): Kendall
  tau-b and Spearman rho between the scorer and EACH annotator's ratings separately, then the mean of the three.
  The numbers in EMScore's table and most later VATEX-EVAL tables.
* ``gveval_pooled`` — G-VEval's protocol (ztangaj/gveval ``evaluate_msvd``): one row per (candidate, annotator)
  rating, the scorer value repeated; Kendall tau-b and tau-c.
* ``gveval_mean_rating`` — the same two coefficients against the mean of the three ratings, one row per candidate.
* ``human_ceiling`` — each annotator against the mean of the other two (tau-b, tau-c, Spearman), then the mean of
  the three: roughly how well a scorer could agree with one rater if it were as good as the other raters.

Point estimates are scipy.stats (``kendalltau(variant=...)``, ``spearmanr``) on the rows above, via
:func:`capjudge.metrics.statistics.correlation.scipy_coefficient`. Intervals come from a bootstrap CLUSTERED BY CLIP: clips
are drawn with replacement and every candidate of a drawn clip comes along (with all its ratings). The 6
candidates of a clip share its references and its raters' calibration, so resampling candidates independently
understates the width. One seeded index matrix serves every statistic of every protocol (paired intervals); the
resampled statistics are the vectorised weighted coefficients of :mod:`capjudge.metrics.statistics.bootstrap`, which equal
scipy's on the materialised resample.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from capjudge.metrics.statistics.bootstrap import (
    WEIGHTED_STATISTICS,
    ClusteredKendall,
    CoefficientName,
    bootstrap_intervals,
    draw_item_indices,
    item_bootstrap_distribution,
)
from capjudge.metrics.statistics.correlation import (
    DEFAULT_SETTINGS,
    BootstrapSettings,
    choose_interval,
    scipy_coefficient,
)
from capjudge.judges.datasets.vatex_eval import ANNOTATORS
from capjudge.metrics.statistics.small_samples import withheld_reason
from capjudge.metrics.statistics.value_ci import ValueCI

EMSCORE = "emscore_per_annotator"
GVEVAL_POOLED = "gveval_pooled"
GVEVAL_MEAN_RATING = "gveval_mean_rating"
HUMAN_CEILING = "human_ceiling"

_DESCRIPTIONS = {
    EMSCORE: "EMScore's protocol: scorer vs each annotator separately (one row per candidate), mean of the 3 annotators",
    GVEVAL_POOLED: "G-VEval's pooled protocol: one row per (candidate, annotator) rating, scorer value repeated",
    GVEVAL_MEAN_RATING: "scorer vs the mean of the 3 annotators' ratings, one row per candidate",
    HUMAN_CEILING: "human ceiling: each annotator vs the mean of the other two (one row per candidate), mean of the 3",
}


class VatexProtocolError(ValueError):
    """Inputs the protocols cannot use; the message names the candidate (index and clip) or the shape."""


@dataclass(frozen=True)
class ProtocolStatistic:
    """One coefficient of one protocol, with its clustered interval."""

    name: CoefficientName  # "kendall_b", "kendall_c" or "spearman"
    value: float
    ci_low: float | None
    ci_high: float | None
    interval: str | None  # "bca" or "percentile" (BCa falls back to percentile when it cannot be formed)
    per_annotator: tuple[float, ...] = ()  # the 3 values averaged into `value` (per-annotator protocols only)
    n_resamples: int = 0  # resamples where the coefficient was defined
    n_undefined_resamples: int = 0
    no_interval: str = ""  # why the interval is not shown (the small-sample rule); "" when it is, or none was drawn

    @property
    def value_ci(self) -> ValueCI:
        return ValueCI(self.value, self.ci_low, self.ci_high)


@dataclass(frozen=True)
class ProtocolResult:
    """Every coefficient of one protocol; `protocol` and `ci_method` say exactly how they were computed."""

    protocol: str
    description: str
    ci_method: str
    n_candidates: int
    n_clips: int
    n_rows: int  # rows correlated per coefficient (per annotator for the per-annotator protocols)
    statistics: tuple[ProtocolStatistic, ...]

    def __getitem__(self, name: str) -> ProtocolStatistic:
        for statistic in self.statistics:
            if statistic.name == name:
                return statistic
        raise KeyError(f"{self.protocol} has no {name!r}; it has {[s.name for s in self.statistics]}")


@dataclass(frozen=True)
class ClusteredDesign:
    """Checked inputs plus the seeded (resamples, clips) matrix of drawn clips shared by every statistic."""

    scorer: np.ndarray | None
    ratings: np.ndarray
    clip_of_candidate: np.ndarray  # compact clip index of each candidate
    n_clips: int
    indices: np.ndarray | None  # None when no resamples are asked for
    settings: BootstrapSettings

    @property
    def ci_method(self) -> str:
        s = self.settings
        if self.indices is None:
            return "none (0 bootstrap resamples)"
        return (
            f"bootstrap clustered by clip: {s.n_resamples} resamples of the {self.n_clips} clips drawn with "
            f"replacement, every candidate (and rating) of a drawn clip kept; seed {s.seed}; "
            f"{s.confidence:g} {s.ci_method} interval (percentile where BCa cannot be formed)"
        )


# ---------------------------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------------------------


def clustered_design(
    scorer: Sequence[float] | np.ndarray | None,
    ratings: Sequence[Sequence[float]] | np.ndarray,
    clip_ids: Sequence[str] | np.ndarray,
    settings: BootstrapSettings = DEFAULT_SETTINGS,
) -> ClusteredDesign:
    """Check the arrays (finite, aligned, 3 ratings per candidate) and draw the clip resamples once."""
    matrix = np.asarray(ratings, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] != ANNOTATORS or matrix.shape[0] < 2:
        raise VatexProtocolError(f"ratings must be a (candidates, {ANNOTATORS}) array of at least 2 candidates, got shape {matrix.shape}")
    clips = np.asarray(clip_ids, dtype=object)
    if clips.shape != (matrix.shape[0],):
        raise VatexProtocolError(f"{clips.size} clip ids for {matrix.shape[0]} candidates")
    _require_finite("rating", matrix, clips)
    vector = None
    if scorer is not None:
        vector = np.asarray(scorer, dtype=np.float64)
        if vector.shape != (matrix.shape[0],):
            raise VatexProtocolError(f"scorer must hold one value per candidate ({matrix.shape[0]}), got shape {vector.shape}")
        _require_finite("scorer value", vector, clips)
        if np.ptp(vector) == 0:
            raise VatexProtocolError(f"scorer values are all {vector[0]:g}: no correlation is defined")
    _, clip_of_candidate = np.unique(clips.astype(str), return_inverse=True)
    n_clips = int(clip_of_candidate.max()) + 1
    indices = draw_item_indices(n_clips, settings.n_resamples, settings.seed) if settings.n_resamples > 0 else None
    return ClusteredDesign(vector, matrix, clip_of_candidate, n_clips, indices, settings)


def _require_finite(what: str, values: np.ndarray, clips: np.ndarray) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        row = int(np.flatnonzero(bad.reshape(len(values), -1).any(axis=1))[0])
        raise VatexProtocolError(f"candidate {row} (clip {clips[row]!r}): {what} is not a finite number: {values[row]!r}")


# ---------------------------------------------------------------------------------------------------------
# The protocols
# ---------------------------------------------------------------------------------------------------------

# A correlation target: x and y over some rows, each row tagged with its candidate (so clip weights reach it).
Target = tuple[np.ndarray, np.ndarray, np.ndarray | slice]
EVERY_CANDIDATE = slice(None)  # a target with one row per candidate, in order: weights used as they are (a view)


def emscore_protocol(design: ClusteredDesign) -> ProtocolResult:
    scorer = _scorer(design)
    targets = [(scorer, design.ratings[:, a], EVERY_CANDIDATE) for a in range(ANNOTATORS)]
    return _protocol(EMSCORE, design, targets, ("kendall_b", "spearman"))


def gveval_pooled_protocol(design: ClusteredDesign) -> ProtocolResult:
    scorer = _scorer(design)
    # Candidate-major rows, as G-VEval builds them: the scorer value repeated once per annotator.
    row_candidate = np.repeat(np.arange(scorer.size), ANNOTATORS)
    return _protocol(GVEVAL_POOLED, design, [(scorer[row_candidate], design.ratings.ravel(), row_candidate)], ("kendall_b", "kendall_c"))


def gveval_mean_rating_protocol(design: ClusteredDesign) -> ProtocolResult:
    scorer = _scorer(design)
    return _protocol(GVEVAL_MEAN_RATING, design, [(scorer, design.ratings.mean(axis=1), EVERY_CANDIDATE)], ("kendall_b", "kendall_c"))


def human_ceiling(design: ClusteredDesign) -> ProtocolResult:
    targets = [
        (np.delete(design.ratings, a, axis=1).mean(axis=1), design.ratings[:, a], EVERY_CANDIDATE) for a in range(ANNOTATORS)
    ]
    return _protocol(HUMAN_CEILING, design, targets, ("kendall_b", "kendall_c", "spearman"))


def all_protocols(design: ClusteredDesign) -> tuple[ProtocolResult, ...]:
    """Both published protocols, the mean-rating variant and the human ceiling, on one set of clip resamples."""
    return (emscore_protocol(design), gveval_pooled_protocol(design), gveval_mean_rating_protocol(design), human_ceiling(design))


def _scorer(design: ClusteredDesign) -> np.ndarray:
    if design.scorer is None:
        raise VatexProtocolError("this protocol correlates a scorer with the ratings; the design has no scorer values")
    return design.scorer


def _protocol(protocol: str, design: ClusteredDesign, targets: list[Target], names: Sequence[CoefficientName]) -> ProtocolResult:
    """Each named coefficient as the mean over `targets` (one target: that target's coefficient)."""
    resampled = _ResampledTargets(design, targets) if design.indices is not None else None
    return ProtocolResult(
        protocol=protocol,
        description=_DESCRIPTIONS[protocol],
        ci_method=design.ci_method,
        n_candidates=int(design.ratings.shape[0]),
        n_clips=design.n_clips,
        n_rows=int(targets[0][0].size),
        statistics=tuple(_statistic(name, design, targets, resampled) for name in names),
    )


def _statistic(name: CoefficientName, design: ClusteredDesign, targets: list[Target],
               resampled: _ResampledTargets | None) -> ProtocolStatistic:
    per_target = []
    for x, y, _ in targets:
        value, _p = scipy_coefficient(name, x, y)
        if not np.isfinite(value):
            raise VatexProtocolError(f"{name} is undefined on these rows (a constant side)")
        per_target.append(value)
    value = float(np.mean(per_target))
    per_annotator = tuple(per_target) if len(targets) > 1 else ()
    if resampled is None or design.indices is None:
        return ProtocolStatistic(name, value, None, None, None, per_annotator)
    distribution = item_bootstrap_distribution(
        resampled.statistic(name), value, design.n_clips, design.indices, row_size=resampled.widest_target
    )
    confidence = design.settings.confidence
    intervals = bootstrap_intervals(distribution, confidence)
    primary = choose_interval(intervals, design.settings.ci_method)
    # The small-sample rule: from too few clips (2 clips gave a human ceiling of "59.0 [59.0, 80.4]"), or of
    # zero width, the value alone and the reason.
    reason = withheld_reason(ValueCI(value, *((primary.low, primary.high) if primary else (None, None))),
                             design.n_clips, "clip")
    shown = primary if primary and not reason else None
    return ProtocolStatistic(
        name=name,
        value=value,
        ci_low=shown.low if shown else None,
        ci_high=shown.high if shown else None,
        interval=shown.method if shown else None,
        per_annotator=per_annotator,
        n_resamples=int(distribution.resampled.size),
        n_undefined_resamples=distribution.n_undefined,
        no_interval=reason,
    )


class _ResampledTargets:
    """A protocol's targets as functions of the clip weights (rows, clips) of a block of resamples.

    Kendall coefficients are evaluated per clip (`ClusteredKendall`, built once per target and shared by
    tau-b and tau-c); the others expand the clip weights to each target's rows (a candidate's clip weight
    copied to each of its rows).
    """

    def __init__(self, design: ClusteredDesign, targets: list[Target]) -> None:
        self._targets = [(x, y, design.clip_of_candidate[rows]) for x, y, rows in targets]
        self._kendall: list[ClusteredKendall] | None = None
        self._n_clips = design.n_clips
        self.widest_target = max(x.size for x, _, _ in self._targets)

    def statistic(self, name: CoefficientName) -> Callable[[np.ndarray], np.ndarray]:
        if name in ("kendall_b", "kendall_c") and all(ClusteredKendall.supports(x, y) for x, y, _ in self._targets):
            if self._kendall is None:
                self._kendall = [ClusteredKendall(x, y, clip_of_row, self._n_clips) for x, y, clip_of_row in self._targets]
            variant = "b" if name == "kendall_b" else "c"
            kendalls = self._kendall
            return lambda clip_weights: np.mean([kendall(clip_weights, variant) for kendall in kendalls], axis=0)
        weighted = WEIGHTED_STATISTICS[name]
        targets = self._targets
        return lambda clip_weights: np.mean([weighted(x, y, clip_weights[:, clip_of_row]) for x, y, clip_of_row in targets], axis=0)

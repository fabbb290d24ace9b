"""Paired score shifts: how a judge's scores move when a caption is perturbed, and whether that is the way a
sound judge's would.

Per (perturbation, dimension): the mean over candidates of perturbed minus original score, with a clustered
percentile CI (clips resampled with replacement, each clip's candidates kept together; the same seeded clip
draws for every perturbation and dimension of a call, so their intervals are comparable), the share of
candidates moved the wrong way, and a verdict read off the CI:

- "expected direction": the CI lies entirely on the expected side of 0;
- "wrong direction": entirely on the other side;
- "no effect": it contains 0.

A "down" expectation passes only with "expected direction"; "not_up" passes unless "wrong direction" (a
score that stays put is sound). A shift that is exactly 0 everywhere has the CI [0, 0]: no effect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from capjudge.metrics.sensitivity.perturbations import Direction, Perturbation
from capjudge.metrics.statistics.bootstrap import BootstrapDistribution, Interval, percentile_interval
from capjudge.metrics.statistics.clusters import Clusters

Verdict = Literal["expected direction", "wrong direction", "no effect"]
DEFAULT_RESAMPLES = 2000
# +1: the expected side is above 0; -1: below.
_EXPECTED_SIGN: dict[Direction, int] = {"down": -1, "not_up": -1, "up": 1, "not_down": 1}
# Directions a judge satisfies by not moving (only a move the wrong way fails them).
_LENIENT: frozenset[Direction] = frozenset({"not_up", "not_down"})


@dataclass(frozen=True)
class ShiftResult:
    perturbation: str
    dimension: str
    expected: Direction
    mean_shift: float  # mean over candidates of perturbed - original
    interval: Interval  # clustered percentile CI of mean_shift
    share_wrong_way: float  # candidates whose shift is strictly on the wrong side of 0
    verdict: Verdict
    passed: bool
    n_candidates: int
    n_clusters: int


def moved_wrong_way(shift: float, expected: Direction) -> bool:
    """One candidate's shift is strictly on the wrong side of 0 (what `share_wrong_way` counts)."""
    return _EXPECTED_SIGN[expected] * shift < 0


def moved_soundly(shift: float, expected: Direction) -> bool:
    """One candidate's shift is on the sound side: strictly for "down"/"up", or not the wrong way for "not_*"."""
    signed = _EXPECTED_SIGN[expected] * shift
    return signed >= 0 if expected in _LENIENT else signed > 0


def verdict_of(interval: Interval, expected: Direction) -> Verdict:
    sign = _EXPECTED_SIGN[expected]
    low, high = sorted((sign * interval.low, sign * interval.high))  # now the expected side is > 0
    if low > 0:
        return "expected direction"
    if high < 0:
        return "wrong direction"
    return "no effect"


def passes(verdict: Verdict, expected: Direction) -> bool:
    return verdict != "wrong direction" if expected in _LENIENT else verdict == "expected direction"


def clustered_mean_draws(values: np.ndarray, clusters: Clusters, counts: np.ndarray) -> np.ndarray:
    """(B,) the candidate mean of `values` in each clip resample (row b of `counts`: times each clip is drawn)."""
    sizes = np.bincount(clusters.of_candidate, minlength=clusters.n).astype(np.float64)
    return (counts @ clusters.sums(values)) / (counts @ sizes)


def paired_shift(
    original: Sequence[float] | np.ndarray,
    perturbed: Sequence[float] | np.ndarray,
    cluster_ids: Sequence[str] | np.ndarray,
    expected: Direction,
    *,
    perturbation: str = "",
    dimension: str = "",
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
    clusters: Clusters | None = None,
    counts: np.ndarray | None = None,
) -> ShiftResult:
    """The shift of one dimension under one perturbation. `clusters`/`counts` let several calls share one
    set of clip draws (`sensitivity_shifts` does); otherwise they are drawn here from `seed`."""
    if clusters is None:
        clusters = Clusters.of(cluster_ids)
    shift = clusters.aligned(perturbed, "perturbed scores") - clusters.aligned(original, "original scores")
    if counts is None:
        counts = clusters.resample_counts(n_resamples, seed)
    estimate = float(shift.mean())
    distribution = BootstrapDistribution(estimate, clustered_mean_draws(shift, clusters, counts), np.empty(0), 0)
    interval = percentile_interval(distribution, confidence)
    if interval is None:
        raise ValueError(f"a shift interval needs at least 2 resamples, got {counts.shape[0]}")
    verdict = verdict_of(interval, expected)
    wrong_way = float(np.mean(_EXPECTED_SIGN[expected] * shift < 0))
    return ShiftResult(perturbation, dimension, expected, estimate, interval, wrong_way, verdict,
                       passes(verdict, expected), clusters.n_candidates, clusters.n)


def sensitivity_shifts(
    original: Mapping[str, Sequence[float] | np.ndarray],
    perturbed: Mapping[str, Mapping[str, Sequence[float] | np.ndarray]],
    cluster_ids: Sequence[str] | np.ndarray,
    perturbations: Iterable[Perturbation],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[ShiftResult, ...]:
    """Every (perturbation, dimension) with an expectation: `original[dimension]` and
    `perturbed[perturbation][dimension]` hold one score per candidate, aligned with `cluster_ids`. A
    perturbation missing from `perturbed`, or a dimension it has no expectation for, is left out."""
    clusters = Clusters.of(cluster_ids)
    counts = clusters.resample_counts(n_resamples, seed)
    results = []
    for each in perturbations:
        for dimension, scores in perturbed.get(each.name, {}).items():
            expected = each.expected(dimension)
            if expected is None:
                continue
            if dimension not in original:
                raise KeyError(f"perturbation {each.name!r} has scores for {dimension!r}, the originals do not")
            results.append(paired_shift(original[dimension], scores, cluster_ids, expected, perturbation=each.name,
                                        dimension=dimension, confidence=confidence, clusters=clusters, counts=counts))
    return tuple(results)

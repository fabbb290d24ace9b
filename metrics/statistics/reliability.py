"""How noisy is a judge? Test-retest statistics from k independent replies per item.

A run judged with `judge_samples: k` (CAPJUDGE_JUDGE_SAMPLES=k) logs each item's k replies; for one score
they form an items x k matrix. From it:

- per-item SD: the pooled standard deviation of the replies within items (judge noise, in score units);
- ICC(1,1) and ICC(1,k) (Shrout & Fleiss, one-way random effects, from the one-way ANOVA's mean squares):
  how much of one reply's variance, and of the k-reply mean's, is between items rather than noise;
- Krippendorff's alpha (interval), the replies as coders (closed form for complete data);
- the replies per item that would bring the noise below a chosen share of the variance of the item scores:
  the smallest m with (s2_w / m) / (s2_b + s2_w / m) <= share;
- each with a BCa CI from the item bootstrap (items resampled, their k replies kept together).

Items with fewer than k judged replies are left out (the one-way ANOVA needs complete rows); how many is said.
Which field of a logged reply holds a score is the judge's (`capjudge.metrics.leaderboard.replies.
judge_reply_fields`, the table the leaderboard's noise share reads too): G-VEval's `accuracy` is each reply's
`scores.accuracy`, AnyCap's `final_score` (what `anycap_score` averages) and `judge_score` are top-level fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from capjudge.metrics.statistics.bootstrap import BootstrapDistribution, bca_interval, draw_item_indices
from capjudge.metrics.leaderboard.replies import judge_name, judge_reply_fields, judged_replies, reply_numbers


class ReliabilityError(ValueError):
    """Not measurable from these runs; the message says why."""


@dataclass(frozen=True)
class Interval:
    value: float
    low: float | None
    high: float | None

    def text(self, digits: int = 3) -> str:
        if not math.isfinite(self.value):
            return "not measurable"
        ci = f" [{self.low:.{digits}f}, {self.high:.{digits}f}]" if self.low is not None and self.high is not None else ""
        return f"{self.value:.{digits}f}{ci}"


@dataclass(frozen=True)
class RetestReport:
    score: str
    items: int
    replies: int
    left_out: int
    item_sd: Interval
    icc_single: Interval
    icc_mean: Interval
    alpha: Interval
    noise_share_of_one: float  # s2_w / (s2_b + s2_w)
    replies_needed: int | None  # for the requested share; None when the noise share cannot be estimated
    share: float


@dataclass(frozen=True)
class ReplyScores:
    """The scores a run's logged replies carry: name -> field in a reply, and those measured unless told."""

    judge: str | None
    fields: Mapping[str, str]
    defaults: tuple[str, ...]


def reply_scores(lines: Sequence[Mapping[str, Any]]) -> ReplyScores:
    """The scores of the run's replies, as its judge declares them (those its judged replies carry); for a
    judge capjudge does not know, the numbers in the first judged reply's `scores` mapping (the convention of
    `JudgeResult.scores()`)."""
    judge = judge_name(lines)
    declared = judge_reply_fields(judge)
    judged = [reply for line in lines for reply in judged_replies(line) if reply is not None]
    if declared is not None:
        logged = {field for reply in judged for field in reply_numbers(reply)}
        fields = {name: field for name, field in declared.values.items() if field in logged or not judged}
        return ReplyScores(judge, fields, tuple(name for name in declared.scores if name in fields))
    scores = judged[0].get("scores") if judged else None
    names = [name for name, value in scores.items() if _is_number(value)] if isinstance(scores, Mapping) else []
    return ReplyScores(judge, {name: f"scores.{name}" for name in names}, tuple(names))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def replies_per_item(lines: Sequence[Mapping[str, Any]]) -> int:
    """k, the most replies any item logged; a run with one reply per item is not measurable (said so)."""
    k = max((len(judged_replies(line)) for line in lines), default=0)
    if k < 2:
        raise ReliabilityError(
            "not measurable: the run has one judge reply per item; judge it with k > 1 replies per item "
            "(CAPJUDGE_JUDGE_SAMPLES=k or the task's judge_samples) to measure judge noise"
        )
    return k


def sample_matrix(lines: Sequence[Mapping[str, Any]], score: str) -> tuple[np.ndarray, int, int]:
    """(items x k matrix of the judged replies' `score`, k, items left out) from a run's sample lines. An item
    with fewer than k judged replies (a failed reply, or an item never sent: no replies logged) is left out."""
    k = replies_per_item(lines)
    available = reply_scores(lines).fields
    if score not in available:
        raise ReliabilityError(f"no score {score!r} in the replies (have: {', '.join(available) or 'none'})")
    field = available[score]
    rows, left_out = [], 0
    for item_replies in (judged_replies(line) for line in lines):
        values = [reply_numbers(reply).get(field) if reply is not None else None for reply in item_replies]
        if len(values) != k or any(v is None for v in values):
            left_out += 1
            continue
        rows.append(values)
    if len(rows) < 3:
        raise ReliabilityError(f"not measurable: {len(rows)} items with all {k} replies judged (need at least 3)")
    return np.asarray(rows, dtype=float), k, left_out


def _components(matrix: np.ndarray) -> tuple[float, float]:
    """One-way ANOVA mean squares (between items, within items)."""
    n, k = matrix.shape
    means = matrix.mean(axis=1)
    msb = k * np.sum((means - matrix.mean()) ** 2) / (n - 1)
    msw = np.sum((matrix - means[:, None]) ** 2) / (n * (k - 1))
    return float(msb), float(msw)


def icc_one_way(matrix: np.ndarray) -> tuple[float, float]:
    """ICC(1,1) and ICC(1,k); NaN when the items do not vary at all."""
    n, k = matrix.shape
    msb, msw = _components(matrix)
    if msb + (k - 1) * msw == 0 or msb == 0:
        return math.nan, math.nan
    return (msb - msw) / (msb + (k - 1) * msw), (msb - msw) / msb


def krippendorff_alpha(matrix: np.ndarray) -> float:
    """Krippendorff's alpha, interval metric, for complete data (every item rated by all k replies).

    In that case alpha's coincidence sums reduce to sums of squares: with N = n k values, SS_u an item's
    squared deviations from its mean and SS the total's, alpha = 1 - (N - 1) k sum(SS_u) / ((k - 1) N SS).
    The `krippendorff` package computes the same (tests check it) through an N x N-sized value matrix:
    0.5 s for 150 items x 4, too slow for 1,000 bootstrap resamples."""
    n, k = matrix.shape
    total = float(np.sum((matrix - matrix.mean()) ** 2))
    if total == 0:
        return math.nan
    within = float(np.sum((matrix - matrix.mean(axis=1, keepdims=True)) ** 2))
    values = n * k
    return 1.0 - (values - 1) * k * within / ((k - 1) * values * total)


def replies_needed(matrix: np.ndarray, share: float) -> tuple[float, int | None]:
    """(the noise share of one reply's variance, the replies per item for the noise share to be <= `share`)."""
    k = matrix.shape[1]
    msb, msw = _components(matrix)
    between = max((msb - msw) / k, 0.0)  # s2_b
    if between + msw == 0:
        return math.nan, None
    noise = msw / (between + msw)
    if between == 0:
        return noise, None  # no item differences to see through the noise
    return noise, max(1, math.ceil(msw * (1 - share) / (share * between)))


def retest_statistics(matrix: np.ndarray, *, score: str = "score", left_out: int = 0, share: float = 0.1,
                n_resamples: int = 1000, seed: int = 0, confidence: float = 0.95) -> RetestReport:
    if not 0 < share < 1:
        raise ReliabilityError(f"the noise share must be in (0, 1), got {share}")
    n, k = matrix.shape

    def statistics(m: np.ndarray) -> tuple[float, float, float, float]:
        icc1, icck = icc_one_way(m)
        # The pooled within-item SD (root of the ANOVA's within mean square): unbiased for the noise variance,
        # where the mean of per-item SDs would run low (by c4(k): 8% at k = 4).
        return math.sqrt(_components(m)[1]), icc1, icck, krippendorff_alpha(m)

    point = statistics(matrix)
    draws = np.array([statistics(matrix[rows]) for rows in draw_item_indices(n, n_resamples, seed)]) if n_resamples else None
    # BCa rather than plain percentiles: with a few dozen items the percentile interval of the pooled SD
    # covered the truth 88% of the time at a nominal 95% (simulated, tests/test_judge_noise.py); BCa's
    # bias and skew corrections need the leave-one-item-out values, cheap at this size.
    jackknife = np.array([statistics(np.delete(matrix, i, axis=0)) for i in range(n)]) if draws is not None else None

    def interval(position: int) -> Interval:
        if draws is None or jackknife is None or not math.isfinite(point[position]):
            return Interval(point[position], None, None)
        resampled = draws[:, position][np.isfinite(draws[:, position])]
        leave_one_out = jackknife[:, position][np.isfinite(jackknife[:, position])]
        found = bca_interval(BootstrapDistribution(point[position], resampled, leave_one_out,
                                                   n_resamples - resampled.size), confidence)
        return Interval(point[position], found.low, found.high) if found else Interval(point[position], None, None)

    noise, needed = replies_needed(matrix, share)
    return RetestReport(score, n, k, left_out, interval(0), interval(1), interval(2), interval(3), noise, needed, share)


# ----------------------------------------------------------------------------------------------------------
# Judge against judge: the same items (and models) judged by two judges or two settings


@dataclass(frozen=True)
class ModelAgreement:
    model: str
    n_common: int
    kendall_b: Interval
    spearman: Interval
    mean_difference: Interval  # second judge minus first, on the common items
    first_mean: float
    second_mean: float


@dataclass(frozen=True)
class JudgeAgreement:
    metric: str
    models: tuple[ModelAgreement, ...]
    first_ranking: tuple[str, ...]  # models by their mean under each judge, best first
    second_ranking: tuple[str, ...]

    @property
    def ranking_changes(self) -> bool:
        return self.first_ranking != self.second_ranking


def judge_agreement(first: Mapping[str, Mapping[str, float]], second: Mapping[str, Mapping[str, float]], metric: str,
                    *, higher_is_better: bool = True, n_resamples: int = 1000, seed: int = 0) -> JudgeAgreement:
    """`first` / `second`: model -> item id -> the metric's value under each judge. Per model, on the items
    both judges scored: Kendall tau-b and Spearman (item-bootstrap CIs, capjudge.metrics.statistics.correlation), the mean
    difference (paired item bootstrap); and whether the models' order by mean changes."""
    from capjudge.metrics.statistics.correlation import BootstrapSettings, correlate

    shared = [model for model in first if model in second]
    if not shared:
        raise ReliabilityError(f"no model was judged by both: {sorted(first)} vs {sorted(second)}")
    settings = BootstrapSettings(n_resamples=n_resamples, seed=seed)
    results = []
    for model in shared:
        items = sorted(set(first[model]) & set(second[model]))
        if len(items) < 3:
            raise ReliabilityError(f"{model}: {len(items)} items scored by both judges (need at least 3): were "
                                   "the runs made on the same items?")
        a = np.array([first[model][item] for item in items], dtype=float)
        b = np.array([second[model][item] for item in items], dtype=float)
        found = correlate(a, b.tolist(), annotators="mean", coefficients=("kendall_b", "spearman"),
                          settings=settings, item_ids=items)

        def as_interval(name: str) -> Interval:
            c = found[name]
            return Interval(c.value if c.value is not None else math.nan, c.ci_low, c.ci_high)

        differences = b - a
        draws = differences[draw_item_indices(len(items), n_resamples, seed)].mean(axis=1) if n_resamples else None
        low, high = (np.percentile(draws, [2.5, 97.5]) if draws is not None else (None, None))
        results.append(ModelAgreement(model, len(items), as_interval("kendall_b"), as_interval("spearman"),
                                      Interval(float(differences.mean()), None if low is None else float(low),
                                               None if high is None else float(high)),
                                      float(a.mean()), float(b.mean())))
    sign = -1.0 if higher_is_better else 1.0
    first_ranking = tuple(r.model for r in sorted(results, key=lambda r: sign * r.first_mean))
    second_ranking = tuple(r.model for r in sorted(results, key=lambda r: sign * r.second_mean))
    return JudgeAgreement(metric, tuple(results), first_ranking, second_ranking)

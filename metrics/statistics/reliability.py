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
The replies are read from the logged records (`capjudge.judges.record`); which field of a reply holds a score
is the judge's declaration (its descriptor's `reply_fields`, which the leaderboard's noise share reads too):
G-VEval's `accuracy` is each reply's `scores.accuracy`, AnyCap's `final_score` (what `anycap_score` averages)
and `judge_score` are top-level fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from capjudge.judges.known_judges import reply_fields_of_run
from capjudge.judges.record import JudgedRecord, judge_name_of_run, replies_of, scores_mapping_fields
from capjudge.metrics.files.runs import task_samples_files
from capjudge.metrics.files.task_run import read_records
from capjudge.metrics.statistics.bootstrap import BootstrapDistribution, bca_interval, draw_item_indices
from capjudge.metrics.statistics.small_samples import under_rule
from capjudge.metrics.statistics.value_ci import ValueCI


class ReliabilityError(ValueError):
    """Not measurable from these runs; the message says why."""


@dataclass(frozen=True)
class RetestReport:
    score: str
    items: int
    replies: int
    left_out: int
    item_sd: ValueCI
    icc_single: ValueCI
    icc_mean: ValueCI
    alpha: ValueCI
    noise_share_of_one: float  # s2_w / (s2_b + s2_w)
    replies_needed: int | None  # for the requested share; None when the noise share cannot be estimated
    share: float


@dataclass(frozen=True)
class ReplyScores:
    """The scores a run's logged replies carry: name -> field in a reply, and those measured unless told."""

    judge: str | None
    fields: Mapping[str, str]
    defaults: tuple[str, ...]


def reply_scores(records: Sequence[JudgedRecord | None]) -> ReplyScores:
    """The scores of the run's replies, as its judge declares them (those its judged replies carry); for a
    judge capjudge does not know, the numbers in the first judged reply's `scores` mapping (the convention of
    `JudgeResult.scores()`)."""
    judge = judge_name_of_run(records)
    judged = [reply for record in records for reply in replies_of(record) if reply is not None]
    declared = reply_fields_of_run(records)
    if declared is None:
        guessed = scores_mapping_fields(judged)
        return ReplyScores(judge, guessed.values, guessed.scores)
    logged = {field for reply in judged for field in reply.numbers()}
    fields = {name: field for name, field in declared.values.items() if field in logged or not judged}
    return ReplyScores(judge, fields, tuple(name for name in declared.scores if name in fields))


def replies_per_item(records: Sequence[JudgedRecord | None]) -> int:
    """k, the most replies any item logged; a run with one reply per item is not measurable (said so)."""
    k = max((len(replies_of(record)) for record in records), default=0)
    if k < 2:
        raise ReliabilityError(
            "not measurable: the run has one judge reply per item; judge it with k > 1 replies per item "
            "(CAPJUDGE_JUDGE_SAMPLES=k or the task's judge_samples) to measure judge noise"
        )
    return k


def sample_matrix(records: Sequence[JudgedRecord | None], score: str) -> tuple[np.ndarray, int, int]:
    """(items x k matrix of the judged replies' `score`, k, items left out) from a run's logged records. An
    item with fewer than k judged replies (a failed reply, or an item never sent: no replies logged) is left out."""
    k = replies_per_item(records)
    available = reply_scores(records).fields
    if score not in available:
        raise ReliabilityError(f"no score {score!r} in the replies (have: {', '.join(available) or 'none'})")
    field = available[score]
    rows, left_out = [], 0
    for replies in (replies_of(record) for record in records):
        values = [reply.value(field) if reply is not None else None for reply in replies]
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


def complete_interval_alpha(matrix: np.ndarray) -> float:
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
        return math.sqrt(_components(m)[1]), icc1, icck, complete_interval_alpha(m)

    point = statistics(matrix)
    draws = np.array([statistics(matrix[rows]) for rows in draw_item_indices(n, n_resamples, seed)]) if n_resamples else None
    # BCa rather than plain percentiles: with a few dozen items the percentile interval of the pooled SD
    # covered the truth 88% of the time at a nominal 95% (simulated, tests/metrics/statistics/test_judge_noise.py); BCa's
    # bias and skew corrections need the leave-one-item-out values, cheap at this size.
    jackknife = np.array([statistics(np.delete(matrix, i, axis=0)) for i in range(n)]) if draws is not None else None

    def interval(position: int) -> ValueCI:
        if draws is None or jackknife is None or not math.isfinite(point[position]):
            return ValueCI(point[position])
        resampled = draws[:, position][np.isfinite(draws[:, position])]
        leave_one_out = jackknife[:, position][np.isfinite(jackknife[:, position])]
        found = bca_interval(BootstrapDistribution(point[position], resampled, leave_one_out,
                                                   n_resamples - resampled.size), confidence)
        figure = ValueCI(point[position], found.low, found.high) if found else ValueCI(point[position])
        return under_rule(figure, n, "item")[0]  # the small-sample rule: too few items or zero width, value alone

    noise, needed = replies_needed(matrix, share)
    return RetestReport(score, n, k, left_out, interval(0), interval(1), interval(2), interval(3), noise, needed, share)


# ----------------------------------------------------------------------------------------------------------
# A run's judge noise (`capjudge reliability`)


@dataclass(frozen=True)
class RunNoise:
    samples_path: Path
    reports: tuple[RetestReport, ...]  # one per score measured, in the order asked (or the judge's order)


def scores_to_measure(records: Sequence[JudgedRecord | None], asked: Sequence[str] | None, where: Path) -> list[str]:
    """The `asked` score names, each one the replies have; unless asked, the judge's own scores. Never none:
    a table without a row would say nothing and look like success."""
    replies_per_item(records)  # a run judged once per item is refused as such, whatever is asked
    found = reply_scores(records)
    have = ", ".join(found.fields) or "none"
    unknown = [name for name in asked or () if name not in found.fields]
    if unknown:
        raise ReliabilityError(f"--score {unknown[0]}: no reply in {where} has that score (have: {have})")
    names = list(dict.fromkeys(asked or found.defaults))
    if not names:
        raise ReliabilityError(f"{where}: the replies of judge {found.judge or '(unnamed)'} carry no score "
                               "capjudge knows; name one with --score")
    return names


def run_noise(run: Path, task: str, asked: Sequence[str] | None, *, share: float, n_resamples: int,
              seed: int) -> RunNoise:
    """The judge noise of each score of the one samples file of `task` under `run` (ReliabilityError, or
    RunFileError for unreadable input, naming the problem)."""
    found = task_samples_files(run, task)
    if len(found) != 1:
        raise ReliabilityError(f"{run}: {len(found)} samples files of task {task!r} (need exactly one; "
                               "run lmms-eval with --log_samples)")
    records = read_records(found[0])
    reports = []
    for name in scores_to_measure(records, asked, found[0]):
        matrix, _, left_out = sample_matrix(records, name)
        reports.append(retest_statistics(matrix, score=name, left_out=left_out, share=share,
                                         n_resamples=n_resamples, seed=seed))
    return RunNoise(found[0], tuple(reports))

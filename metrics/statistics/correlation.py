"""Judge-human correlation: Pearson, Spearman, Kendall tau-b and tau-c with item-level bootstrap intervals.

Point estimates and p-values are scipy.stats' on the (judge, human) pairs, as in the published G-VEval tables
(``kendalltau(variant=...)``). Intervals: :mod:`capjudge.metrics.statistics.bootstrap` (items resampled, an item's
pairs together), under the small-sample rule (:mod:`capjudge.metrics.statistics.small_samples`).

Several annotators per item are handled in one of two ways, chosen per call:

* ``expand`` (default): every annotator's score is its own pair with the item's judge score. This is what the
  G-VEval code does (one row per annotator, the judge score repeated), so it reproduces the published tables.
  p-values and the Fisher-z interval then treat the repeated pairs as independent, which they are not: read
  the bootstrap interval, which resamples items.
* ``mean``: annotators' scores are averaged per item, one pair per item.

Missing values (None, NaN) are dropped pairwise and counted (:class:`MissingCounts`); no plausible score (not a
number, infinite, beyond ±MAX_SCORE_MAGNITUDE) is an error naming the item, from a list or a numpy array alike.
An undefined coefficient (too few pairs, a constant input) has ``value=None`` and an ``undefined_reason``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import numpy as np

from capjudge.metrics.statistics.bootstrap import (
    COEFFICIENT_NAMES,
    WEIGHTED_STATISTICS,
    BootstrapDistribution,
    CoefficientName,
    Interval,
    bootstrap_distribution,
    bootstrap_intervals,
    draw_item_indices,
)
from capjudge.metrics.statistics.small_samples import withheld_reason
from capjudge.metrics.statistics.value_ci import ValueCI

AnnotatorMode = Literal["expand", "mean"]
ANNOTATOR_MODES: tuple[AnnotatorMode, ...] = ("expand", "mean")
DEFAULT_ANNOTATOR_MODE: AnnotatorMode = "expand"
CiMethod = Literal["bca", "percentile"]
DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
MIN_PAIRS = 3
# 2**53, as for run logs (capjudge.metrics.files.values): beyond it a float no longer holds every integer, no score
# comes near it, and sums and squares stay finite. A score past it is a broken value (-1e308: a mean of -inf).
MAX_SCORE_MAGNITUDE = 2.0**53
# `capjudge correlate --bootstrap N --seed S`'s bounds (capjudge.tasks.cli.bounds says why; this layer cannot import
# it, a test pins them equal), so the Python API refuses what the command refuses.
MAX_RESAMPLES = 10_000
MAX_SEED = 2**32 - 1


class HumanScoreError(ValueError):
    """A human score has a shape the caller did not announce; the message names the item."""


class ScoreValueError(HumanScoreError):
    """A value that is no score (not a number, infinite, too large); the message names the item."""


def check_count(name: str, value: Any, low: int, high: int) -> None:
    """A ValueError naming the field unless `value` is a whole number (numpy's too; no bool) from low to high."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ValueError(f"{name} must be a whole number from {low:,} to {high:,}, got {_short_repr(value)}")


def check_level(name: str, value: Any, *, inclusive: bool = False) -> None:
    """A ValueError naming the field unless `value` is a number between 0 and 1, exclusive unless `inclusive`."""
    number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if not (number and (0 <= value <= 1 if inclusive else 0 < value < 1)):
        bounds = "from 0 to 1" if inclusive else "between 0 and 1 (exclusive)"
        raise ValueError(f"{name} must be a number {bounds}, got {_short_repr(value)}")


@dataclass(frozen=True)
class BootstrapSettings:
    """How intervals are computed: item resamples (0 = none), seed, level, and the interval reported first."""

    n_resamples: int = DEFAULT_RESAMPLES
    seed: int = 0
    confidence: float = DEFAULT_CONFIDENCE
    ci_method: CiMethod = "bca"

    def __post_init__(self) -> None:
        # Here, not where used: numpy's errors named no field (or none came: -5 resamples gave no interval, an
        # unknown ci_method the percentile one), and 10**8 resamples ran out of memory.
        check_count("n_resamples", self.n_resamples, 0, MAX_RESAMPLES)
        check_count("seed", self.seed, 0, MAX_SEED)
        check_level("confidence", self.confidence)
        if self.ci_method not in get_args(CiMethod):
            raise ValueError(f"ci_method must be one of {', '.join(get_args(CiMethod))}, "
                             f"got {_short_repr(self.ci_method)}")


DEFAULT_SETTINGS = BootstrapSettings()


@dataclass(frozen=True)
class MissingCounts:
    """What was dropped before correlating, so a report can say how many items a figure rests on."""

    items_total: int
    items_used: int
    judge_missing: int  # items whose judge score is None/NaN
    human_missing: int  # items with no usable human score at all
    pairs_dropped: int  # candidate pairs (annotator slots in expand mode, items in mean mode) not used


@dataclass(frozen=True)
class Coefficient:
    """One correlation coefficient with its uncertainty. ``value is None`` exactly when it is undefined."""

    name: CoefficientName
    value: float | None
    p_value: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str | None
    n: int  # pairs used
    n_items: int  # items those pairs come from (the bootstrap's resampling unit)
    undefined_reason: str | None = None
    intervals: tuple[Interval, ...] = ()
    n_resamples: int = 0  # resamples with a defined value
    n_undefined_resamples: int = 0
    no_interval: str = ""  # why no interval is shown (the small-sample rule: too few items, or zero width)

    @property
    def defined(self) -> bool:
        return self.value is not None

    def interval(self, method: str) -> Interval | None:
        return next((i for i in self.intervals if i.method == method), None)

    @property
    def value_ci(self) -> ValueCI:
        return ValueCI(self.value, self.ci_low, self.ci_high)


@dataclass(frozen=True)
class CorrelationResult:
    """Every requested coefficient for one (scorer, human target) pairing."""

    coefficients: tuple[Coefficient, ...]
    annotators: AnnotatorMode
    n_pairs: int
    n_items: int
    missing: MissingCounts
    settings: BootstrapSettings

    def __getitem__(self, name: str) -> Coefficient:
        for coefficient in self.coefficients:
            if coefficient.name == name:
                return coefficient
        raise KeyError(f"coefficient {name!r} was not computed; have {[c.name for c in self.coefficients]}")


@dataclass(frozen=True)
class PairSet:
    """The complete (judge, human) pairs, each tagged with the (compacted) index of the item it came from."""

    judge: np.ndarray
    human: np.ndarray
    item_of_pair: np.ndarray
    n_items: int
    annotators: AnnotatorMode
    missing: MissingCounts
    item_ids: tuple[str, ...] = field(default=())  # ids of the items used, in compacted order


# Input normalisation -----------------------------------------------------------------------------------


def checked_score(value: Any, where: str, error: type[Exception] = ScoreValueError) -> float:
    """`value` as a score: NaN when it is missing (None or NaN), else a finite float of plausible size.

    Anything else is `error` naming `where`: a non-number, an infinity, an integer too large for a float
    (10**400 raises OverflowError in any arithmetic) or a magnitude beyond MAX_SCORE_MAGNITUDE.
    """
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise error(f"{where}: expected a number or null, got {_short_repr(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise error(f"{where}: {_short_repr(value)} is too large for a floating-point number") from None
    if math.isnan(number):
        return math.nan
    if not abs(number) <= MAX_SCORE_MAGNITUDE:
        raise error(f"{where}: {number:g} is not a plausible score (beyond ±2**53); a missing score is null")
    return number


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _array_values(values: np.ndarray, what: str) -> list[Any]:
    """An array as (nested) lists, checked as lists are: an array cast unchecked took inf as missing, 1e300 (a
    Pearson of -1e-18) and strings as scores. Only numbers, and None in an object array, can pass that check."""
    if values.dtype.kind not in "iufO":  # bool, complex, text, bytes, dates, records: no scores
        raise ScoreValueError(f"{what}: an array of {values.dtype} values; expected numbers (NaN for a missing one)")
    return values.tolist()


def as_judge_vector(values: Sequence[float | None] | np.ndarray, item_ids: Sequence[str] | None = None) -> np.ndarray:
    """Judge scores as a float vector, from a list or a 1-D array (a 2-D one was flattened into more items) alike;
    None or NaN is missing, any other value `checked_score` refuses is an error naming the item."""
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ScoreValueError(f"judge scores: an array of shape {values.shape}; expected one score per item (1-D)")
        values = _array_values(values, "judge scores")
    ids = _ids(item_ids, len(values))
    return np.array([checked_score(v, f"item {ids[i]!r} judge score") for i, v in enumerate(values)], dtype=np.float64)


def as_human_matrix(values: Sequence[Any] | np.ndarray, index: int | None = None,
                    item_ids: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Human scores as an (items, annotators) float matrix padded with NaN, plus each item's annotator count.

    Each item's value may be a number (one annotator), a list of numbers (one per annotator), or — with
    ``index`` — a list of per-annotator lists from which element ``index`` is taken. None means missing. An
    array, (items,), (items, annotators) or with ``index`` (items, annotators, k), is read as those lists are.
    """
    if isinstance(values, np.ndarray):
        if values.ndim not in ((3,) if index is not None else (1, 2)):
            raise HumanScoreError(f"human scores array of shape {values.shape} with annotator index {index}: expected "
                                  "(items,) or (items, annotators) without an index, or (items, annotators, k) with one")
        values = _array_values(values, "human scores")  # nested lists: items, their annotators, each one's k
    ids = _ids(item_ids, len(values))
    rows: list[list[float]] = []
    for position, value in enumerate(values):
        where = f"item {ids[position]!r} human score"
        if isinstance(value, (list, tuple)):
            rows.append([_annotator_score(entry, index, f"{where}, annotator {a}") for a, entry in enumerate(value)])
        elif index is not None and value is not None:
            raise HumanScoreError(f"{where}: an annotator index was given but the value is {value!r}, not a list")
        else:
            rows.append([checked_score(value, where)])
    slots = np.array([len(r) for r in rows], dtype=np.int64)
    matrix = np.full((len(rows), max(slots, default=1) or 1), np.nan)
    for position, row in enumerate(rows):
        matrix[position, : len(row)] = row
    return matrix, slots


def _annotator_score(entry: Any, index: int | None, where: str) -> float:
    if index is None:
        if isinstance(entry, (list, tuple)):
            raise HumanScoreError(f"{where}: holds a list {entry!r}; say which element to use (an annotator index)")
        return checked_score(entry, where)
    if entry is None:
        return math.nan
    if not isinstance(entry, (list, tuple)):
        raise HumanScoreError(f"{where}: an annotator index was given, so each annotator needs a list, got {entry!r}")
    if not -len(entry) <= index < len(entry):
        raise HumanScoreError(f"{where}: index {index} is out of range for {entry!r}")
    return checked_score(entry[index], where)


def _ids(item_ids: Sequence[str] | None, n: int) -> Sequence[str]:
    if item_ids is None:
        return [str(i) for i in range(n)]
    if len(item_ids) != n:
        raise ValueError(f"{len(item_ids)} item ids for {n} items")
    return item_ids


def build_pairs(
    judge: Sequence[float | None] | np.ndarray,
    human: Sequence[Any] | np.ndarray,
    annotators: AnnotatorMode = DEFAULT_ANNOTATOR_MODE,
    *,
    human_index: int | None = None,
    item_ids: Sequence[str] | None = None,
) -> PairSet:
    """Turn per-item judge and human scores into the pairs that are correlated, dropping incomplete ones."""
    if annotators not in ANNOTATOR_MODES:
        raise ValueError(f"annotators must be one of {ANNOTATOR_MODES}, got {annotators!r}")
    judge_vector = as_judge_vector(judge, item_ids)
    human_values, slots = as_human_matrix(human, human_index, item_ids)
    if judge_vector.shape[0] != human_values.shape[0]:
        raise ValueError(f"{judge_vector.shape[0]} judge scores but {human_values.shape[0]} human scores")
    ids = list(_ids(item_ids, judge_vector.shape[0]))
    judge_ok = np.isfinite(judge_vector)
    human_ok = np.isfinite(human_values)
    has_human = human_ok.any(axis=1)
    usable = judge_ok & has_human
    kept = np.flatnonzero(usable)
    if annotators == "mean":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # rows without any score are dropped below anyway
            means = np.nanmean(human_values, axis=1)
        human_pairs = means[kept]
        judge_pairs = judge_vector[kept]
        item_of_pair = np.arange(kept.size)
        candidates = judge_vector.shape[0]
    else:
        rows, columns = np.nonzero(human_ok & judge_ok[:, None])
        human_pairs = human_values[rows, columns]
        judge_pairs = judge_vector[rows]
        item_of_pair = np.searchsorted(kept, rows)
        candidates = int(slots.sum())
    missing = MissingCounts(
        items_total=int(judge_vector.shape[0]),
        items_used=int(kept.size),
        judge_missing=int((~judge_ok).sum()),
        human_missing=int((~has_human).sum()),
        pairs_dropped=int(candidates - human_pairs.size),
    )
    return PairSet(
        judge=judge_pairs,
        human=human_pairs,
        item_of_pair=item_of_pair,
        n_items=int(kept.size),
        annotators=annotators,
        missing=missing,
        item_ids=tuple(ids[i] for i in kept),
    )


# ---------------------------------------------------------------------------------------------------------
# Coefficients
# ---------------------------------------------------------------------------------------------------------


def undefined_reason(x: np.ndarray, y: np.ndarray, x_label: str = "judge", y_label: str = "human") -> str | None:
    """Why no correlation coefficient can be computed for these pairs, or None when one can."""
    if x.size < MIN_PAIRS:
        return f"only {x.size} complete pair(s); at least {MIN_PAIRS} are needed"
    if np.ptp(x) == 0:
        return f"{x_label} scores are constant (all {x[0]:g})"
    if np.ptp(y) == 0:
        return f"{y_label} scores are constant (all {y[0]:g})"
    return None


def scipy_coefficient(name: CoefficientName, x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(statistic, p-value) from scipy.stats for one coefficient; inputs must be valid (see undefined_reason)."""
    from scipy import stats

    if name == "pearson":
        result = stats.pearsonr(x, y)
    elif name == "spearman":
        result = stats.spearmanr(x, y)
    elif name == "kendall_b":
        result = stats.kendalltau(x, y, variant="b")
    elif name == "kendall_c":
        result = stats.kendalltau(x, y, variant="c")
    else:
        raise ValueError(f"unknown coefficient {name!r}; expected one of {COEFFICIENT_NAMES}")
    return float(result.statistic), float(result.pvalue)


def fisher_z_interval(x: np.ndarray, y: np.ndarray, confidence: float) -> Interval:
    """Pearson's interval from Fisher's z transform (scipy's PearsonRResult.confidence_interval)."""
    from scipy import stats

    ci = stats.pearsonr(x, y).confidence_interval(confidence_level=confidence)
    return Interval(float(ci.low), float(ci.high), "fisher-z", confidence)


def correlate(
    judge: Sequence[float | None] | np.ndarray,
    human: Sequence[Any] | np.ndarray,
    *,
    annotators: AnnotatorMode = DEFAULT_ANNOTATOR_MODE,
    human_index: int | None = None,
    coefficients: Iterable[CoefficientName] = COEFFICIENT_NAMES,
    settings: BootstrapSettings = DEFAULT_SETTINGS,
    item_ids: Sequence[str] | None = None,
) -> CorrelationResult:
    """Correlate one scorer with human judgements; see the module docstring for the annotator modes."""
    pairs = build_pairs(judge, human, annotators, human_index=human_index, item_ids=item_ids)
    return correlate_pairs(pairs, coefficients=coefficients, settings=settings)


def correlate_pairs(
    pairs: PairSet,
    *,
    coefficients: Iterable[CoefficientName] = COEFFICIENT_NAMES,
    settings: BootstrapSettings = DEFAULT_SETTINGS,
    labels: tuple[str, str] = ("judge", "human"),
) -> CorrelationResult:
    """Coefficients for pairs already built; ``labels`` name the two sides in an undefined_reason."""
    names = tuple(coefficients)
    reason = undefined_reason(pairs.judge, pairs.human, *labels)
    indices = None
    if reason is None and settings.n_resamples > 0:
        indices = draw_item_indices(pairs.n_items, settings.n_resamples, settings.seed)
    results = tuple(_coefficient(name, pairs, reason, indices, settings) for name in names)
    return CorrelationResult(
        coefficients=results,
        annotators=pairs.annotators,
        n_pairs=int(pairs.judge.size),
        n_items=pairs.n_items,
        missing=pairs.missing,
        settings=settings,
    )


def _coefficient(name: CoefficientName, pairs: PairSet, reason: str | None, indices: np.ndarray | None,
                 settings: BootstrapSettings) -> Coefficient:
    n, n_items = int(pairs.judge.size), pairs.n_items
    if reason is not None:
        return Coefficient(name, None, None, None, None, None, n, n_items, undefined_reason=reason)
    value, p_value = scipy_coefficient(name, pairs.judge, pairs.human)
    intervals: list[Interval] = []
    distribution: BootstrapDistribution | None = None
    if indices is not None:
        statistic = WEIGHTED_STATISTICS[name]
        distribution = bootstrap_distribution(
            lambda w: statistic(pairs.judge, pairs.human, w), value, pairs.item_of_pair, n_items, indices
        )
        intervals.extend(bootstrap_intervals(distribution, settings.confidence))
    if name == "pearson" and n > 3:
        intervals.append(fisher_z_interval(pairs.judge, pairs.human, settings.confidence))
    primary = choose_interval(intervals, settings.ci_method)
    # The small-sample rule: from too few items (2 gave a tau-b of 0.5774 with ci_low = ci_high), or of zero width.
    no_interval = withheld_reason(ValueCI(value, primary.low, primary.high), n_items) if primary else ""
    primary, intervals = (None, []) if no_interval else (primary, intervals)  # shown nowhere, the JSON included
    return Coefficient(
        name=name,
        value=value,
        p_value=p_value,
        ci_low=primary.low if primary else None,
        ci_high=primary.high if primary else None,
        ci_method=primary.method if primary else None,
        n=n,
        n_items=n_items,
        intervals=tuple(intervals),
        n_resamples=int(distribution.resampled.size) if distribution else 0,
        n_undefined_resamples=distribution.n_undefined if distribution else 0, no_interval=no_interval)


def choose_interval(intervals: Sequence[Interval], preferred: str) -> Interval | None:
    """The preferred bootstrap interval; BCa falls back to percentile when it cannot be formed."""
    for method in (preferred, "percentile"):
        for interval in intervals:
            if interval.method == method:
                return interval
    return None

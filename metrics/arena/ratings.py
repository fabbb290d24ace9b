"""An arena's ratings: the Bradley-Terry fit of a battle table on the Elo scale, with an item-clustered
bootstrap interval, the win-rate matrix, and the pairs a mean-score ranking orders the other way.

The fit uses one row per model pair (its battles' points summed; `bradley_terry` says why that is the same
fit as battle by battle). The bootstrap resamples ITEMS (all of an item's battles together), turns each
resample into weighted pair counts with one matrix product, and refits from the full-data strengths (a
warm start: the resampled optimum is near). A resample that draws no battle of some model leaves that
model's rating undefined: it is counted and left out of the percentiles.

Two ratings get no interval, and say why (`no_interval`), rather than a bracket of zero width read as certainty:
every rating when the battles come from fewer items than the small-sample rule asks (5: capjudge.metrics.
statistics.small_samples), and the rating of a model that won, or lost, every one of its battles. Such a model's maximum-likelihood strength is infinite:
its finite value is set by the fit's tiny regularisation (FastChat's C = 1e6), not by the battles, and every
resample says the same. Any other interval of zero width (every resample gives the model the same rating, as for
the middle model of three that beat each other in a perfect order) is no interval either.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from capjudge.metrics.arena.battles import BattleTable, win_rates
from capjudge.metrics.arena.bradley_terry import (ELO_SCALE_TEXT, BattleRows, design_matrix, elo, fit_strengths,
                                                  fit_strengths_many)
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.resampling import count_blocks, percentile_ci
from capjudge.metrics.statistics.small_samples import is_zero_width, too_few_units
from capjudge.metrics.statistics.value_ci import ValueCI

METHOD = (
    "Arena: every pair of models on every item both have a value for is a battle ({decided}); a tie counts "
    "half a win to each side. Ratings: Bradley-Terry maximum likelihood (logistic regression on the battles, "
    "scipy's optimiser), " + ELO_SCALE_TEXT + ". Brackets: {confidence:.0%} percentile CI from an item-"
    "clustered bootstrap ({n_resamples} resamples of the items, each item's battles kept together, seed {seed})."
)


@dataclass(frozen=True)
class ArenaSettings:
    n_resamples: int = 1000
    seed: int = 0
    confidence: float = 0.95

    def __post_init__(self) -> None:
        if not 0 < self.confidence < 1:
            raise ArenaError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.n_resamples < 0:
            raise ArenaError(f"resamples must be >= 0, got {self.n_resamples}")


@dataclass(frozen=True)
class ArenaRatings:
    models: tuple[str, ...]
    ratings: Mapping[str, ValueCI]  # model -> Elo rating with its interval
    strengths: np.ndarray  # (n_models,) natural log-odds, summing to 0, in `models` order
    win_rates: Mapping[tuple[str, str], float | None]  # (a, b) -> a's share of the points against b
    battles: Mapping[tuple[str, str], int]  # (a, b) and (b, a) -> their battles
    n_items: int
    n_battles: int
    n_ties: int
    n_undefined: int  # resamples in which some model drew no battle
    settings: ArenaSettings
    # model -> why its rating has no interval (see the module docstring); "" keys none
    no_interval: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ranking(self) -> tuple[str, ...]:
        """Models by rating, best first (ties in model order): the order rows are listed in."""
        return tuple(sorted(self.models, key=lambda m: (-(self.ratings[m].value or 0.0), self.models.index(m))))

    @property
    def ranks(self) -> dict[str, int]:
        """Each model's competition rank by rating (1, 2, 2, 4): models of one rating share a rank, as the
        leaderboard's ranks by mean do, so that the listing order of a tie is never read as a ranking. Ratings
        are compared to 1e-6 Elo points (a fit of equal strengths lands within float noise of each other)."""
        from scipy.stats import rankdata

        values = np.round([-(self.ratings[m].value or 0.0) for m in self.models], 6)
        return {model: int(rank) for model, rank in zip(self.models, rankdata(values, method="min"))}


def pair_totals(table: BattleTable, counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per pair: the first model's points and the battles, summed over items (weighted by `counts`, one row
    per resample, when given). Shapes (n_pairs,) or (rows, n_pairs)."""
    fought = np.isfinite(table.points)
    points = np.where(fought, table.points, 0.0)
    if counts is None:
        return points.sum(axis=0), fought.sum(axis=0).astype(np.float64)
    return counts @ points, counts @ fought.astype(np.float64)


def pair_rows(table: BattleTable) -> BattleRows:
    first = np.array([i for i, _ in table.pairs], dtype=np.int64)
    second = np.array([j for _, j in table.pairs], dtype=np.int64)
    return BattleRows(first, second, np.zeros(first.size))


# An interval narrower than this (Elo points) is no interval: a millionth of a point is rounding, not data.
ZERO_WIDTH_ELO = 1e-6


def arena_ratings(table: BattleTable, settings: ArenaSettings = ArenaSettings()) -> ArenaRatings:
    """The Bradley-Terry ratings of `table` with item-bootstrap intervals (see the module docstring)."""
    n_models = len(table.models)
    design = design_matrix(pair_rows(table), n_models)
    points, battles = pair_totals(table)
    theta = fit_strengths(design, _shares(points, battles), battles)
    draws = _bootstrap(table, design, theta, settings)
    undefined = ~np.isfinite(draws).all(axis=1) if draws.size else np.zeros(0, dtype=bool)
    ratings = elo(theta)
    n_items = int(np.isfinite(table.points).any(axis=1).sum())  # items with a battle: the resampling's units
    no_interval = no_interval_reasons(table, n_items)
    intervals = {model: ValueCI(float(ratings[m])) if model in no_interval else
                 percentile_ci(float(ratings[m]), draws[~undefined, m] if draws.size else draws, settings.confidence)
                 for m, model in enumerate(table.models)}
    drop_zero_width(intervals, no_interval)  # e.g. the middle model of a perfectly separated three
    met = {}
    for p, (i, j) in enumerate(table.pairs):
        met[(table.models[i], table.models[j])] = met[(table.models[j], table.models[i])] = int(battles[p])
    return ArenaRatings(
        models=table.models, ratings=intervals, strengths=theta, win_rates=win_rates(table), battles=met,
        n_items=n_items, n_battles=table.n_battles, n_ties=int((table.points == 0.5).sum()),
        n_undefined=int(undefined.sum()), settings=settings, no_interval=no_interval,
    )


def drop_zero_width(intervals: dict[str, ValueCI], no_interval: dict[str, str]) -> None:
    """Intervals of zero width (to the fits' precision: resamples that give a model one rating differ in its
    last digits) taken out of `intervals`, the reason put in `no_interval`: a zero-width interval measures
    nothing."""
    for model, figure in intervals.items():
        if is_zero_width(figure.ci_low, figure.ci_high, ZERO_WIDTH_ELO):  # the small-sample rule's test
            no_interval[model] = "every resample gives it the same rating (a zero-width interval measures nothing)"
            intervals[model] = ValueCI(figure.value)


def no_interval_reasons(table: BattleTable, n_items: int) -> dict[str, str]:
    """model -> why its rating gets no interval (see the module docstring): battles on too few items, or
    a model that won or lost every one of its battles (its rating is the regularisation's)."""
    too_few = too_few_units(n_items, "item")  # the small-sample rule (capjudge.metrics.statistics.small_samples)
    if too_few:
        return dict.fromkeys(table.models, f"battles {too_few}")
    reasons = {}
    for m, model in enumerate(table.models):
        mine = [(p, i == m) for p, (i, j) in enumerate(table.pairs) if m in (i, j)]
        points = [table.points[:, p] if first else 1.0 - table.points[:, p] for p, first in mine]
        fought = np.concatenate(points) if points else np.zeros(0)
        fought = fought[np.isfinite(fought)]
        if fought.size and (fought == 1.0).all():
            reasons[model] = "won every one of its battles: its rating is set by the fit's regularisation, not the battles"
        elif fought.size and (fought == 0.0).all():
            reasons[model] = "lost every one of its battles: its rating is set by the fit's regularisation, not the battles"
    return reasons


def _shares(points: np.ndarray, battles: np.ndarray) -> np.ndarray:
    """The first model's share of the points per pair (0 where a pair fought no battle: its weight is 0)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(battles > 0, points / battles, 0.0)


def _bootstrap(table: BattleTable, design: np.ndarray, theta: np.ndarray, settings: ArenaSettings) -> np.ndarray:
    """(n_resamples, n_models) Elo ratings per resample; NaN rows where some model drew no battle."""
    if settings.n_resamples < 2:
        return np.empty((0, len(table.models)))
    n_models = len(table.models)
    involved = np.zeros((len(table.pairs), n_models))
    for p, (i, j) in enumerate(table.pairs):
        involved[p, [i, j]] = 1.0
    blocks = []
    for counts in count_blocks(len(table.items), settings.n_resamples, settings.seed):
        points, battles = pair_totals(table, counts)
        drawn = ((battles @ involved) > 0).all(axis=1)
        block = np.full((counts.shape[0], n_models), np.nan)
        if drawn.any():
            block[drawn] = elo(fit_strengths_many(design, _shares(points[drawn], battles[drawn]), battles[drawn], theta))
        blocks.append(block)
    return np.concatenate(blocks)


def order_differences(ratings: ArenaRatings, means: Mapping[str, float], higher_is_better: bool = True
                      ) -> tuple[tuple[str, str], ...]:
    """Pairs (a, b) that the mean score puts a above b and the rating b above a (both strictly): the pairs
    whose order the arena changes."""
    sign = 1.0 if higher_is_better else -1.0
    found = []
    for index, a in enumerate(ratings.models):
        for b in ratings.models[index + 1:]:
            if a not in means or b not in means:
                continue
            by_mean = np.sign(sign * (means[a] - means[b]))
            by_rating = np.sign((ratings.ratings[a].value or 0.0) - (ratings.ratings[b].value or 0.0))
            if by_mean != 0 and by_rating != 0 and by_mean != by_rating:
                found.append((a, b) if by_mean > 0 else (b, a))
    return tuple(found)

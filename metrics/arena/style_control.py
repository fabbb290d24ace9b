"""The length-controlled arena: Chatbot Arena's style control with caption length as the style.

Each battle gets a covariate, the normalised length difference d = (words_first - words_second) /
(words_first + words_second), and the Bradley-Terry regression adds gamma * d / s to the strength difference
(`bradley_terry`, one row per battle). The models' strengths are then their ratings with length held equal:
a judge that prefers longer captions puts its preference into gamma, not into the model that writes long.
s is the root mean square of d over the battles, so gamma is per typical length difference. d is not
centred: a pair's order in the table (model i before j) is arbitrary, and a shift would favour whichever
model happens to be listed first; the RMS does not change when a pair is turned round.

Interval: the same item-clustered bootstrap as the raw ratings (items resampled, each resample a weighted
refit from the full-data estimate); a resample that draws no battle of some model is undefined and counted.

Identification: gamma is a claim about length only where the battles can tell length from the models. They
cannot when every battle is decided by the models: a model that won or lost every one of its battles has an
infinite strength (its finite value the fit's regularisation's) that explains them whatever gamma is, and once
such models are set aside the rest may be decided the same way (a judge that ignores length, good > fair > poor
on every item, got "595 [564, 1569]" Elo points for length); nor when each battle's length difference is fixed
by its two models (the covariate is a combination of the model columns), when the battles come from fewer items
than the small-sample rule asks, or when more than a tenth of the resamples are undefined (the leaderboard's
length control uses the same floor and share). Then there is no
length-controlled ranking and no gamma: `style_controlled` raises `LengthNotIdentified`, whose text says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from capjudge.metrics.arena.battles import BattleTable
from capjudge.metrics.arena.bradley_terry import (ELO_PER_LOGIT, BattleRows, design_matrix, elo, fit_strengths,
                                                  fit_strengths_many)
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.ratings import ArenaSettings, drop_zero_width, no_interval_reasons
from capjudge.metrics.arena.resampling import count_blocks, percentile_ci
from capjudge.metrics.statistics.small_samples import too_few_units
from capjudge.metrics.statistics.value_ci import ValueCI

# The share of undefined resamples above which the fit counts as not identified (the leaderboard's, too).
MAX_UNDEFINED_SHARE = 0.10
# A length covariate whose residual, after the best combination of the model columns, is below this share of
# its norm is fixed by the models.
_COLLINEAR_RESIDUAL = 1e-9

METHOD = (
    "Length-controlled: the same Bradley-Terry regression with the battle's normalised length difference "
    "(words_a - words_b) / (words_a + words_b), divided by its root mean square over the battles, as a "
    "covariate (Chatbot Arena's style control); the ratings are the models' strengths with length held "
    "equal, gamma the Elo points a typical length difference is worth."
)


class LengthNotIdentified(ArenaError):
    """The battles cannot separate length from the models: no gamma and no length-controlled ranking."""


@dataclass(frozen=True)
class StyleControlled:
    ratings: Mapping[str, ValueCI]  # model -> length-controlled Elo rating
    gamma: ValueCI  # Elo points per root-mean-square normalised length difference (> 0: longer wins)
    length_scale: float  # that root mean square
    n_battles: int
    n_undefined: int
    settings: ArenaSettings
    # model -> why its length-controlled rating has no interval (the raw ratings' rules: capjudge.metrics.arena.
    # ratings); and why gamma has none ("": it has one)
    no_interval: Mapping[str, str] = dataclasses.field(default_factory=dict)
    no_gamma_interval: str = ""

    @property
    def ranking(self) -> tuple[str, ...]:
        models = tuple(self.ratings)
        return tuple(sorted(models, key=lambda m: (-(self.ratings[m].value or 0.0), models.index(m))))


def length_differences(table: BattleTable, words: Mapping[tuple[str, str], int]) -> np.ndarray:
    """(n_items, n_pairs) normalised length difference of every battle (NaN where there is no battle); a
    battle whose caption length is unknown is refused, naming the item and the model."""
    differences = np.full(table.points.shape, np.nan)
    for p, (i, j) in enumerate(table.pairs):
        for row in np.flatnonzero(np.isfinite(table.points[:, p])):
            item = table.items[row]
            a, b = (_words(words, item, table.models[k]) for k in (i, j))
            differences[row, p] = (a - b) / (a + b) if a + b > 0 else 0.0
    return differences


def _words(words: Mapping[tuple[str, str], int], item: str, model: str) -> int:
    count = words.get((item, model))
    if count is None:
        raise ArenaError(f"item {item!r}, model {model!r}: no caption length (its caption is not logged)")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ArenaError(f"item {item!r}, model {model!r}: word count {count!r} is not a whole number >= 0")
    return int(count)


def style_controlled(table: BattleTable, words: Mapping[tuple[str, str], int],
                     settings: ArenaSettings = ArenaSettings()) -> StyleControlled:
    differences = length_differences(table, words)
    item_of, pair_of = np.nonzero(np.isfinite(table.points))
    d = differences[item_of, pair_of]
    scale = float(np.sqrt(np.mean(d**2))) if d.size else 0.0
    if scale == 0.0:
        raise ArenaError("no battle's two captions differ in length, so a length coefficient is undefined")
    first = np.array([table.pairs[p][0] for p in pair_of], dtype=np.int64)
    second = np.array([table.pairs[p][1] for p in pair_of], dtype=np.int64)
    points = table.points[item_of, pair_of]
    n_models = len(table.models)
    n_items = int(np.isfinite(table.points).any(axis=1).sum())
    design = design_matrix(BattleRows(first, second, points, (d / scale)[:, None]), n_models)
    _check_identified(table, n_items, design[:, :n_models], d, first, second, points)
    estimate = fit_strengths(design, points, np.ones(points.size))
    draws, n_undefined = [], 0
    if settings.n_resamples >= 2:
        for counts in count_blocks(len(table.items), settings.n_resamples, settings.seed):
            weights = counts[:, item_of]
            fought = np.stack([np.bincount(first, row, n_models) + np.bincount(second, row, n_models) for row in weights])
            defined = (fought > 0).all(axis=1)
            n_undefined += int((~defined).sum())
            if defined.any():
                draws.append(fit_strengths_many(design, points, weights[defined], estimate))
    if settings.n_resamples >= 2 and n_undefined > MAX_UNDEFINED_SHARE * settings.n_resamples:
        raise LengthNotIdentified(
            f"the length effect is not identified: {n_undefined} of {settings.n_resamples} resamples leave a model "
            f"without a battle (more than {MAX_UNDEFINED_SHARE:.0%}); no length effect is claimed")
    sample = np.concatenate(draws) if draws else np.empty((0, n_models + 1))
    ratings = elo(estimate[:n_models])
    resampled = elo(sample[:, :n_models]) if sample.size else np.empty((0, n_models))
    # The raw ratings' rules for when a bootstrap interval claims nothing, for the controlled ones and gamma too.
    no_interval = no_interval_reasons(table, n_items)
    intervals = {model: ValueCI(float(ratings[m])) if model in no_interval else
                 percentile_ci(float(ratings[m]), resampled[:, m], settings.confidence)
                 for m, model in enumerate(table.models)}
    drop_zero_width(intervals, no_interval)
    gamma = {"gamma": percentile_ci(float(ELO_PER_LOGIT * estimate[-1]), ELO_PER_LOGIT * sample[:, -1], settings.confidence)}
    gamma_reason: dict[str, str] = {}  # its own: a model may be named "gamma"
    drop_zero_width(gamma, gamma_reason)
    return StyleControlled(
        ratings=intervals, gamma=gamma["gamma"], length_scale=scale, n_battles=int(points.size),
        n_undefined=n_undefined, settings=settings, no_interval=no_interval,
        no_gamma_interval=gamma_reason.get("gamma", ""),
    )


def _check_identified(table: BattleTable, n_items: int, model_columns: np.ndarray, d: np.ndarray,
                      first: np.ndarray, second: np.ndarray, points: np.ndarray) -> None:
    """Raise `LengthNotIdentified` where the battles cannot separate length from the models (module docstring).

    A model that won (lost) every battle has an infinite strength that explains those battles whatever gamma is,
    so only the battles among the other models can measure gamma; peeled off in turn (a model may win every
    battle once the first is gone), what is left must hold battles whose length differences the models alone do
    not fix."""
    claim = "no length effect is claimed"
    too_few = too_few_units(n_items, "item")
    if too_few:
        raise LengthNotIdentified(f"the length effect is not identified: battles {too_few}; {claim}")
    left = np.ones(points.size, dtype=bool)
    peeled: dict[str, str] = {}
    while left.any():
        decided = {}
        for m in np.unique(np.concatenate([first[left], second[left]])):
            won = np.concatenate([points[left & (first == m)], 1.0 - points[left & (second == m)]])
            if (won == 1.0).all() or (won == 0.0).all():
                decided[int(m)] = "won" if (won == 1.0).all() else "lost"
        if not decided:
            break
        peeled.update({table.models[m]: verdict for m, verdict in decided.items()})
        left &= ~np.isin(first, list(decided)) & ~np.isin(second, list(decided))
    if not left.any():
        # In peeling order: a model listed later won or lost all of its battles against the models still left.
        who = ", ".join(f"{model!r} {verdict} all of its battles" for model, verdict in peeled.items())
        raise LengthNotIdentified(f"the length effect is not identified: every battle is decided by the models "
                                  f"({who}), so none can measure length; {claim}")
    columns, rest = model_columns[left], d[left]
    coefficients = np.linalg.lstsq(columns, rest, rcond=None)[0]
    if np.linalg.norm(rest - columns @ coefficients) <= _COLLINEAR_RESIDUAL * np.linalg.norm(rest):
        raise LengthNotIdentified("the length effect is not identified: every battle's length difference is set by "
                                  f"its two models (length moves with the models); {claim}")

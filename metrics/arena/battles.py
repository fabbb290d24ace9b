"""Battles as one table: for every item and every pair of models, the points the pair's first model took.

A `BattleTable` holds models (in the order given), items (sorted), the pairs (i < j, model indices) and
`points[item, pair]`: 1 the pair's first model won on that item, 0 it lost, 0.5 a tie, NaN no battle (one of
the two has no value there). Whatever decides the battles (pointwise scores here, pairwise verdicts in
`position_bias`), the ratings, the bootstrap and the style control read only this table.

From pointwise scores (`score_battles`): every pair of models on every item both have a score for is a battle
decided by the score; a difference within `margin` (default 0: only equal scores) is a tie.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from capjudge.metrics.arena.errors import ArenaError


@dataclass(frozen=True)
class BattleTable:
    models: tuple[str, ...]
    items: tuple[str, ...]
    pairs: tuple[tuple[int, int], ...]  # (i, j), i < j, into models
    points: np.ndarray  # (n_items, n_pairs): the pair's first model's points; NaN = no battle

    @property
    def n_battles(self) -> int:
        return int(np.isfinite(self.points).sum())

    def battles_of(self, model: str) -> int:
        index = self.models.index(model)
        involved = [p for p, pair in enumerate(self.pairs) if index in pair]
        return int(np.isfinite(self.points[:, involved]).sum())


def model_pairs(n_models: int) -> tuple[tuple[int, int], ...]:
    return tuple(combinations(range(n_models), 2))


def check_models(models: Sequence[str], what: str) -> None:
    """At least two models, each named once."""
    if len(models) < 2:
        named = f" ({models[0]!r})" if models else ""
        raise ArenaError(f"{what}: an arena needs at least two models, got {len(models)}{named}")
    seen: set[str] = set()
    for model in models:
        if model in seen:
            raise ArenaError(f"{what}: model {model!r} is given twice")
        seen.add(model)


def check_margin(margin: float) -> float:
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin < 0:
        raise ArenaError(f"tie margin must be a finite number >= 0, got {margin!r}")
    return float(margin)


def score_battles(scores: Mapping[str, Mapping[str, float]], *, margin: float = 0.0,
                  higher_is_better: bool = True, what: str = "scores") -> BattleTable:
    """Battles decided by each item's scores: `scores[model][item]` (an item a model has no score for is left
    out of its battles). A score that is not a finite number is refused, naming the model and the item."""
    margin = check_margin(margin)
    models = tuple(scores)
    check_models(models, what)
    items = tuple(sorted({str(item) for per_model in scores.values() for item in per_model}))
    position = {item: row for row, item in enumerate(items)}
    values = np.full((len(items), len(models)), np.nan)
    for column, model in enumerate(models):
        for item, value in scores[model].items():
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
                    or not math.isfinite(float(value)):
                raise ArenaError(f"{what}: model {model!r}, item {item!r}: score {value!r} is not a finite number")
            values[position[str(item)], column] = float(value)
    sign = 1.0 if higher_is_better else -1.0
    pairs = model_pairs(len(models))
    points = np.full((len(items), len(pairs)), np.nan)
    for p, (i, j) in enumerate(pairs):
        difference = sign * (values[:, i] - values[:, j])
        both = np.isfinite(difference)
        points[both, p] = np.where(difference[both] > margin, 1.0, np.where(difference[both] < -margin, 0.0, 0.5))
    table = BattleTable(models, items, pairs, points)
    check_connected(table, what)
    return table


def check_connected(table: BattleTable, what: str) -> None:
    """Ratings compare models only through chains of battles: every model must be linked to every other."""
    if table.n_battles == 0:
        raise ArenaError(f"{what}: no item is scored for two models, so there is no battle: "
                         f"the models {list(table.models)} share no items")
    fought = [p for p in range(len(table.pairs)) if np.isfinite(table.points[:, p]).any()]
    rows = [table.pairs[p][0] for p in fought]
    columns = [table.pairs[p][1] for p in fought]
    graph = coo_matrix((np.ones(len(fought)), (rows, columns)), shape=(len(table.models),) * 2)
    n_groups, group = connected_components(graph, directed=False)
    if n_groups > 1:
        groups = [[m for m, g in zip(table.models, group) if g == k] for k in range(n_groups)]
        raise ArenaError(f"{what}: no battle links {' and '.join(str(g) for g in groups)} (no shared items "
                         f"between these groups of models), so their ratings are not comparable")


def win_rates(table: BattleTable) -> dict[tuple[str, str], float | None]:
    """(a, b) -> a's share of the points against b over their battles (ties half); None: they never met."""
    rates: dict[tuple[str, str], float | None] = {}
    for p, (i, j) in enumerate(table.pairs):
        fought = table.points[:, p][np.isfinite(table.points[:, p])]
        share = float(fought.mean()) if fought.size else None
        rates[(table.models[i], table.models[j])] = share
        rates[(table.models[j], table.models[i])] = None if share is None else 1.0 - share
    return rates

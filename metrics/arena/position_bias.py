"""Position bias of a pairwise judge asked every pair in both orders, and the battles its verdicts make.

Input, per judge (or panel member): for each item and pair of models, the verdict with the pair's `first`
model's caption shown first (`forward`) and with the `second` model's shown first (`backward`), each 'A'
(the caption shown first won), 'B' (the one shown second won), 'tie', or None (no verdict: the reply failed).

In positions, a pair of verdicts is (forward, backward). Following "Judging the Judges" (Shi et al., arXiv
2406.07791, and its published analysis code):
- consistent: (A, B), (B, A), (tie, tie): the same caption (or a tie) wins in both orders;
- primacy-preferred: (A, A), (A, tie), (tie, A): the order moved the verdict toward the first position;
- recency-preferred: (B, B), (B, tie), (tie, B): toward the second.
Position consistency = consistent / valid pairs. Preference fairness: the paper's raw score is
recency x recency share - primacy x primacy share (shares of the inconsistent pairs), which equals recency -
primacy, min-max scaled by the most extreme score possible (every pair inconsistent toward one side: -n or
+n), i.e. PF = (recency - primacy) / n, in [-1, 1]: -1 a judge that always prefers the first position, +1
the second, 0 no net preference. Here n counts the pairs with both verdicts (a failed reply is counted
apart, not as a preference). Order-flipped: (A, A) or (B, B), the winner itself reverses with the order.
Each with an item-clustered bootstrap interval (an item's pairs resampled together).

For the ranking, a consistent pair is a battle won as both orders say (a tie is half a win each); every
inconsistent pair is a tie, a position-inconsistent tie, counted (`PositionBias.inconsistent_ties`); a pair
with a failed verdict is no battle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from capjudge.metrics.arena.battles import BattleTable, check_connected, check_models, model_pairs
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.ratings import ArenaSettings
from capjudge.metrics.arena.resampling import ratio_ci
from capjudge.metrics.statistics.small_samples import ZERO_WIDTH_REASON, under_rule
from capjudge.metrics.statistics.value_ci import ValueCI

VERDICTS = ("A", "B", "tie")
_CONSISTENT = {("A", "B"): 1.0, ("B", "A"): 0.0, ("tie", "tie"): 0.5}  # -> the first model's points
_PRIMACY = {("A", "A"), ("A", "tie"), ("tie", "A")}
_RECENCY = {("B", "B"), ("B", "tie"), ("tie", "B")}
_FLIPPED = {("A", "A"), ("B", "B")}


@dataclass(frozen=True)
class OrderedVerdicts:
    """One pair of one item, judged in both orders."""

    item: str
    first: str  # the model whose caption is shown first in `forward`
    second: str
    forward: str | None  # first's caption shown first: 'A' = first's caption won
    backward: str | None  # second's caption shown first: 'A' = second's caption won

    @property
    def positions(self) -> tuple[str, str] | None:
        return None if self.forward is None or self.backward is None else (self.forward, self.backward)


@dataclass(frozen=True)
class PositionBias:
    judge: str
    consistency: ValueCI  # share of valid pairs with the same verdict in both orders
    fairness: ValueCI  # (recency - primacy) / valid, in [-1, 1]; < 0 prefers the first position
    flipped: ValueCI  # share of valid pairs whose winner reverses with the order
    n_pairs: int
    n_failed: int  # pairs with a failed verdict in either order
    n_consistent: int
    n_primacy: int
    n_recency: int
    n_flipped: int
    # "consistency" / "fairness" / "flipped" -> why that share has no interval (fewer than two items with a pair
    # judged in both orders: an item bootstrap of one item resamples nothing)
    no_interval: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def n_valid(self) -> int:
        return self.n_pairs - self.n_failed

    @property
    def inconsistent_ties(self) -> int:
        """Pairs the ranking counts as a tie because their verdict changed with the order."""
        return self.n_primacy + self.n_recency


def check_verdicts(verdicts: Sequence[OrderedVerdicts], judge: str) -> None:
    seen: set[tuple[str, frozenset[str]]] = set()
    for verdict in verdicts:
        where = f"judge {judge!r}, item {verdict.item!r}, pair {verdict.first!r} vs {verdict.second!r}"
        if verdict.first == verdict.second:
            raise ArenaError(f"{where}: a model cannot battle itself")
        for order, value in (("forward", verdict.forward), ("backward", verdict.backward)):
            if value is not None and value not in VERDICTS:
                raise ArenaError(f"{where}: {order} verdict {value!r} is not one of {VERDICTS} or none")
        key = (verdict.item, frozenset((verdict.first, verdict.second)))
        if key in seen:
            raise ArenaError(f"{where}: the pair is given twice for this item")
        seen.add(key)


def position_bias(verdicts: Sequence[OrderedVerdicts], judge: str = "judge",
                  settings: ArenaSettings = ArenaSettings()) -> PositionBias:
    check_verdicts(verdicts, judge)
    if not verdicts:
        raise ArenaError(f"judge {judge!r}: no pairs judged in both orders")
    items = sorted({v.item for v in verdicts})
    index = {item: k for k, item in enumerate(items)}
    # Per item: valid, consistent, primacy, recency, flipped.
    per_item = np.zeros((len(items), 5))
    for verdict in verdicts:
        positions = verdict.positions
        if positions is None:
            continue
        per_item[index[verdict.item]] += [1, positions in _CONSISTENT, positions in _PRIMACY,
                                          positions in _RECENCY, positions in _FLIPPED]
    valid, consistent, primacy, recency, flipped = per_item.T

    units = int((valid > 0).sum())
    no_interval: dict[str, str] = {}

    def interval(name: str, numerator: np.ndarray) -> ValueCI:
        figure = ratio_ci(numerator, valid, settings.n_resamples, settings.seed, settings.confidence)
        # The small-sample rule (capjudge.metrics.statistics.small_samples): too few items, or every resample
        # giving the same share (1.00 [1.00, 1.00]), is the value alone and the reason.
        shown, reason = under_rule(figure, units, "item")
        if reason:
            no_interval[name] = f"pairs judged in both orders {reason}" if reason != ZERO_WIDTH_REASON else reason
        return shown

    totals = per_item.sum(axis=0).astype(int)
    return PositionBias(
        judge=judge, consistency=interval("consistency", consistent), fairness=interval("fairness", recency - primacy),
        flipped=interval("flipped", flipped), n_pairs=len(verdicts), n_failed=len(verdicts) - int(totals[0]),
        n_consistent=int(totals[1]), n_primacy=int(totals[2]), n_recency=int(totals[3]), n_flipped=int(totals[4]),
        no_interval=no_interval,
    )


def position_bias_by_judge(verdicts: Mapping[str, Sequence[OrderedVerdicts]],
                           settings: ArenaSettings = ArenaSettings()) -> dict[str, PositionBias]:
    """Each judge's (each panel member's) position bias."""
    return {judge: position_bias(given, judge, settings) for judge, given in verdicts.items()}


def verdict_battles(verdicts: Sequence[OrderedVerdicts], judge: str = "judge",
                    models: Sequence[str] | None = None) -> BattleTable:
    """The battles of one judge's verdicts (see the module docstring); `models` fixes their order (default:
    as they first appear)."""
    check_verdicts(verdicts, judge)
    names = tuple(models) if models is not None else tuple(dict.fromkeys(
        name for v in verdicts for name in (v.first, v.second)))
    check_models(names, f"judge {judge!r}")
    column = {name: k for k, name in enumerate(names)}
    pairs = model_pairs(len(names))
    pair_index = {pair: p for p, pair in enumerate(pairs)}
    items = tuple(sorted({v.item for v in verdicts}))
    row = {item: k for k, item in enumerate(items)}
    points = np.full((len(items), len(pairs)), np.nan)
    for verdict in verdicts:
        for name in (verdict.first, verdict.second):
            if name not in column:
                raise ArenaError(f"judge {judge!r}, item {verdict.item!r}: model {name!r} is not one of {list(names)}")
        positions = verdict.positions
        if positions is None:
            continue
        first_points = _CONSISTENT.get(positions, 0.5)
        i, j = column[verdict.first], column[verdict.second]
        p = pair_index[(min(i, j), max(i, j))]
        points[row[verdict.item], p] = first_points if i < j else 1.0 - first_points
    table = BattleTable(names, items, pairs, points)
    if verdicts and table.n_battles == 0:  # check_connected would blame the items: the verdicts are what is missing
        raise ArenaError(f"judge {judge!r}: no battle: every one of its {len(verdicts):,} pairs has a failed order "
                         "(see the failures in the verdict file or its page)")
    check_connected(table, f"judge {judge!r}")
    return table


def both_orders_verdict(forward: str | None, backward: str | None) -> str | None:
    """One pair's verdict for the ranking, in caption terms ('A': the pair's first caption won, 'B': the
    second, 'tie'), from its two orders: a position-consistent verdict as both say, an inconsistent one a
    tie, and None when either order has no verdict."""
    if forward is None or backward is None:
        return None
    for value in (forward, backward):
        if value not in VERDICTS:
            raise ArenaError(f"verdict {value!r} is not one of {VERDICTS} or none")
    points = _CONSISTENT.get((forward, backward), 0.5)
    return {1.0: "A", 0.0: "B", 0.5: "tie"}[points]

"""The arena's statistics from a verdict file (`capjudge arena`'s OUT/arena_<task>.jsonl, read by
`capjudge.judges.pairwise.record.read_arena_file`): per judge (or panel member) and per rubric dimension,
overall first, its position bias and its Bradley-Terry ranking, and the length-controlled ranking of the
overall verdicts beside the raw one.

Glue only: every statistic is `capjudge.metrics.arena`'s. A record's two orders become one `OrderedVerdicts`
(`position_bias`'s input: verdicts by POSITION, 'A' the caption shown first); the record keeps verdicts about
the MODELS ('A' model_a), so the b_first order is swapped back to positions here. The ranking's battles are
`verdict_battles`': a position-inconsistent pair is a tie (counted), a pair with a failed order no battle.
The length-controlled fit takes each caption's words from the record's `length` field.

The resampling unit is the record's item (an item's pairs drawn together): `position_bias` and the battle
table both key pairs by item, and two pairs of one model pair in one clip (VATEX-EVAL's candidates) would
collide under the clip.

What cannot be computed for a judge (every battle of some model failed, no caption differs in length) is an
ArenaError's one line kept as the reason in place of that figure; the rest of the report stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from capjudge.judges.pairwise.record import ArenaHeader, PairRecord, candidate_index
from capjudge.judges.pairwise.verdicts import OVERALL
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.position_bias import (
    OrderedVerdicts,
    PositionBias,
    position_bias,
    verdict_battles,
)
from capjudge.metrics.arena.ratings import ArenaRatings, ArenaSettings, arena_ratings
from capjudge.metrics.arena.style_control import StyleControlled, style_controlled

# `capjudge arena --candidates`: "candidate 3" of one clip and of another are different captions by different
# models, so a fit across clips would rank positions in a list, not models. The agreement with the raters'
# preferences (`capjudge vatex --arena-verdicts`) is what such a file measures; its position bias stands.
NO_CANDIDATE_RANKING = ("the pairs are a task's rated candidates (--candidates): a candidate is a model only within "
                        "its clip, so there is no ranking across clips; the agreement with the raters' preferences "
                        "(capjudge vatex --arena-verdicts) is this file's result")
_POSITIONAL = {"A": "B", "B": "A", "tie": "tie"}  # b_first's model verdict -> the position it names


@dataclass(frozen=True)
class DimensionFigures:
    """One judge's figures on one rubric dimension."""

    dimension: str
    bias: PositionBias
    ratings: ArenaRatings | None  # None: `no_ratings` says why
    no_ratings: str = ""


@dataclass(frozen=True)
class MemberReport:
    """One judge's (one panel member's) position bias and rankings."""

    member: str
    judge_model: str
    pairs: int
    failed_orders: int
    dimensions: tuple[DimensionFigures, ...]  # "overall" first, then the rubric's in its order
    length_controlled: StyleControlled | None  # of the overall verdicts; None: `no_length_control` says why
    no_length_control: str = ""

    @property
    def overall(self) -> DimensionFigures:
        return self.dimensions[0]


@dataclass(frozen=True)
class VerdictReport:
    task: str
    judge: str
    command: str
    stamp: str  # the verdict file's: what its report files carry, so a rerun replaces its own only
    verdict_file: str  # the file's name
    models: tuple[str, ...]  # as they first appear in the records
    n_items: int
    n_pairs: int  # per judge: (item, model pair) combinations
    settings: ArenaSettings
    members: tuple[MemberReport, ...]


def ordered_verdicts(record: PairRecord, dimension: str) -> OrderedVerdicts:
    """A record's two orders on `dimension`, by position (a failed order: None, never a tie)."""
    forward = record.a_first.verdicts[dimension] if record.a_first.verdicts is not None else None
    backward = _POSITIONAL[record.b_first.verdicts[dimension]] if record.b_first.verdicts is not None else None
    return OrderedVerdicts(record.item_id, record.model_a, record.model_b, forward, backward)


def caption_words(records: Sequence[PairRecord]) -> dict[tuple[str, str], int]:
    """(item, model) -> its caption's words, as the records' `length` field says."""
    words: dict[tuple[str, str], int] = {}
    for record in records:
        words[(record.item_id, record.model_a)] = record.length.get("words_a")  # type: ignore[assignment]
        words[(record.item_id, record.model_b)] = record.length.get("words_b")  # type: ignore[assignment]
    return words


def verdict_report(header: ArenaHeader, records: Sequence[PairRecord], file_name: str,
                   settings: ArenaSettings = ArenaSettings()) -> VerdictReport:
    models = tuple(dict.fromkeys(name for r in records for name in (r.model_a, r.model_b)))
    members = tuple(dict.fromkeys(record.member for record in records))
    reports = tuple(_member(member, [r for r in records if r.member == member], models, settings)
                    for member in members)
    return VerdictReport(
        task=header.task, judge=header.judge, command=header.command, stamp=header.stamp, verdict_file=file_name,
        models=models, n_items=len({r.item_id for r in records}),
        n_pairs=len({(r.item_id, r.model_a, r.model_b) for r in records}), settings=settings, members=reports)


def _member(member: str, records: list[PairRecord], models: tuple[str, ...],
            settings: ArenaSettings) -> MemberReport:
    dimensions = (OVERALL, *(d for d in records[0].dimensions if d != OVERALL))
    figures: list[DimensionFigures] = []
    tables: list[tuple[np.ndarray, ArenaRatings]] = []
    overall_table = None
    for dimension in dimensions:
        verdicts = [ordered_verdicts(record, dimension) for record in records]
        bias = position_bias(verdicts, member, settings)
        if all(candidate_index(model) is not None for model in models):
            figures.append(DimensionFigures(dimension, bias, None, NO_CANDIDATE_RANKING))
            continue
        try:
            table = verdict_battles(verdicts, member, models)
        except ArenaError as problem:
            figures.append(DimensionFigures(dimension, bias, None, str(problem)))
            continue
        if dimension == OVERALL:
            overall_table = table
        # A dimension whose battles are the overall's (a judge that gives one verdict throughout) has the same
        # fit: the same table in, the same ratings out, without another bootstrap.
        ratings = next((done for points, done in tables if np.array_equal(points, table.points, equal_nan=True)),
                       None) or arena_ratings(table, settings)
        tables.append((table.points, ratings))
        figures.append(DimensionFigures(dimension, bias, ratings))
    controlled, no_control = None, ""
    if all(candidate_index(model) is not None for model in models):
        no_control = NO_CANDIDATE_RANKING
    elif overall_table is None:
        no_control = figures[0].no_ratings
    else:
        try:
            controlled = style_controlled(overall_table, caption_words(records), settings)
        except ArenaError as problem:
            no_control = str(problem)
    orders = [order for record in records for order in (record.a_first, record.b_first)]
    return MemberReport(member, records[0].judge_model, len(records), sum(not order.ok for order in orders),
                        tuple(figures), controlled, no_control)

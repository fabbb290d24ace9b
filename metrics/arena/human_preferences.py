"""Agreement with humans' own preferences, on human-rated sets whose candidates share a clip (VATEX-EVAL: 6
candidates per clip, each rated by 3 raters; `capjudge.judges.datasets.vatex_eval` reads and checks the file).

Human preferences: every pair of candidates of one clip whose raters' mean ratings differ is a preference
for the higher mean (a pair the raters' mean ties is no preference, and is counted). On the same pairs:

- a pairwise judge's agreement: its verdict (after both orders, `position_bias.both_orders_verdict`) names
  the humans' preferred caption. Reported with ties (every judged pair counts, a judge's tie as not agreeing)
  and without ties (only pairs the judge did not tie), as CapArena reports both;
- a pointwise scorer's concordance (the judge's scores, or any baseline metric's): the same two figures for
  the order of its two scores (equal scores are its tie);
- the raters' own ceiling: each rater against the mean of the other raters, on the pairs where that mean does
  not tie, pooled over raters (with ties: the rater's own tie counts as not agreeing). One rater against two
  is what a judge against three is compared with: the ceiling a scorer with the raters' own noise reaches.

A pair with no verdict (a failed reply, a pair not sent) or no score is left out and counted. Intervals: the
clip-clustered bootstrap (clips resampled, each clip's pairs together; `resampling`). `sample_pairs` bounds a
pairwise judge's cost to K pairs per clip, seeded per clip (a clip's sample does not depend on which other
clips are in the set).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from capjudge.judges.datasets.vatex_eval import VatexCandidate
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.ratings import ArenaSettings
from capjudge.metrics.arena.resampling import ratio_ci
from capjudge.metrics.statistics.clusters import Clusters
from capjudge.metrics.statistics.small_samples import ZERO_WIDTH_REASON, under_rule
from capjudge.metrics.statistics.value_ci import ValueCI

PairKey = tuple[str, int, int]  # (clip id, first candidate index, second candidate index), first < second


@dataclass(frozen=True)
class HumanPair:
    clip: str
    first: int  # candidate index within the clip
    second: int
    first_position: int  # positions in the candidate sequence the pairs were made from
    second_position: int
    ratings_first: tuple[int, ...]
    ratings_second: tuple[int, ...]

    @property
    def key(self) -> PairKey:
        return (self.clip, self.first, self.second)

    @property
    def preferred(self) -> int:
        """+1: the raters' mean prefers the first candidate; -1: the second."""
        return 1 if mean_rating(self.ratings_first) > mean_rating(self.ratings_second) else -1


def mean_rating(ratings: Sequence[int]) -> float:
    """The raters' mean: np.mean's value for integer ratings (an exact sum, one rounding), without its per-call
    cost, which tens of thousands of pairs per scorer row made a tenth of `capjudge vatex`."""
    return sum(ratings) / len(ratings)


@dataclass(frozen=True)
class HumanPairs:
    pairs: tuple[HumanPair, ...]
    n_same_clip_pairs: int  # every same-clip pair, preferences and ties
    n_tied: int  # pairs the raters' mean ties: no preference


@dataclass(frozen=True)
class Agreement:
    scorer: str
    with_ties: ValueCI  # agreeing / pairs it has a verdict or score for
    without_ties: ValueCI  # agreeing / those pairs it did not tie
    n_pairs: int  # the human preferences it was compared on
    n_scored: int
    n_ties: int
    n_missing: int  # pairs with no verdict or no score
    no_interval: str = ""  # why the agreements have no interval ("": they have one where resamples were drawn)


def human_pairs(candidates: Sequence[VatexCandidate]) -> HumanPairs:
    """Every same-clip pair whose raters' mean ratings differ, in file order."""
    by_clip: dict[str, list[int]] = {}
    for position, candidate in enumerate(candidates):
        by_clip.setdefault(candidate.clip_id, []).append(position)
    found, total, tied = [], 0, 0
    for positions in by_clip.values():
        for a, b in combinations(positions, 2):
            first, second = candidates[a], candidates[b]
            if first.candidate_index > second.candidate_index:
                a, b, first, second = b, a, second, first
            total += 1
            if mean_rating(first.ratings) == mean_rating(second.ratings):
                tied += 1
                continue
            found.append(HumanPair(first.clip_id, first.candidate_index, second.candidate_index, a, b,
                                   tuple(first.ratings), tuple(second.ratings)))
    if not found:
        raise ArenaError(f"no human preference: {total} same-clip pairs, every one tied by the raters' mean")
    return HumanPairs(tuple(found), total, tied)


def sample_pairs(pairs: HumanPairs, per_clip: int, seed: int = 0) -> HumanPairs:
    """At most `per_clip` of each clip's preferences, drawn without replacement by a generator seeded from
    (seed, clip id)."""
    if isinstance(per_clip, bool) or not isinstance(per_clip, int) or per_clip < 1:
        raise ArenaError(f"pairs per clip must be a whole number >= 1, got {per_clip!r}")
    by_clip: dict[str, list[HumanPair]] = {}
    for pair in pairs.pairs:
        by_clip.setdefault(pair.clip, []).append(pair)
    kept = []
    for clip, members in by_clip.items():
        if len(members) <= per_clip:
            kept.extend(members)
            continue
        digest = hashlib.blake2b(f"{seed}\0{clip}".encode(), digest_size=8).digest()
        chosen = np.random.default_rng(int.from_bytes(digest, "big")).choice(len(members), per_clip, replace=False)
        kept.extend(members[k] for k in sorted(chosen))
    return HumanPairs(tuple(kept), pairs.n_same_clip_pairs, pairs.n_tied)


def verdict_agreement(pairs: HumanPairs, verdicts: Mapping[PairKey, str | None], scorer: str,
                      settings: ArenaSettings = ArenaSettings()) -> Agreement:
    """A pairwise judge's verdicts, keyed (clip, first, second) with 'A' = the first candidate won, 'B' the
    second, 'tie', None no verdict (a key absent: not judged, counted as missing)."""
    predicted = np.full(len(pairs.pairs), np.nan)
    for k, pair in enumerate(pairs.pairs):
        verdict = verdicts.get(pair.key)
        if verdict is None:
            continue
        if verdict not in ("A", "B", "tie"):
            raise ArenaError(f"{scorer}: clip {pair.clip!r}, candidates {pair.first} vs {pair.second}: verdict "
                             f"{verdict!r} is not A, B or tie")
        predicted[k] = {"A": 1.0, "B": -1.0, "tie": 0.0}[verdict]
    return _agreement(pairs, predicted, scorer, settings)


def score_agreement(pairs: HumanPairs, values: Sequence[float] | np.ndarray, scorer: str,
                    settings: ArenaSettings = ArenaSettings()) -> Agreement:
    """A pointwise scorer's concordance: `values` one per candidate of the sequence the pairs were made from
    (NaN: no score for that candidate, its pairs counted as missing; an infinity is refused)."""
    vector = np.asarray(values, dtype=np.float64)
    if np.isinf(vector).any():
        raise ArenaError(f"{scorer}: candidate {int(np.flatnonzero(np.isinf(vector))[0])}: an infinite score")
    first = np.array([p.first_position for p in pairs.pairs], dtype=np.int64)
    second = np.array([p.second_position for p in pairs.pairs], dtype=np.int64)
    if vector.ndim != 1 or (first.size and max(first.max(), second.max()) >= vector.size):
        raise ArenaError(f"{scorer}: {vector.size} scores do not cover the {1 + int(max(first.max(), second.max()))} "
                         "candidates the pairs were made from")
    return _agreement(pairs, np.sign(vector[first] - vector[second]), scorer, settings)


def rater_ceiling(pairs: HumanPairs, settings: ArenaSettings = ArenaSettings()) -> Agreement:
    """Each rater against the mean of the others, pooled over raters (see the module docstring)."""
    first = np.array([p.ratings_first for p in pairs.pairs], dtype=np.float64)
    second = np.array([p.ratings_second for p in pairs.pairs], dtype=np.float64)
    n_raters = first.shape[1]
    if n_raters < 2:
        raise ArenaError(f"a leave-one-out ceiling needs at least two raters per candidate, got {n_raters}")
    agree = np.zeros(len(pairs.pairs))
    counted = np.zeros(len(pairs.pairs))
    decided = np.zeros(len(pairs.pairs))
    for rater in range(n_raters):
        others = [r for r in range(n_raters) if r != rater]
        reference = np.sign(first[:, others].mean(axis=1) - second[:, others].mean(axis=1))
        own = np.sign(first[:, rater] - second[:, rater])
        defined = reference != 0
        counted += defined
        decided += defined & (own != 0)
        agree += defined & (own == reference)
    ties = int((counted - decided).sum())
    return _from_counts(pairs, "raters (each vs the mean of the others)", agree, counted, decided,
                        len(pairs.pairs), ties, 0, settings)


def _agreement(pairs: HumanPairs, predicted: np.ndarray, scorer: str, settings: ArenaSettings) -> Agreement:
    preferred = np.array([p.preferred for p in pairs.pairs], dtype=np.float64)
    scored = np.isfinite(predicted)
    decided = scored & (predicted != 0)
    agree = decided & (predicted == preferred)
    return _from_counts(pairs, scorer, agree.astype(float), scored.astype(float), decided.astype(float),
                        len(pairs.pairs), int((scored & ~decided).sum()), int((~scored).sum()), settings)


def _from_counts(pairs: HumanPairs, scorer: str, agree: np.ndarray, counted: np.ndarray, decided: np.ndarray,
                 n_pairs: int, ties: int, missing: int, settings: ArenaSettings) -> Agreement:
    clips = Clusters.of([p.clip for p in pairs.pairs])
    per_clip = [clips.sums(v) for v in (agree, counted, decided)]

    # The small-sample rule (capjudge.metrics.statistics.small_samples): pairs of too few clips, or a share every
    # clip resample gives alike (100.0 [100.0, 100.0]), is the value alone, and it is said why.
    units = int((per_clip[1] > 0).sum())
    reasons: list[str] = []

    def interval(denominator: np.ndarray) -> ValueCI:
        figure = ratio_ci(per_clip[0], denominator, settings.n_resamples, settings.seed, settings.confidence)
        shown, reason = under_rule(figure, units, "clip")
        said = reason if reason in ("", ZERO_WIDTH_REASON) else f"pairs {reason}"
        if said and said not in reasons:
            reasons.append(said)
        return shown

    overall, decided_only = interval(per_clip[1]), interval(per_clip[2])
    no_interval = "; ".join(reasons)

    return Agreement(scorer, overall, decided_only, n_pairs,
                     int(round(float(counted.sum()))), ties, missing, no_interval)


def agreement_table(rows: Sequence[Agreement], digits: int = 1) -> str:
    """Markdown: one row per scorer, agreement with and without ties in %, with intervals."""
    def cell(value: ValueCI) -> str:
        if not value.measurable:
            return "n/a"
        assert value.value is not None
        interval = (f" [{100 * value.ci_low:.{digits}f}, {100 * value.ci_high:.{digits}f}]"
                    if value.ci_low is not None and value.ci_high is not None else "")
        return f"{100 * value.value:.{digits}f}{interval}"

    lines = ["| scorer | agreement, ties count (%) | agreement without ties (%) | pairs | scored | ties | missing |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r.scorer} | {cell(r.with_ties)} | {cell(r.without_ties)} | {r.n_pairs} | {r.n_scored} | "
              f"{r.n_ties} | {r.n_missing} |" for r in rows]
    return "\n".join(lines)

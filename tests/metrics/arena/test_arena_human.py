"""Agreement with humans' own preferences (capjudge.metrics.arena.human_preferences): a small set computed by
hand (pairwise verdicts with a tie and a failed reply, a pointwise scorer with equal and missing scores, the
raters' leave-one-out ceiling), then the real VATEX-EVAL file on a seeded subset of clips: the preferences and
a scorer's concordance against a direct count, the clip-clustered interval against materialised clip
resamples, and the seeded pairs-per-clip sampler."""

from __future__ import annotations

import numpy as np
import pytest
from capjudge.judges.datasets.vatex_eval import VatexCandidate, load_vatex_eval
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.human_preferences import (
    HumanPairs,
    agreement_table,
    human_pairs,
    rater_ceiling,
    sample_pairs,
    score_agreement,
    verdict_agreement,
)
from capjudge.metrics.arena.ratings import ArenaSettings
from capjudge.metrics.statistics.bootstrap import draw_item_indices
from tests.support.paths import shared_path

NO_CI = ArenaSettings(n_resamples=0)


def _candidates(clip: str, ratings: list[tuple[int, int, int]]) -> list[VatexCandidate]:
    references = ("a reference",)
    return [VatexCandidate(clip, k, f"caption {clip} {k}", references, r) for k, r in enumerate(ratings)]


HAND = (_candidates("c1", [(5, 5, 4), (3, 4, 4), (4, 4, 3)])
        + _candidates("c2", [(2, 2, 2), (5, 4, 1), (1, 1, 1)]))


def test_preferences_are_the_same_clip_pairs_the_raters_mean_does_not_tie():
    pairs = human_pairs(HAND)
    assert (pairs.n_same_clip_pairs, pairs.n_tied) == (6, 1)
    assert [(p.key, p.preferred) for p in pairs.pairs] == [
        (("c1", 0, 1), 1), (("c1", 0, 2), 1), (("c2", 0, 1), -1), (("c2", 0, 2), 1), (("c2", 1, 2), 1)]


def test_a_pairwise_judges_agreement_with_and_without_ties_by_hand():
    verdicts = {("c1", 0, 1): "A", ("c1", 0, 2): "tie", ("c2", 0, 1): "A", ("c2", 0, 2): "A", ("c2", 1, 2): None}
    found = verdict_agreement(human_pairs(HAND), verdicts, "pairwise judge", NO_CI)
    assert (found.n_pairs, found.n_scored, found.n_ties, found.n_missing) == (5, 4, 1, 1)
    assert found.with_ties.value == pytest.approx(2 / 4)
    assert found.without_ties.value == pytest.approx(2 / 3)


def test_a_pointwise_scorers_concordance_by_hand():
    found = score_agreement(human_pairs(HAND), [9, 5, 9, 3, 3, np.nan], "pointwise judge", NO_CI)
    assert (found.n_scored, found.n_ties, found.n_missing) == (3, 2, 2)
    assert found.with_ties.value == pytest.approx(1 / 3)
    assert found.without_ties.value == pytest.approx(1.0)


def test_the_raters_leave_one_out_ceiling_by_hand():
    # 5 preferences x 3 raters, each against the mean of the other two: 15 comparisons, 2 of them the
    # rater's own tie (c1 0-1 rater 3, c2 1-2 rater 3), 1 disagreement (c2 0-1 rater 3): 12 agree.
    found = rater_ceiling(human_pairs(HAND), NO_CI)
    assert (found.n_scored, found.n_ties) == (15, 2)
    assert found.with_ties.value == pytest.approx(12 / 15)
    assert found.without_ties.value == pytest.approx(12 / 13)
    table = agreement_table([found])
    assert "| raters (each vs the mean of the others) | 80.0 | 92.3 | 5 | 15 | 2 | 0 |" in table


def test_hostile_agreement_inputs_are_one_line_errors():
    pairs = human_pairs(HAND)
    with pytest.raises(ArenaError, match=r"clip 'c1', candidates 0 vs 1: verdict 'first' is not A, B or tie"):
        verdict_agreement(pairs, {("c1", 0, 1): "first"}, "j", NO_CI)
    with pytest.raises(ArenaError, match="an infinite score"):
        score_agreement(pairs, [1, 2, np.inf, 1, 1, 1], "s", NO_CI)
    with pytest.raises(ArenaError, match="3 scores do not cover the 6 candidates"):
        score_agreement(pairs, [1, 2, 3], "s", NO_CI)
    with pytest.raises(ArenaError, match="every one tied"):
        human_pairs(_candidates("c3", [(3, 3, 3), (3, 3, 3)]))
    with pytest.raises(ArenaError, match="pairs per clip must be a whole number >= 1, got 0"):
        sample_pairs(pairs, 0)


@pytest.fixture(scope="module")
def vatex_subset():
    candidates = load_vatex_eval(shared_path("data", "vatex_eval", "vid_cans_score_dict.json"))
    clips = sorted({c.clip_id for c in candidates})
    chosen = set(np.random.default_rng(49).choice(clips, 150, replace=False).tolist())
    return [c for c in candidates if c.clip_id in chosen]


def test_real_vatex_eval_preferences_and_a_scorers_concordance_against_a_direct_count(vatex_subset):
    pairs = human_pairs(vatex_subset)
    assert pairs.n_same_clip_pairs == 150 * 15
    words = np.array([len(c.caption.split()) for c in vatex_subset], dtype=float)
    agree = ties = decided_pairs = 0
    preferences = 0
    by_clip: dict[str, list[VatexCandidate]] = {}
    for c in vatex_subset:
        by_clip.setdefault(c.clip_id, []).append(c)
    for members in by_clip.values():
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                human = np.sign(np.mean(members[i].ratings) - np.mean(members[j].ratings))
                if human == 0:
                    continue
                preferences += 1
                mine = np.sign(len(members[i].caption.split()) - len(members[j].caption.split()))
                ties += mine == 0
                decided_pairs += mine != 0
                agree += mine == human
    assert len(pairs.pairs) == preferences and pairs.n_tied == pairs.n_same_clip_pairs - preferences
    found = score_agreement(pairs, words, "caption length", NO_CI)
    assert found.n_ties == ties
    assert found.with_ties.value == pytest.approx(agree / preferences)
    assert found.without_ties.value == pytest.approx(agree / decided_pairs)
    ceiling = rater_ceiling(pairs, NO_CI)
    assert 0.6 < ceiling.without_ties.value < 1.0  # raters agree with each other well above chance


def test_the_clip_clustered_interval_is_the_percentile_over_materialised_clip_resamples(vatex_subset):
    pairs = human_pairs(vatex_subset)
    words = np.array([len(c.caption.split()) for c in vatex_subset], dtype=float)
    found = score_agreement(pairs, words, "caption length", ArenaSettings(n_resamples=50, seed=7))
    clips = sorted({p.clip for p in pairs.pairs})
    agrees = {p.key: np.sign(words[p.first_position] - words[p.second_position]) == p.preferred for p in pairs.pairs}
    members = {clip: [agrees[p.key] for p in pairs.pairs if p.clip == clip] for clip in clips}
    draws = []
    for row in draw_item_indices(len(clips), 50, np.random.default_rng(7)):
        drawn = [agree for k in row for agree in members[clips[k]]]  # a clip drawn twice: its pairs twice
        draws.append(sum(drawn) / len(drawn))
    assert [found.with_ties.ci_low, found.with_ties.ci_high] == pytest.approx(np.percentile(draws, [2.5, 97.5]))


def test_the_pairs_per_clip_sampler_is_seeded_bounded_and_stable_under_subsets(vatex_subset):
    pairs = human_pairs(vatex_subset)
    sampled = sample_pairs(pairs, 3, seed=5)
    per_clip: dict[str, int] = {}
    for p in sampled.pairs:
        per_clip[p.clip] = per_clip.get(p.clip, 0) + 1
    # every clip with a preference is sampled (a clip whose 15 pairs all tie has none)
    assert max(per_clip.values()) == 3 and set(per_clip) == {p.clip for p in pairs.pairs}
    assert sample_pairs(pairs, 3, seed=5) == sampled
    assert sample_pairs(pairs, 3, seed=6) != sampled
    half = HumanPairs(tuple(p for p in pairs.pairs if p.clip in set(sorted(per_clip)[:75])), 0, 0)
    assert sample_pairs(half, 3, seed=5).pairs == tuple(p for p in sampled.pairs if p.clip in set(sorted(per_clip)[:75]))


def test_an_agreement_from_the_pairs_of_one_clip_has_no_interval_and_says_why():
    # Found by an independent probe: '100.0 [100.0, 100.0]' from one pair of one clip, beside the real rows.
    verdicts = {("c1", 0, 1): "A"}  # c1's first pair only: the others are missing
    found = verdict_agreement(human_pairs(HAND), verdicts, "pairwise judge", ArenaSettings(n_resamples=200, seed=1))
    assert found.with_ties.value == 1.0 and found.with_ties.ci_low is None and found.without_ties.ci_low is None
    assert found.no_interval == "pairs from 1 clip: capjudge shows an interval from 5 clips or more"  # the small-sample rule
    both = verdict_agreement(human_pairs(HAND), {("c1", 0, 1): "A", ("c2", 0, 1): "B", ("c2", 0, 2): "A"},
                             "pairwise judge", ArenaSettings(n_resamples=200, seed=1))
    assert both.with_ties.ci_low is None  # two clips: below the small-sample rule's floor since issue #60
    assert both.no_interval == "pairs from 2 clips: capjudge shows an interval from 5 clips or more"
    # Five clips, the judge right on some and wrong on others: an interval with width, as before.
    five = sum((_candidates(f"c{k}", [(5, 5, 4), (3, 4, 4), (4, 4, 3)]) for k in range(1, 6)), [])
    verdicts = {(f"c{k}", 0, 1): "AB"[k % 2] for k in range(1, 6)} | {(f"c{k}", 0, 2): "A" for k in range(1, 6)}
    enough = verdict_agreement(human_pairs(five), verdicts, "pairwise judge", ArenaSettings(n_resamples=200, seed=1))
    assert enough.no_interval == "" and enough.with_ties.ci_low < enough.with_ties.value < enough.with_ties.ci_high

"""capjudge.metrics.sensitivity.shifts and capjudge.metrics.statistics.length_bias: against direct numpy
computations (lstsq, hand-rolled clip resamples with the same seed) and scripted judges of known behaviour
in a toy world where a caption's quality can be read off its words."""

from __future__ import annotations

import numpy as np
import pytest

from capjudge.metrics.sensitivity.perturbations import PERTURBATIONS, perturb_all
from capjudge.metrics.sensitivity.shifts import paired_shift, passes, sensitivity_shifts, verdict_of
from capjudge.metrics.statistics.bootstrap import Interval
from capjudge.metrics.statistics.length_bias import excess_length_bias, length_slope, standardised_log_length

# ---------------------------------------------------------------------------------------------------------
# The toy world: each clip shows 6 things; a caption "A x and a y ..." names some of them and some others.
# ---------------------------------------------------------------------------------------------------------

VOCAB = [f"thing{i}" for i in range(150)]
TRUTH_SIZE, N_CLIPS, PER_CLIP = 6, 45, 3


def _world(seed: int = 0) -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    rng = np.random.default_rng(seed)
    truth, captions = {}, []
    for clip in rng.permutation(N_CLIPS):  # clip ids out of order: clusters must not rely on input order
        clip_id = f"clip{clip:02d}"
        truth[clip_id] = set(rng.choice(VOCAB, TRUTH_SIZE, replace=False).tolist())
        others = [word for word in VOCAB if word not in truth[clip_id]]
        for _ in range(PER_CLIP):
            named = list(rng.choice(sorted(truth[clip_id]), rng.integers(1, TRUTH_SIZE + 1), replace=False))
            named += list(rng.choice(others, rng.integers(0, 3), replace=False))
            rng.shuffle(named)
            captions.append((clip_id, "A " + " and a ".join(named) + "."))
    return truth, captions


def _tokens(text: str) -> list[str]:
    return [token.strip(".,;").lower() for token in text.split()]


def _bigrams(tokens: list[str]) -> list[tuple[str, str]]:
    return list(zip(tokens, tokens[1:]))


class FairJudge:
    """Scores what a caption says about its clip (precision, recall, true things per word), times fluency
    (the share of its word pairs that occur in well-formed captions): nothing else."""

    def __init__(self, truth: dict[str, set[str]], captions: list[tuple[str, str]]):
        self.truth = truth
        self.known_pairs = {pair for _, caption in captions for pair in _bigrams(_tokens(caption))}

    def fluency(self, text: str) -> float:
        pairs = _bigrams(_tokens(text))
        return float(np.mean([pair in self.known_pairs for pair in pairs])) if pairs else 1.0

    def __call__(self, text: str, clip: str) -> dict[str, float]:
        tokens = _tokens(text)
        named = [token for token in tokens if token in VOCAB]
        true_named = [token for token in named if token in self.truth[clip]]
        fluency = self.fluency(text)
        return {"accuracy": fluency * (len(true_named) / len(named) if named else 0.0),
                "completeness": fluency * len(set(true_named)) / TRUTH_SIZE,
                "conciseness": fluency * min(1.0, 3.0 * len(set(true_named)) / len(tokens))}


class LengthLovingJudge(FairJudge):
    def __call__(self, text: str, clip: str) -> dict[str, float]:
        return {dim: score + 0.05 * len(text.split()) for dim, score in super().__call__(text, clip).items()}


class VideoBlindJudge(FairJudge):
    """Reads only the text: every dimension is its fluency."""

    def __call__(self, text: str, clip: str) -> dict[str, float]:
        return dict.fromkeys(("accuracy", "completeness", "conciseness"), self.fluency(text))


def _scores(judge, texts_and_clips) -> dict[str, np.ndarray]:
    rows = [judge(text, clip) for text, clip in texts_and_clips]
    return {dim: np.array([row[dim] for row in rows]) for dim in rows[0]}


def _sensitivity(judge_class, seed: int = 0):
    truth, captions = _world()
    judge = judge_class(truth, captions)
    variants = perturb_all(captions, seed)
    original = _scores(judge, [(caption, clip) for clip, caption in captions])
    perturbed = {p.name: _scores(judge, [(v.text, v.item_id) for v in variants if v.perturbation == p.name])
                 for p in PERTURBATIONS}
    results = sensitivity_shifts(original, perturbed, [clip for clip, _ in captions], PERTURBATIONS,
                                 n_resamples=1000, seed=seed)
    return {(r.perturbation, r.dimension): r for r in results}


# ---------------------------------------------------------------------------------------------------------
# Shifts
# ---------------------------------------------------------------------------------------------------------


def test_a_fair_judge_passes_every_perturbation():
    results = _sensitivity(FairJudge)
    # Truncation only speaks about completeness; every other perturbation about all three dimensions.
    assert len(results) == 4 * 3 + 1
    failed = [(key, r.verdict, r.interval) for key, r in results.items() if not r.passed]
    assert failed == []
    assert results["padding", "conciseness"].verdict == "expected direction"
    assert results["mismatch", "accuracy"].mean_shift < 0


def test_a_length_loving_judge_fails_padding():
    results = _sensitivity(LengthLovingJudge)
    assert results["padding", "conciseness"].verdict == "wrong direction"
    assert not results["padding", "accuracy"].passed and results["padding", "accuracy"].share_wrong_way > 0.5


def test_a_video_blind_judge_fails_mismatch_and_a_video_aware_one_passes():
    blind, aware = _sensitivity(VideoBlindJudge), _sensitivity(FairJudge)
    for dim in ("accuracy", "completeness", "conciseness"):
        assert blind["mismatch", dim].verdict == "no effect" and not blind["mismatch", dim].passed
        assert aware["mismatch", dim].verdict == "expected direction" and aware["mismatch", dim].passed
    # Blind, it still notices a shuffle (fluency is all it reads).
    assert blind["shuffle", "accuracy"].passed


def _hand_rolled_clusters(cluster_ids, n_resamples: int, seed: int):
    """The documented draw, written out: clusters in sorted id order, rng.integers(0, K, (B, K))."""
    ids = sorted(set(cluster_ids))
    members = [np.flatnonzero(np.asarray(cluster_ids) == each) for each in ids]
    draws = np.random.default_rng(seed).integers(0, len(ids), size=(n_resamples, len(ids)))
    return members, draws


def test_the_shift_interval_equals_a_hand_rolled_clustered_resample():
    rng = np.random.default_rng(4)
    clusters = [f"c{i}" for i in rng.integers(0, 30, 100)]
    original = rng.normal(size=100)
    perturbed = original - 0.3 + rng.normal(scale=0.5, size=100)
    result = paired_shift(original, perturbed, clusters, "down", n_resamples=400, seed=9, confidence=0.9)
    members, draws = _hand_rolled_clusters(clusters, 400, 9)
    shift = perturbed - original
    means = [shift[np.concatenate([members[k] for k in row])].mean() for row in draws]
    assert (result.interval.low, result.interval.high) == pytest.approx(tuple(np.percentile(means, [5, 95])))
    assert result.mean_shift == pytest.approx(shift.mean())
    assert result.share_wrong_way == pytest.approx(np.mean(shift > 0))
    assert result.n_clusters == len(members) and result.n_candidates == 100
    again = paired_shift(original, perturbed, clusters, "down", n_resamples=400, seed=9, confidence=0.9)
    assert again == result
    assert paired_shift(original, perturbed, clusters, "down", n_resamples=400, seed=10).interval != result.interval


def test_verdicts_read_the_interval_against_the_expected_side():
    def interval(low, high):
        return Interval(low, high, "percentile", 0.95)

    assert verdict_of(interval(-2, -1), "down") == "expected direction"
    assert verdict_of(interval(1, 2), "down") == "wrong direction"
    assert verdict_of(interval(-1, 0), "down") == "no effect"
    assert verdict_of(interval(1, 2), "up") == "expected direction"
    assert verdict_of(interval(0.5, 2), "not_down") == "expected direction"
    assert not passes("no effect", "down") and passes("no effect", "not_up") and not passes("wrong direction", "not_up")


# ---------------------------------------------------------------------------------------------------------
# Length bias
# ---------------------------------------------------------------------------------------------------------


def _length_data(judge_class, seed: int = 0):
    truth, captions = _world(seed)
    rng = np.random.default_rng(seed + 100)
    fair, judge = FairJudge(truth, captions), judge_class(truth, captions)

    def overall(scorer):
        return np.array([np.mean(list(scorer(caption, clip).values())) for clip, caption in captions])

    human = overall(fair) + rng.normal(scale=0.05, size=len(captions))
    judged = overall(judge) + rng.normal(scale=0.05, size=len(captions))
    words = np.array([len(caption.split()) for _, caption in captions])
    return judged, human, words, [clip for clip, _ in captions]


def test_the_slope_is_the_fixed_effects_least_squares_slope():
    judged, _, words, clips = _length_data(LengthLovingJudge)
    z = standardised_log_length(words)
    assert z.mean() == pytest.approx(0) and z.std() == pytest.approx(1)
    result = length_slope(judged, words, clips, n_resamples=0)
    # Demeaned within clip...
    ids = np.unique(clips, return_inverse=True)[1]
    demean = lambda v: v - (np.bincount(ids, v) / np.bincount(ids))[ids]  # noqa: E731
    within = np.linalg.lstsq(demean(z)[:, None], demean(judged), rcond=None)[0][0]
    # ...and with one dummy per clip: the same coefficient (Frisch-Waugh-Lovell).
    dummies = np.eye(ids.max() + 1)[ids]
    with_dummies = np.linalg.lstsq(np.column_stack([z, dummies]), judged, rcond=None)[0][0]
    assert result.slope == pytest.approx(within) == pytest.approx(with_dummies)
    assert result.interval is None


def test_the_slope_interval_equals_a_hand_rolled_clustered_resample():
    judged, _, words, clips = _length_data(LengthLovingJudge)
    result = length_slope(judged, words, clips, n_resamples=300, seed=5)
    members, draws = _hand_rolled_clusters(clips, 300, 5)
    z = standardised_log_length(words)  # standardised once, on the full sample (as documented)
    slopes = []
    for row in draws:
        xs, ys = [], []
        for k in row:  # each drawn copy of a clip is demeaned on its own (its own fixed effect)
            xs.append(z[members[k]] - z[members[k]].mean())
            ys.append(judged[members[k]] - judged[members[k]].mean())
        slopes.append(np.linalg.lstsq(np.concatenate(xs)[:, None], np.concatenate(ys), rcond=None)[0][0])
    assert (result.interval.low, result.interval.high) == pytest.approx(tuple(np.percentile(slopes, [2.5, 97.5])))
    assert length_slope(judged, words, clips, n_resamples=300, seed=5) == result


def test_a_length_loving_judge_shows_excess_length_bias_and_a_fair_one_does_not():
    loving = excess_length_bias(*_length_data(LengthLovingJudge), n_resamples=1000, seed=1)
    assert loving.excess > 0 and loving.interval.low > 0
    assert loving.excess == pytest.approx(loving.judge.slope - loving.human.slope)
    fair = excess_length_bias(*_length_data(FairJudge), n_resamples=1000, seed=1)
    assert fair.interval.low <= 0 <= fair.interval.high
    # Paired: the difference's interval is narrower than either slope's, since both share the clip draws.
    assert fair.interval.high - fair.interval.low < fair.human.interval.high - fair.human.interval.low


def test_length_bias_refuses_what_it_cannot_define():
    with pytest.raises(ValueError, match="same word count"):
        length_slope([1.0, 2.0, 3.0], [5, 5, 5], ["a", "a", "b"], n_resamples=0)
    with pytest.raises(ValueError, match="no clip has candidates of different lengths"):
        length_slope([1.0, 2.0, 3.0], [5, 5, 9], ["a", "a", "b"], n_resamples=0)
    with pytest.raises(ValueError, match="judge scores: 2 values for 3 candidates"):
        excess_length_bias([1.0, 2.0], [1.0, 2.0, 3.0], [5, 6, 9], ["a", "a", "b"], n_resamples=0)

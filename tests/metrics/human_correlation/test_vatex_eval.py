"""VATEX-EVAL: the loader on the real shared file and on broken copies, the correlation protocols against direct
scipy computations on the real ratings, and the clip-clustered bootstrap's coverage on simulated clustered data."""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest
from capjudge.metrics.statistics.correlation import BootstrapSettings
from capjudge.judges.datasets.vatex_eval import (
    VatexEvalError,
    clip_ids,
    load_vatex_eval,
    ratings_matrix,
)
from capjudge.metrics.human_correlation.vatex_protocols import (
    EMSCORE,
    GVEVAL_MEAN_RATING,
    GVEVAL_POOLED,
    HUMAN_CEILING,
    VatexProtocolError,
    all_protocols,
    clustered_design,
    gveval_mean_rating_protocol,
)
from tests.support.paths import shared_path
from scipy.stats import kendalltau, spearmanr

VATEX_FILE = ("data", "vatex_eval", "vid_cans_score_dict.json")


@pytest.fixture(scope="module")
def real_file():
    path = shared_path(*VATEX_FILE)
    assert path.exists(), f"{path} is missing although ../shared is present"
    return path


@pytest.fixture(scope="module")
def real_candidates(real_file):
    return load_vatex_eval(real_file)


def test_loader_reads_every_clip_candidate_and_rating_of_the_real_file(real_file, real_candidates):
    raw = json.loads(real_file.read_text(encoding="utf-8"))
    assert len({c.clip_id for c in real_candidates}) == 3000
    assert len(real_candidates) == 18000
    ratings = ratings_matrix(real_candidates)
    assert ratings.shape == (18000, 3) and ratings.size == 54000
    # The distribution the README states: 1,766 / 4,362 / 5,723 / 20,279 / 21,870.
    assert [int((ratings == level).sum()) for level in range(1, 6)] == [1766, 4362, 5723, 20279, 21870]
    assert all(len(c.references) == 9 for c in real_candidates)
    assert [c.candidate_index for c in real_candidates[:7]] == [0, 1, 2, 3, 4, 5, 0]
    # Field by field against the raw JSON for one clip: caption order, the nested refs, the string of ratings.
    first = real_candidates[:6]
    row = raw[first[0].clip_id]
    assert [c.caption for c in first] == row["cands"]
    assert first[3].references == tuple(row["refs"][0])
    assert [list(c.ratings) for c in first] == ast.literal_eval(row["scores"])
    assert list(clip_ids(real_candidates)[:6]) == [first[0].clip_id] * 6


def _direct_scipy(scorer: np.ndarray, ratings: np.ndarray) -> dict[str, dict[str, float]]:
    """Each protocol written out with scipy alone, straight from the README's definitions."""
    def mean_over_annotators(statistic):
        return float(np.mean([statistic(scorer, ratings[:, a]) for a in range(3)]))

    tau_b = lambda x, y: kendalltau(x, y, variant="b").statistic
    tau_c = lambda x, y: kendalltau(x, y, variant="c").statistic
    rho = lambda x, y: spearmanr(x, y).statistic
    pooled_x, pooled_y = np.repeat(scorer, 3), ratings.reshape(-1)
    mean_rating = ratings.mean(axis=1)
    others = [ratings[:, [b for b in range(3) if b != a]].mean(axis=1) for a in range(3)]
    ceiling = lambda statistic: float(np.mean([statistic(others[a], ratings[:, a]) for a in range(3)]))
    return {
        EMSCORE: {"kendall_b": mean_over_annotators(tau_b), "spearman": mean_over_annotators(rho)},
        GVEVAL_POOLED: {"kendall_b": tau_b(pooled_x, pooled_y), "kendall_c": tau_c(pooled_x, pooled_y)},
        GVEVAL_MEAN_RATING: {"kendall_b": tau_b(scorer, mean_rating), "kendall_c": tau_c(scorer, mean_rating)},
        HUMAN_CEILING: {"kendall_b": ceiling(tau_b), "kendall_c": ceiling(tau_c), "spearman": ceiling(rho)},
    }


def test_protocols_match_a_direct_scipy_computation_on_the_real_ratings(real_file, real_candidates):
    # Ratings read independently of the loader, exactly as the README's snippet does.
    raw = json.loads(real_file.read_text(encoding="utf-8"))
    ratings = np.array([r for clip in raw.values() for r in ast.literal_eval(clip["scores"])], dtype=float)
    scorer = ratings.mean(axis=1) + np.random.default_rng(7).normal(0.0, 1.0, len(ratings))  # a synthetic judge
    expected = _direct_scipy(scorer, ratings)
    design = clustered_design(scorer, ratings_matrix(real_candidates), clip_ids(real_candidates), BootstrapSettings(n_resamples=0))
    results = {result.protocol: result for result in all_protocols(design)}
    assert set(results) == set(expected)
    for protocol, statistics in expected.items():
        assert [s.name for s in results[protocol].statistics] == list(statistics)
        for name, value in statistics.items():
            assert results[protocol][name].value == pytest.approx(value, abs=1e-12), (protocol, name)
    # The per-annotator protocols keep the three values they average; the pooled one correlates 54,000 rows.
    assert results[EMSCORE]["kendall_b"].per_annotator == pytest.approx(
        [kendalltau(scorer, ratings[:, a]).statistic for a in range(3)], abs=1e-12)
    assert results[GVEVAL_POOLED].n_rows == 54000 and results[EMSCORE].n_rows == 18000
    # The README's rough human ceiling: each annotator vs the other two, tau-b 59.9-61.3, tau-c 53.9-56.8
    # (its lowest tau-b is 0.59846, which the README rounds to 59.9; the bounds allow for that rounding).
    assert all(0.598 <= v <= 0.614 for v in results[HUMAN_CEILING]["kendall_b"].per_annotator)
    assert all(0.539 <= v <= 0.569 for v in results[HUMAN_CEILING]["kendall_c"].per_annotator)


def test_intervals_say_how_they_were_made_and_bracket_the_estimate(real_candidates):
    subset = real_candidates[: 6 * 150]  # 150 real clips keep this fast
    ratings = ratings_matrix(subset)
    scorer = ratings.mean(axis=1) + np.random.default_rng(1).normal(0.0, 1.0, len(ratings))
    design = clustered_design(scorer, ratings, clip_ids(subset), BootstrapSettings(n_resamples=200, seed=3))
    results = all_protocols(design)
    for result in results:
        assert "clustered by clip" in result.ci_method and "200 resamples of the 150 clips" in result.ci_method
        assert "seed 3" in result.ci_method
        for statistic in result.statistics:
            assert statistic.ci_low < statistic.value < statistic.ci_high, (result.protocol, statistic)
            assert statistic.interval in ("bca", "percentile") and statistic.n_resamples == 200
    # Seeded: the same settings give the same interval.
    again = gveval_mean_rating_protocol(clustered_design(scorer, ratings, clip_ids(subset), BootstrapSettings(n_resamples=200, seed=3)))
    assert again.protocol == GVEVAL_MEAN_RATING and again["kendall_b"] == results[2]["kendall_b"]


GOOD_CLIP = {
    "vid": "abcdefghijk_000010_000020",
    "cands": ["a man plays a guitar", "a dog runs"],
    "scores": "[[5.0, 4.0, 4.0], [2.0, 1.0, 3.0]]",
    "refs": [["a man is playing guitar", "someone strums a guitar"]],
}


def _write(tmp_path, **changes):
    bad = {**GOOD_CLIP, **changes}
    for key in [k for k, v in changes.items() if v is None]:
        del bad[key]
    path = tmp_path / "vatex.json"
    path.write_text(json.dumps({"zzGoodClip0_000000_000010": GOOD_CLIP | {"vid": "zzGoodClip0_000000_000010"},
                                GOOD_CLIP["vid"]: bad}), encoding="utf-8")
    return path


def test_a_well_formed_small_file_loads(tmp_path):
    candidates = load_vatex_eval(_write(tmp_path))
    assert len(candidates) == 4
    assert candidates[3].ratings == (2, 1, 3) and candidates[3].caption == "a dog runs"
    assert candidates[3].references == ("a man is playing guitar", "someone strums a guitar")


@pytest.mark.parametrize(
    "changes, problem",
    [
        ({"scores": "[[5.0, 4.0], [2.0, 1.0, 3.0]]"}, r"candidate 0: expected 3 annotator ratings"),
        ({"scores": "5"}, r"'scores' must hold a list of rating rows"),
        ({"scores": "[[5, 4, 4], [2, 1,"}, r"'scores' is not a Python/JSON list literal"),
        ({"scores": [[5, 4, 4], [2, 1, 3]]}, r"'scores' must be a string"),
        ({"scores": "[[5, 4, 4]]"}, r"1 rating rows for 2 candidates"),
        ({"scores": "[[5, 4, 4], [2, 1, 6]]"}, r"candidate 1: ratings must be whole numbers 1-5"),
        ({"scores": "[[5, 4, 4], [2, 1.5, 3]]"}, r"candidate 1: ratings must be whole numbers 1-5"),
        ({"scores": "[[5, 4, 4], [2, 1e999, 3]]"}, r"candidate 1: ratings must be whole numbers 1-5"),
        ({"scores": "[[5, 4, 4], [2, True, 3]]"}, r"candidate 1: ratings must be whole numbers 1-5"),
        ({"refs": ["a man is playing guitar", "someone strums a guitar"]}, r"'refs' must be a list holding one list"),
        ({"refs": [[]]}, r"non-empty list of non-empty reference strings"),
        ({"cands": ["a man plays a guitar", 7]}, r"'cands' must be a non-empty list"),
        ({"vid": "someOtherId_000000_000001"}, r"its 'vid' field is 'someOtherId"),
        ({"scores": None}, r"missing key 'scores'"),
    ],
)
def test_a_malformed_clip_is_a_typed_error_naming_the_clip(tmp_path, changes, problem):
    with pytest.raises(VatexEvalError, match=rf"clip '{GOOD_CLIP['vid']}'.*{problem}"):
        load_vatex_eval(_write(tmp_path, **changes))


def test_a_file_that_is_not_a_clip_mapping_is_a_typed_error_naming_the_file(tmp_path):
    for text in ("[1, 2]", "{}", "{not json"):
        path = tmp_path / "vatex.json"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(VatexEvalError, match="vatex.json"):
            load_vatex_eval(path)


def test_protocol_inputs_are_checked_naming_the_candidate():
    ratings = np.array([[5, 4, 4], [2, 1, 3], [3, 3, 4]], dtype=float)
    clips = ["clipA", "clipA", "clipB"]
    with pytest.raises(VatexProtocolError, match=r"candidate 1 \(clip 'clipA'\): scorer value is not a finite"):
        clustered_design([0.1, float("nan"), 0.3], ratings, clips)
    with pytest.raises(VatexProtocolError, match=r"\(candidates, 3\)"):
        clustered_design([0.1, 0.2, 0.3], ratings[:, :2], clips)
    with pytest.raises(VatexProtocolError, match="2 clip ids for 3 candidates"):
        clustered_design([0.1, 0.2, 0.3], ratings, clips[:2])
    with pytest.raises(VatexProtocolError, match="all 0.5"):
        clustered_design([0.5, 0.5, 0.5], ratings, clips)


# ---------------------------------------------------------------------------------------------------------
# Coverage of the clustered bootstrap on simulated clustered data
# ---------------------------------------------------------------------------------------------------------

CLIPS_PER_DATASET, CANDIDATES_PER_CLIP = 30, 6


def _simulated(n_clips: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A strong clip effect, as VATEX-EVAL has: each clip's quality level (shared by its candidates) drives both
    the scorer and the ratings, the scorer carries a per-clip bias (its references are shared) and the clip's
    raters a per-clip calibration offset (they are shared too)."""
    clip = np.repeat(np.arange(n_clips), CANDIDATES_PER_CLIP)
    quality = rng.normal(0.0, 1.0, n_clips)[clip] + rng.normal(0.0, 0.7, clip.size)
    scorer = quality + rng.normal(0.0, 1.0, n_clips)[clip] + rng.normal(0.0, 0.5, clip.size)
    calibration = rng.normal(0.0, 0.8, n_clips)[clip]
    latent = 3.0 + 0.9 * quality[:, None] + calibration[:, None] + rng.normal(0.0, 0.6, (clip.size, 3))
    ratings = np.clip(np.rint(latent), 1, 5)
    return scorer, ratings, clip


def test_the_clustered_bootstrap_covers_the_truth_where_a_candidate_level_one_does_not():
    # The "true" tau-b of scorer vs mean rating: the same model on 20,000 clips (its own sampling error is
    # about 0.003, against interval half-widths near 0.1).
    scorer, ratings, _ = _simulated(20_000, np.random.default_rng(12345))
    truth = kendalltau(scorer, ratings.mean(axis=1), variant="b").statistic
    settings = BootstrapSettings(n_resamples=200, seed=0, ci_method="percentile")
    covered = {"clip": 0, "candidate": 0}
    n_datasets = 80
    for dataset in range(n_datasets):
        scorer, ratings, clip = _simulated(CLIPS_PER_DATASET, np.random.default_rng(dataset))
        by = {"clip": clip.astype(str), "candidate": np.arange(clip.size).astype(str)}  # candidate = its own cluster
        for unit, clusters in by.items():
            statistic = gveval_mean_rating_protocol(clustered_design(scorer, ratings, clusters, settings))["kendall_b"]
            covered[unit] += statistic.ci_low <= truth <= statistic.ci_high
    clip_coverage, candidate_coverage = covered["clip"] / n_datasets, covered["candidate"] / n_datasets
    assert clip_coverage >= 0.88, covered
    assert candidate_coverage <= 0.80 and candidate_coverage <= clip_coverage - 0.15, covered

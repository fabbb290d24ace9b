"""The annotator ceiling (agreement.py) and paired comparisons of two scorers (compare.py)."""

from __future__ import annotations

import math

import krippendorff
import numpy as np
import pytest
from scipy import stats

from capjudge.metrics.statistics.annotator_agreement import annotator_agreement, krippendorff_alpha
from capjudge.metrics.statistics.compare import compare_scorers, williams_test
from capjudge.metrics.statistics.correlation import BootstrapSettings
from capjudge.judges.gveval.parser import SCORE_NAMES
from capjudge.judges.datasets.msvd_eval import human_matrix, load_msvd_eval
from tests.support.paths import SHARED

MSVD_PATH = SHARED / "data" / "msvd_eval" / "MSVD-Eval.json"
FAST = BootstrapSettings(n_resamples=200, seed=0)


@pytest.fixture(scope="module")
def msvd_items():
    if not MSVD_PATH.is_file():
        pytest.skip(f"shared data not present: {MSVD_PATH}")
    return load_msvd_eval(MSVD_PATH)


@pytest.mark.parametrize("dimension", SCORE_NAMES)
def test_ceiling_on_msvd_matches_the_packages(msvd_items, dimension):
    human = human_matrix(msvd_items, dimension)
    ceiling = annotator_agreement(human, dimension, FAST)
    for level in ("interval", "ordinal"):
        alpha = ceiling.alpha(level)
        assert alpha.value == pytest.approx(krippendorff.alpha(reliability_data=human.T, level_of_measurement=level))
        assert alpha.ci_low < alpha.value < alpha.ci_high
        assert (alpha.n_items, alpha.n_annotators) == (197, 2)
    (pair,) = ceiling.annotator_pairs
    assert (pair.first, pair.second) == (0, 1)
    assert pair.kendall_b.value == pytest.approx(stats.kendalltau(human[:, 0], human[:, 1], variant="b").statistic)
    assert pair.kendall_b.n == 197


def test_interval_and_ordinal_alpha_differ_on_real_data(msvd_items):
    human = human_matrix(msvd_items, "relevance")
    ceiling = annotator_agreement(human, "relevance", BootstrapSettings(n_resamples=0))
    assert abs(ceiling.alpha("interval").value - ceiling.alpha("ordinal").value) > 0.01
    assert ceiling.alpha("interval").ci_low is None  # no resamples asked for


def test_perfect_agreement_and_degenerate_ratings():
    ratings = np.array([[1, 1], [2, 2], [3, 3], [4, 4], [5, 5]], dtype=float)
    ceiling = annotator_agreement(ratings, "x", FAST)
    assert ceiling.alpha("interval").value == pytest.approx(1.0)
    assert ceiling.annotator_pairs[0].kendall_b.value == pytest.approx(1.0)
    same = annotator_agreement(np.full((6, 3), 4.0), "x", FAST)
    assert same.alpha("ordinal").value is None
    assert "every rating is the same" in same.alpha("ordinal").undefined_reason
    assert "constant" in same.annotator_pairs[0].kendall_b.undefined_reason
    assert len(same.annotator_pairs) == 3  # 0~1, 0~2, 1~2


def test_items_rated_once_do_not_count_towards_alpha():
    ratings = np.array([[1, 2], [2, np.nan], [3, 3], [np.nan, 5], [4, 5], [2, 1]], dtype=float)
    alpha = krippendorff_alpha(ratings, "interval", BootstrapSettings(n_resamples=0))
    assert alpha.n_items == 4
    assert alpha.value == pytest.approx(krippendorff.alpha(reliability_data=ratings.T, level_of_measurement="interval"))


def _williams_by_determinant(r12: float, r13: float, r23: float, n: int) -> float:
    """Steiger (1980) eq. 7 written with the determinant of the 3x3 correlation matrix."""
    determinant = np.linalg.det(np.array([[1, r12, r13], [r12, 1, r23], [r13, r23, 1]]))
    mean_r = (r12 + r13) / 2
    return (r12 - r13) * math.sqrt((n - 1) * (1 + r23) / (2 * (n - 1) / (n - 3) * determinant + mean_r**2 * (1 - r23) ** 3))


def test_williams_test_formula_and_symmetry():
    test = williams_test(0.6, 0.4, 0.5, 100)
    assert test.t == pytest.approx(_williams_by_determinant(0.6, 0.4, 0.5, 100))
    assert test.df == 97 and test.p_value == pytest.approx(2 * stats.t.sf(abs(test.t), 97))
    assert williams_test(0.4, 0.6, 0.5, 100).t == pytest.approx(-test.t)
    assert williams_test(0.5, 0.5, 0.3, 50).t == 0.0
    # A larger correlation between the two scorers makes the same difference more significant.
    assert williams_test(0.6, 0.4, 0.8, 100).p_value < williams_test(0.6, 0.4, 0.2, 100).p_value


def test_williams_test_holds_its_size_under_the_null():
    """Two scorers equally correlated with the human: rejections at 5% should be about 5%."""
    rng = np.random.default_rng(99)
    covariance = np.array([[1.0, 0.5, 0.5], [0.5, 1.0, 0.4], [0.5, 0.4, 1.0]])  # human, scorer A, scorer B
    rejections, repetitions = 0, 400
    for _ in range(repetitions):
        human, a, b = rng.multivariate_normal(np.zeros(3), covariance, size=60).T
        r12, r13, r23 = stats.pearsonr(human, a)[0], stats.pearsonr(human, b)[0], stats.pearsonr(a, b)[0]
        rejections += williams_test(r12, r13, r23, 60).p_value < 0.05
    assert 0.02 <= rejections / repetitions <= 0.09


def test_compare_scorers_paired_difference():
    rng = np.random.default_rng(4)
    truth = rng.normal(size=80)
    human = np.column_stack([truth + rng.normal(scale=0.5, size=80), truth + rng.normal(scale=0.5, size=80)])
    good = truth + rng.normal(scale=0.3, size=80)
    poor = truth + rng.normal(scale=2.0, size=80)
    differences = {d.coefficient: d for d in compare_scorers(good, poor, human, names=("good", "poor"), settings=FAST)}
    for name, d in differences.items():
        assert d.difference == pytest.approx(d.first_value - d.second_value)
        assert d.ci_low > 0, name  # the better scorer is reliably better
    kendall = differences["kendall_b"]
    assert kendall.first_value == pytest.approx(stats.kendalltau(np.repeat(good, 2), human.ravel()).statistic)
    assert differences["pearson"].williams.p_value < 0.01
    assert differences["kendall_b"].williams is None

    same = {d.coefficient: d for d in compare_scorers(good, good, human, settings=FAST)}
    assert same["pearson"].difference == 0.0 and (same["pearson"].ci_low, same["pearson"].ci_high) == (0.0, 0.0)
    assert same["pearson"].williams is None  # undefined for identical scorers, not a fake t = 0


def test_compare_uses_only_items_both_scorers_scored():
    rng = np.random.default_rng(8)
    human = rng.integers(1, 6, size=30).astype(float)
    first = list(human + rng.normal(size=30))
    second = list(human + rng.normal(size=30))
    first[3] = None
    second[7] = None
    differences = compare_scorers(first, second, human, annotators="mean", settings=FAST)
    keep = [i for i in range(30) if i not in (3, 7)]
    for d in differences:
        assert d.n == 28 and d.n_items == 28
    pearson = next(d for d in differences if d.coefficient == "pearson")
    assert pearson.second_value == pytest.approx(stats.pearsonr(np.array(second)[keep].astype(float), human[keep])[0])


def test_compare_undefined_when_a_scorer_is_constant():
    differences = compare_scorers([1.0] * 10, list(range(10)), list(range(10)), names=("flat", "ok"))
    assert all(d.difference is None and "flat scores are constant" in d.undefined_reason for d in differences)

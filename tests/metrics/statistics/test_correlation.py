"""capjudge.metrics.statistics.correlation / bootstrap / harness_aggregation against scipy, on MSVD-Eval and synthetic data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from capjudge.tasks.harness import aggregations as harness_aggregation
from capjudge.metrics.statistics.bootstrap import (
    WEIGHTED_STATISTICS,
    _kendall_by_expansion,
    draw_item_indices,
    resample_weights,
)
from capjudge.metrics.statistics.correlation import (
    BootstrapSettings,
    HumanScoreError,
    build_pairs,
    correlate,
)
from capjudge.judges.datasets.msvd_eval import human_matrix, load_msvd_eval
from tests.support.paths import SHARED

MSVD_PATH = SHARED / "data" / "msvd_eval" / "MSVD-Eval.json"
SCIPY = {
    "pearson": lambda x, y: stats.pearsonr(x, y),
    "spearman": lambda x, y: stats.spearmanr(x, y),
    "kendall_b": lambda x, y: stats.kendalltau(x, y, variant="b"),
    "kendall_c": lambda x, y: stats.kendalltau(x, y, variant="c"),
}


@pytest.fixture(scope="module")
def msvd():
    if not MSVD_PATH.is_file():
        pytest.skip(f"shared data not present: {MSVD_PATH}")
    items = load_msvd_eval(MSVD_PATH)
    # A real per-item score with many ties: the candidate's length in words.
    length = np.array([len(item.candidate.split()) for item in items], dtype=float)
    return items, length


@pytest.mark.parametrize("dimension", ["mean", "accuracy"])
def test_every_coefficient_matches_scipy_on_msvd_expand(msvd, dimension):
    items, length = msvd
    human = human_matrix(items, dimension)
    result = correlate(length, human, settings=BootstrapSettings(n_resamples=200, seed=3))
    # expand = the G-VEval protocol: the judge score repeated once per annotator.
    x, y = np.repeat(length, human.shape[1]), human.ravel()
    assert result.n_pairs == 2 * len(items) == 394 and result.n_items == 197
    for name, direct in SCIPY.items():
        expected = direct(x, y)
        coefficient = result[name]
        assert coefficient.value == pytest.approx(expected.statistic, abs=1e-12)
        assert coefficient.p_value == pytest.approx(expected.pvalue, rel=1e-9)
        assert coefficient.ci_low < coefficient.value < coefficient.ci_high
        assert coefficient.n == 394 and coefficient.undefined_reason is None


def test_mean_mode_matches_scipy_on_item_means(msvd):
    items, length = msvd
    human = human_matrix(items, "mean")
    expanded = correlate(length, human, settings=BootstrapSettings(n_resamples=0))
    averaged = correlate(length, human, annotators="mean", settings=BootstrapSettings(n_resamples=0))
    assert averaged.n_pairs == 197
    for name, direct in SCIPY.items():
        assert averaged[name].value == pytest.approx(direct(length, human.mean(axis=1)).statistic, abs=1e-12)
    # The two protocols are genuinely different numbers on real data.
    assert expanded["kendall_b"].value != pytest.approx(averaged["kendall_b"].value, abs=1e-6)


def test_tau_c_differs_from_tau_b_on_tied_data_and_matches_scipy():
    x = np.array([1, 1, 2, 2, 3, 3, 3, 4, 5, 5], dtype=float)
    y = np.array([1, 2, 1, 3, 3, 4, 2, 5, 5, 5], dtype=float)
    result = correlate(x, y, settings=BootstrapSettings(n_resamples=0))
    tau_b, tau_c = result["kendall_b"].value, result["kendall_c"].value
    assert tau_b == pytest.approx(stats.kendalltau(x, y, variant="b").statistic)
    assert tau_c == pytest.approx(stats.kendalltau(x, y, variant="c").statistic)
    assert abs(tau_b - tau_c) > 0.01


@pytest.mark.parametrize("name", list(WEIGHTED_STATISTICS))
def test_weighted_statistics_equal_scipy_on_repeated_samples(name):
    """The vectorised bootstrap must give exactly what scipy gives on the materialised resample."""
    rng = np.random.default_rng(7)
    x = rng.integers(1, 6, 40).astype(float)
    y = (x + rng.integers(0, 3, 40)).astype(float)
    weights = rng.integers(0, 4, (25, 40)).astype(float)
    got = WEIGHTED_STATISTICS[name](x, y, weights)
    expected = [SCIPY[name](np.repeat(x, w), np.repeat(y, w)).statistic for w in weights.astype(int)]
    np.testing.assert_allclose(got, expected, atol=1e-12)
    if name.startswith("kendall"):
        np.testing.assert_allclose(_kendall_by_expansion(x, y, weights, name[-1]), expected, atol=1e-12)


def test_resampling_keeps_an_items_pairs_together():
    judge = [1.0, 2.0, 3.0, 4.0]
    human = [[1, 2], [2, None], [3, 3], [5, 4]]
    pairs = build_pairs(judge, human, "expand")
    assert pairs.item_of_pair.tolist() == [0, 0, 1, 2, 2, 3, 3]
    indices = draw_item_indices(pairs.n_items, 50, seed=1)
    weights = resample_weights(pairs.item_of_pair, pairs.n_items, indices)
    # Both pairs of item 0 (and of items 2, 3) always carry the same multiplicity.
    np.testing.assert_array_equal(weights[:, 0], weights[:, 1])
    np.testing.assert_array_equal(weights[:, 3], weights[:, 4])
    np.testing.assert_array_equal(weights.sum(axis=1), [np.bincount(r, minlength=4) @ [2, 1, 2, 2] for r in indices])


def test_expand_bootstrap_resamples_items_not_pairs():
    """With two identical annotators every pair is doubled; resampling items then gives exactly the same
    Pearson distribution as one pair per item, whereas resampling pairs would narrow the interval."""
    rng = np.random.default_rng(11)
    judge = rng.normal(size=60)
    human = judge + rng.normal(size=60)
    settings = BootstrapSettings(n_resamples=300, seed=5)
    doubled = correlate(judge, np.column_stack([human, human]), settings=settings)
    single = correlate(judge, human, annotators="mean", settings=settings)
    assert doubled["pearson"].value == pytest.approx(single["pearson"].value)
    for method in ("percentile", "bca"):
        assert doubled["pearson"].interval(method).low == pytest.approx(single["pearson"].interval(method).low)
        assert doubled["pearson"].interval(method).high == pytest.approx(single["pearson"].interval(method).high)


def test_blocked_and_expanded_evaluation_give_identical_intervals(monkeypatch):
    """Large inputs take other code paths (weights in blocks, Kendall by expansion); same numbers."""
    from capjudge.metrics.statistics import bootstrap

    rng = np.random.default_rng(3)
    judge = rng.integers(1, 8, 45).astype(float)
    human = np.column_stack([judge + rng.integers(-2, 3, 45), judge + rng.integers(-2, 3, 45)])
    settings = BootstrapSettings(n_resamples=120, seed=9)
    reference = correlate(judge, human, settings=settings)
    monkeypatch.setattr(bootstrap, "_WEIGHT_ELEMENTS_PER_BLOCK", 200)
    monkeypatch.setattr(bootstrap, "_MAX_PAIRS_FOR_MATRIX_KENDALL", 10)
    other = correlate(judge, human, settings=settings)
    for name in ("kendall_b", "kendall_c", "spearman"):
        assert [i.method for i in other[name].intervals] == ["percentile", "bca"]
        for mine, theirs in zip(other[name].intervals, reference[name].intervals):
            assert (mine.method, mine.low, mine.high) == (theirs.method, pytest.approx(theirs.low), pytest.approx(theirs.high))


def test_bca_agrees_with_scipy_bootstrap():
    """Same construction as scipy.stats.bootstrap(method='BCa'); with many resamples only Monte Carlo noise
    separates them, and BCa is visibly different from the percentile interval on this skewed sample."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=40)
    y = x + rng.normal(scale=1.5, size=40) + rng.exponential(size=40)

    def pearson(a, b, axis=-1):
        a = a - a.mean(axis, keepdims=True)
        b = b - b.mean(axis, keepdims=True)
        return (a * b).sum(axis) / np.sqrt((a * a).sum(axis) * (b * b).sum(axis))

    # Monte Carlo noise made small on both sides: scipy's 100,000 resamples, and ours the mean of four runs of
    # 10,000 (BootstrapSettings' bound, the one `capjudge correlate --bootstrap` has), 40,000 resamples in all.
    reference = stats.bootstrap(
        (x, y), pearson, paired=True, vectorized=True, method="BCa", n_resamples=100_000, rng=np.random.default_rng(2)
    ).confidence_interval
    runs = [correlate(x, y, coefficients=("pearson",), settings=BootstrapSettings(n_resamples=10_000, seed=seed))["pearson"]
            for seed in (1, 2, 3, 4)]
    bca_low, bca_high = (float(np.mean([getattr(run.interval("bca"), end) for run in runs])) for end in ("low", "high"))
    percentile_low = float(np.mean([run.interval("percentile").low for run in runs]))
    assert (bca_low, bca_high) == (pytest.approx(reference.low, abs=0.015), pytest.approx(reference.high, abs=0.015))
    assert abs(bca_low - percentile_low) > 0.03


def test_fisher_z_interval_is_scipys():
    rng = np.random.default_rng(2)
    x = rng.normal(size=50)
    y = x + rng.normal(size=50)
    interval = correlate(x, y, settings=BootstrapSettings(n_resamples=0))["pearson"].interval("fisher-z")
    expected = stats.pearsonr(x, y).confidence_interval(0.95)
    assert (interval.low, interval.high) == pytest.approx((expected.low, expected.high))


def test_confidence_interval_coverage_on_bivariate_normal():
    """95% intervals on data with a known correlation cover it in roughly 95% of repetitions."""
    rho, n, repetitions = 0.5, 40, 200
    true_values = {"pearson": rho, "kendall_b": 2 / math.pi * math.asin(rho)}
    covered = {(name, method): 0 for name in true_values for method in ("percentile", "bca")}
    rng = np.random.default_rng(2024)
    covariance = [[1.0, rho], [rho, 1.0]]
    for repetition in range(repetitions):
        x, y = rng.multivariate_normal([0.0, 0.0], covariance, size=n).T
        result = correlate(
            x, y, coefficients=("pearson", "kendall_b"), settings=BootstrapSettings(n_resamples=300, seed=repetition)
        )
        for (name, method) in covered:
            interval = result[name].interval(method)
            covered[(name, method)] += interval.low <= true_values[name] <= interval.high
    for key, count in covered.items():
        assert 0.90 <= count / repetitions <= 0.98, (key, count / repetitions)


def test_constant_input_is_undefined_with_a_reason_not_nan():
    result = correlate([3.0] * 10, list(range(10)), settings=BootstrapSettings(n_resamples=100))
    for coefficient in result.coefficients:
        assert coefficient.value is None and coefficient.p_value is None and coefficient.ci_low is None
        assert "judge scores are constant" in coefficient.undefined_reason
    human_constant = correlate(list(range(10)), [[2, 2]] * 10)
    assert "human scores are constant" in human_constant["kendall_b"].undefined_reason
    too_few = correlate([1.0, 2.0, None], [1.0, 2.0, 3.0])
    assert "only 2 complete pair(s)" in too_few["pearson"].undefined_reason


def test_missing_values_are_dropped_pairwise_and_counted():
    judge = [1.0, None, 3.0, 4.0, 5.0, float("nan"), 7.0, 8.0]
    human = [[1, 2], [2, 2], [None, 3], None, [5, 4], [6, 6], [6, None], [8, 7]]
    result = correlate(judge, human, settings=BootstrapSettings(n_resamples=100))
    missing = result.missing
    assert (missing.items_total, missing.judge_missing, missing.human_missing) == (8, 2, 1)
    assert missing.items_used == 5
    # 15 annotator slots (the None item has one); used: 2 + 1 + 2 + 1 + 2 = 8.
    assert result.n_pairs == 8 and missing.pairs_dropped == 15 - 8
    x = [1, 1, 3, 5, 5, 7, 8, 8]
    y = [1, 2, 3, 5, 4, 6, 8, 7]
    assert result["kendall_b"].value == pytest.approx(stats.kendalltau(x, y).statistic)
    assert result["kendall_b"].n_items == 5


def test_human_index_selects_a_column_and_shape_errors_name_the_item():
    human = [[[4, 3, 4.5], [5, 2, 3.0]], [[1, 1, 1.0], [2, 2, 2.0]], [[3, 3, 3.5], [3, 4, 3.0]]]
    pairs = build_pairs([3.0, 1.0, 2.0], human, "expand", human_index=2, item_ids=["a", "b", "c"])
    assert pairs.human.tolist() == [4.5, 3.0, 1.0, 2.0, 3.5, 3.0]
    with pytest.raises(HumanScoreError, match="item 'b'.*index"):
        build_pairs([3.0, 1.0], [[1, 2], [[1, 2], [3, 4]]], item_ids=["a", "b"])
    with pytest.raises(HumanScoreError, match="item 'a'.*annotator 0"):
        build_pairs([3.0], [[4, 5]], human_index=1, item_ids=["a"])


def test_harness_aggregations_return_plain_floats_matching_scipy(msvd):
    items, length = msvd
    human = human_matrix(items, "mean")
    docs = [{"judge": float(j), "human": list(h)} for j, h in zip(length, human)]
    docs.append({"judge": None, "human": [3.0, 4.0]})  # dropped
    value = harness_aggregation.kendall_b(docs)
    assert type(value) is float
    assert value == pytest.approx(stats.kendalltau(np.repeat(length, 2), human.ravel()).statistic)
    assert harness_aggregation.kendall_b_ci_low(docs) < value < harness_aggregation.kendall_b_ci_high(docs)
    single = [{"judge": float(j), "human": float(h)} for j, h in zip(length, human[:, 0])]
    assert harness_aggregation.kendall_b(single) == pytest.approx(stats.kendalltau(length, human[:, 0]).statistic)


def test_harness_intervals_do_not_depend_on_the_order_lmms_eval_gathers_the_items_in(msvd):
    """Under `accelerate launch` the ranks' items reach the aggregation interleaved, in an order that depends on
    the number of processes; the pairs carry their item id and the interval is computed in id order, so it is
    the same from 1 process or N. (Without ids the seeded bootstrap sees another order: another interval.)"""
    items, length = msvd
    human = human_matrix(items, "mean")
    docs = [{"item": item.item_id, "judge": float(j), "human": list(h)} for item, j, h in zip(items, length, human)]
    interleaved = docs[0::2] + docs[1::2]  # what 2 ranks of 1 item each in turn would hand over
    for aggregate in (harness_aggregation.kendall_b, harness_aggregation.kendall_b_ci_low,
                      harness_aggregation.kendall_b_ci_high):
        assert aggregate(interleaved) == aggregate(docs)
    without_ids = [{k: v for k, v in doc.items() if k != "item"} for doc in docs]
    assert harness_aggregation.kendall_b_ci_low(without_ids) == harness_aggregation.kendall_b_ci_low(docs)
    assert harness_aggregation.kendall_b_ci_low(without_ids[0::2] + without_ids[1::2]) != \
        harness_aggregation.kendall_b_ci_low(docs)


def test_harness_aggregation_undefined_is_nan_not_zero():
    docs = [{"judge": 2.0, "human": float(i)} for i in range(5)]
    assert math.isnan(harness_aggregation.kendall_b(docs))
    assert math.isnan(harness_aggregation.kendall_b_ci_low(docs))
    with pytest.raises(TypeError, match="item 1"):
        harness_aggregation.kendall_b([{"judge": 1.0, "human": 1.0}, {"score": 2.0}])


def test_large_sets_count_kendall_per_rating_level_exactly_as_scipy():
    # Above 2,500 pairs the O(P^2) matrix is replaced by counting per rating level; ties on both sides.
    from scipy.stats import kendalltau

    from capjudge.metrics.statistics.bootstrap import draw_item_indices, resample_weights, weighted_kendall

    rng = np.random.default_rng(7)
    n = 3000
    judge = np.round(rng.normal(size=n), 2)  # continuous-ish, with some ties
    human = np.round(judge + rng.normal(size=n)).clip(-2, 2)  # five rating levels
    weights = resample_weights(np.arange(n), n, draw_item_indices(n, 4, seed=3))
    for variant in ("b", "c"):
        for x, y in ((judge, human), (human, judge)):
            ours = weighted_kendall(x, y, weights, variant)
            expected = [kendalltau(np.repeat(x, row.astype(int)), np.repeat(y, row.astype(int)), variant=variant).statistic
                        for row in weights]
            np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-12)


def test_large_sets_get_a_grouped_jackknife_and_still_a_bca_interval():
    from capjudge.metrics.statistics.bootstrap import jackknife_units

    n = 3000
    units, n_units = jackknife_units(np.repeat(np.arange(n), 2), n)  # two annotators per item
    assert n_units == 200 and units.shape == (2 * n,)
    assert (units[0::2] == units[1::2]).all()  # an item's pairs leave together
    assert jackknife_units(np.arange(100), 100)[1] == 100  # small sets: leave one item out
    rng = np.random.default_rng(0)
    judge = rng.normal(size=n)
    human = np.round(judge + rng.normal(size=n)).clip(-2, 2)
    result = correlate(judge, human, coefficients=("kendall_b",), settings=BootstrapSettings(n_resamples=200, seed=1))
    coefficient = result["kendall_b"]
    assert coefficient.ci_method == "bca" and coefficient.ci_low < coefficient.value < coefficient.ci_high


def test_clustered_kendall_equals_the_pair_level_statistic_on_every_resample():
    """ClusteredKendall (per-item quadratic form) gives exactly the tau-b/tau-c of the expanded resample, with
    x-ties, pairs sharing an item, x or y taking few values, and x and y swapped."""
    from capjudge.metrics.statistics.bootstrap import ClusteredKendall, draw_item_indices, item_counts, weighted_kendall

    rng = np.random.default_rng(7)
    cases = [(60, 6, None), (400, 18, 9), (30, 3, 2), (200, 1, None)]
    for n_items, pairs_per_item, x_levels in cases:
        item_of_pair = np.repeat(np.arange(n_items), pairs_per_item)
        x = (rng.integers(0, x_levels, item_of_pair.size).astype(float) if x_levels
             else np.round(rng.normal(size=item_of_pair.size), 2))
        y = rng.integers(1, 6, item_of_pair.size).astype(float)
        weights = item_counts(n_items, draw_item_indices(n_items, 25, seed=n_items))
        weights[0] = 0.0
        weights[0, :2] = 1.0  # a resample of two items: small, maybe constant on one side
        kendall = ClusteredKendall(x, y, item_of_pair, n_items)
        for variant in ("b", "c"):
            np.testing.assert_array_equal(kendall(weights, variant), weighted_kendall(x, y, weights[:, item_of_pair], variant))
            np.testing.assert_array_equal(ClusteredKendall(y, x, item_of_pair, n_items)(weights, variant), kendall(weights, variant))

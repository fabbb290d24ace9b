"""The arena's Bradley-Terry ratings (capjudge.metrics.arena), each figure against a direct computation here:
the ratings against a logistic regression fitted in this file by Newton's method on the battles one by one
(ties split into half a win each way), the Elo scale against its closed form for two models, the bootstrap
interval against refits of materialised resamples, the win-rate matrix against counting; and the hostile
inputs an arena refuses in one line."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import expit, log_expit
from capjudge.metrics.arena.battles import score_battles
from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.ratings import ArenaSettings, arena_ratings, order_differences
from capjudge.metrics.arena.resampling import count_blocks
from capjudge.metrics.statistics.bootstrap import draw_item_indices, item_counts


def newton_logistic(x: np.ndarray, y: np.ndarray, w: np.ndarray, iterations: int = 100) -> np.ndarray:
    """Plain weighted logistic regression, no penalty, by Newton-Raphson (IRLS)."""
    beta = np.zeros(x.shape[1])
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        step = np.linalg.solve((x.T * (w * p * (1 - p))) @ x, x.T @ (w * (y - p)))
        beta += step
        if np.abs(step).max() < 1e-12:
            break
    return beta


def independent_elo(scores: dict[str, dict[str, float]], items: list[str] | None = None) -> dict[str, float]:
    """Battles one by one as Bernoulli rows (a tie: one half-weighted win each way), model 0 as reference,
    then Elo = 1000 + 400 / ln 10 * (theta - mean theta)."""
    models = list(scores)
    rows, ys, ws = [], [], []
    keys = items if items is not None else sorted({k for s in scores.values() for k in s})
    for item in keys:
        for a in range(len(models)):
            for b in range(a + 1, len(models)):
                va, vb = scores[models[a]].get(item), scores[models[b]].get(item)
                if va is None or vb is None:
                    continue
                x = np.zeros(len(models))
                x[a], x[b] = 1.0, -1.0
                outcomes = [(1.0, 1.0)] if va > vb else [(0.0, 1.0)] if va < vb else [(1.0, 0.5), (0.0, 0.5)]
                for y, w in outcomes:
                    rows.append(x[1:])
                    ys.append(y)
                    ws.append(w)
    beta = np.concatenate([[0.0], newton_logistic(np.array(rows), np.array(ys), np.array(ws))])
    return dict(zip(models, 1000 + 400 / math.log(10) * (beta - beta.mean())))


def _random_scores(seed: int, n_items: int, means: dict[str, float]) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(seed)
    return {model: {f"item{k}": float(v) for k, v in enumerate(np.round(rng.normal(mu, 1.5, n_items)))}
            for model, mu in means.items()}


def test_ratings_equal_an_independent_logistic_regression_on_the_battles():
    scores = _random_scores(3, 300, {"a": 5.0, "b": 5.6, "c": 6.1, "d": 4.2})
    del scores["d"]["item7"], scores["b"]["item11"]  # unjudged items: in none of that model's battles
    fitted = arena_ratings(score_battles(scores), ArenaSettings(n_resamples=0))
    expected = independent_elo(scores)
    assert fitted.n_ties > 0  # equal rounded scores: the half-win rule is exercised
    for model, value in expected.items():
        assert fitted.ratings[model].value == pytest.approx(value, abs=0.01)
    assert np.mean([fitted.ratings[m].value for m in scores]) == pytest.approx(1000.0, abs=1e-6)
    assert fitted.ranking == tuple(sorted(expected, key=lambda m: -expected[m]))


def test_two_models_are_400_elo_apart_at_ten_to_one():
    # a wins 10 battles of 11: the MLE odds are 10:1, which the Elo scale puts 400 points apart.
    scores = {"a": {f"i{k}": 1.0 if k < 10 else 0.0 for k in range(11)}, "b": {f"i{k}": 0.5 for k in range(11)}}
    fitted = arena_ratings(score_battles(scores), ArenaSettings(n_resamples=0))
    assert fitted.ratings["a"].value - fitted.ratings["b"].value == pytest.approx(400.0, abs=0.01)
    assert fitted.ratings["a"].value + fitted.ratings["b"].value == pytest.approx(2000.0, abs=1e-6)


def test_the_bootstrap_interval_is_the_percentile_of_refits_of_materialised_item_resamples():
    scores = _random_scores(5, 40, {"a": 5.0, "b": 5.5, "c": 6.0})
    table = score_battles(scores)
    settings = ArenaSettings(n_resamples=60, seed=11)
    fitted = arena_ratings(table, settings)
    indices = draw_item_indices(len(table.items), 60, np.random.default_rng(11))
    draws = []
    for row in indices:
        # a resample as repetition: item k drawn twice is two items
        picked = [table.items[k] for k in row]
        repeated = {m: {f"{item}~{n}": scores[m][item] for n, item in enumerate(picked)} for m in scores}
        draws.append(independent_elo(repeated))
    for model in scores:
        low, high = np.percentile([d[model] for d in draws], [2.5, 97.5])
        assert fitted.ratings[model].ci_low == pytest.approx(low, abs=0.02)
        assert fitted.ratings[model].ci_high == pytest.approx(high, abs=0.02)
    assert fitted.n_undefined == 0


def test_resample_blocks_are_the_project_draws_whatever_the_block_size():
    blocks = np.concatenate(list(count_blocks(7, 25, seed=4)))
    assert np.array_equal(blocks, item_counts(7, draw_item_indices(7, 25, np.random.default_rng(4))))
    big = np.concatenate(list(count_blocks(300_000, 9, seed=4)))  # several blocks of rows
    assert np.array_equal(big, item_counts(300_000, draw_item_indices(300_000, 9, np.random.default_rng(4))))


def test_win_rates_and_battle_counts_are_counted_with_ties_as_half():
    scores = {"a": {"1": 3, "2": 2, "3": 2, "4": 1}, "b": {"1": 1, "2": 2, "3": 5}, "c": {"1": 0, "4": 7}}
    fitted = arena_ratings(score_battles(scores), ArenaSettings(n_resamples=0))
    assert fitted.win_rates[("a", "b")] == pytest.approx((1 + 0.5 + 0) / 3)
    assert fitted.win_rates[("b", "a")] == pytest.approx(1 - (1 + 0.5 + 0) / 3)
    assert fitted.win_rates[("a", "c")] == pytest.approx(0.5)
    assert fitted.win_rates[("b", "c")] == pytest.approx(1.0)
    assert fitted.battles[("a", "b")] == 3 and fitted.battles[("b", "c")] == 1 and fitted.battles[("c", "a")] == 2
    assert fitted.n_battles == 6 and fitted.n_ties == 1


def test_models_of_one_rating_share_a_rank_and_the_leaderboard_shows_it():
    """Constant scores: every battle a tie, every rating 1000. The listing order of a tie is not a ranking (an
    independent probe found the arena's # column and arena_rank_* CSV cells saying 1, 2, 3)."""
    from capjudge.metrics.leaderboard.arena_cells import arena_csv_cells

    constant = {model: {str(item): 50.0 for item in range(4)} for model in ("c", "a", "b")}
    fitted = arena_ratings(score_battles(constant), ArenaSettings(n_resamples=0))
    assert fitted.n_ties == fitted.n_battles == 12
    assert fitted.ranks == {"c": 1, "a": 1, "b": 1}
    scores = {"a": {"1": 3, "2": 3, "3": 3}, "b": {"1": 1, "2": 1, "3": 1}, "c": {"1": 1, "2": 1, "3": 1},
              "d": {"1": 0, "2": 0, "3": 0}}
    assert arena_ratings(score_battles(scores), ArenaSettings(n_resamples=0)).ranks == {"a": 1, "b": 2, "c": 2, "d": 4}

    class Board:  # the two fields arena_csv_cells reads
        arenas = {"t": type("Arena", (), {"ratings": fitted})()}
        arena_missing: dict = {}

    assert [arena_csv_cells(Board, model)[-1] for model in ("a", "b", "c")] == [1, 1, 1]


def test_the_tie_margin_turns_close_scores_into_ties():
    scores = {"a": {"1": 70.0, "2": 71.0, "3": 80.0}, "b": {"1": 69.5, "2": 72.0, "3": 60.0}}
    strict = score_battles(scores)
    lenient = score_battles(scores, margin=1.0)
    assert strict.points[:, 0].tolist() == [1.0, 0.0, 1.0]
    assert lenient.points[:, 0].tolist() == [0.5, 0.5, 1.0]
    lower = score_battles(scores, higher_is_better=False)
    assert lower.points[:, 0].tolist() == [0.0, 1.0, 0.0]


def test_pairs_whose_order_differs_from_the_mean_score_ranking_are_named():
    # a: one big win and two losses against b; its mean is higher, its battles fewer.
    scores = {"a": {"1": 100.0, "2": 30.0, "3": 30.0}, "b": {"1": 40.0, "2": 40.0, "3": 40.0},
              "c": {"1": 10.0, "2": 10.0, "3": 10.0}}
    fitted = arena_ratings(score_battles(scores), ArenaSettings(n_resamples=0))
    means = {m: float(np.mean(list(v.values()))) for m, v in scores.items()}
    assert fitted.ratings["b"].value > fitted.ratings["a"].value
    assert order_differences(fitted, means) == (("a", "b"),)
    assert order_differences(fitted, {"a": 1.0, "b": 2.0, "c": 0.0}) == ()


@pytest.mark.parametrize("scores, margin, message", [
    ({"a": {"1": 1.0}}, 0.0, "at least two models, got 1 ('a')"),
    ({"a": {"1": 1.0}, "b": {"2": 1.0}}, 0.0, "share no items"),
    ({"a": {"1": float("nan")}, "b": {"1": 1.0}}, 0.0, "model 'a', item '1': score nan is not a finite number"),
    ({"a": {"1": float("inf")}, "b": {"1": 1.0}}, 0.0, "score inf is not a finite number"),
    ({"a": {"1": "7"}, "b": {"1": 1.0}}, 0.0, "score '7' is not a finite number"),
    ({"a": {"1": 1.0, "2": 1.0}, "b": {"1": 2.0}, "c": {"2": 2.0}, "d": {"3": 1.0}, "e": {"3": 2.0}}, 0.0,
     "no battle links ['a', 'b', 'c'] and ['d', 'e']"),
    ({"a": {"1": 1.0}, "b": {"1": 2.0}}, -1.0, "tie margin must be a finite number >= 0, got -1.0"),
])
def test_hostile_scores_are_one_line_arena_errors(scores, margin, message):
    with pytest.raises(ArenaError) as raised:
        score_battles(scores, margin=margin)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_model_that_wins_every_battle_gets_a_finite_rating():
    scores = {"a": {str(k): 2.0 for k in range(20)}, "b": {str(k): 1.0 for k in range(20)},
              "c": {str(k): float(k % 2) for k in range(20)}}
    fitted = arena_ratings(score_battles(scores), ArenaSettings(n_resamples=20))
    assert all(math.isfinite(fitted.ratings[m].value) for m in scores)
    assert fitted.ranking[0] == "a"
    # ... but no interval: its strength is infinite, its finite value the regularisation's (HOSTILE.md class 10).
    assert fitted.ratings["a"].ci_low is None and fitted.ratings["a"].ci_high is None
    assert fitted.no_interval["a"].startswith("won every one of its battles")
    assert fitted.ratings["b"].ci_low < fitted.ratings["b"].value < fitted.ratings["b"].ci_high  # b has wins and losses


def test_battles_on_one_shared_item_count_that_item_and_claim_no_interval():
    # Two runs of 10 items that share one: 1 battle, on 1 item, not "on 10 items"; every resample is that item.
    scores = {"a": {"g01": 3.0, **{f"a{k}": 1.0 for k in range(9)}}, "b": {"g01": 1.0, **{f"b{k}": 2.0 for k in range(9)}}}
    fitted = arena_ratings(score_battles(scores), ArenaSettings(n_resamples=50))
    assert (fitted.n_battles, fitted.n_items) == (1, 1)
    assert all(fitted.ratings[m].ci_low is None for m in scores)
    assert set(fitted.no_interval.values()) == {"battles from 1 item: capjudge shows an interval from 5 items or more"}


@pytest.mark.parametrize("case", ["ties", "separated", "covariate", "unused rows"])
def test_the_batched_bootstrap_fit_is_scipys_fit_of_each_resample(case, monkeypatch):
    # fit_strengths_many (every resample's Newton steps at once) against fit_strengths (scipy's trust region,
    # one resample a call), on the same weights and warm start; and a resample not converged in its step
    # budget is scipy's own fit.
    from capjudge.metrics.arena import bradley_terry
    from capjudge.metrics.arena.bradley_terry import BattleRows, design_matrix, fit_strengths, fit_strengths_many

    rng = np.random.default_rng(7)
    n_models, n_rows = 4, 60
    first = rng.integers(0, n_models, n_rows)
    second = (first + rng.integers(1, n_models, n_rows)) % n_models
    strength = np.array([1.5, 0.5, -0.5, -1.5]) * (4.0 if case == "separated" else 1.0)
    points = (rng.random(n_rows) < 1 / (1 + np.exp(-(strength[first] - strength[second])))).astype(float)
    if case == "ties":
        points[::4] = 0.5
    covariates = rng.normal(size=(n_rows, 1)) if case == "covariate" else None
    design = design_matrix(BattleRows(first, second, points, covariates), n_models)
    weights = rng.poisson(1.0, size=(40, n_rows)).astype(float)
    if case == "unused rows":
        weights[:, ::3] = 0.0
    start = fit_strengths(design, points, np.ones(n_rows))
    expected = np.array([fit_strengths(design, points, row, start) for row in weights])

    def loss_and_gradient(row: np.ndarray, theta: np.ndarray) -> tuple[float, float]:
        z = design @ theta
        loss = -row @ (points * log_expit(z) + (1 - points) * log_expit(-z)) + 0.5 * bradley_terry.RIDGE * theta @ theta
        return loss, float(np.linalg.norm(-design.T @ (row * (points - expit(z))) + bradley_terry.RIDGE * theta))

    for fitted in (fit_strengths_many(design, points, weights, start), None):
        if fitted is None:  # every resample left to scipy after one Newton step
            monkeypatch.setattr(bradley_terry, "MAX_NEWTON_STEPS", 1)
            fitted = fit_strengths_many(design, points, weights, start)
        for row, mine, scipys in zip(weights, fitted, expected):
            (loss, gradient), (scipy_loss, scipy_gradient) = loss_and_gradient(row, mine), loss_and_gradient(row, scipys)
            # The same optimum, at least as closely: no higher objective (beyond rounding), no larger gradient
            # (beyond scipy's own stopping rule), the same ratings to a hundredth of an Elo point where the
            # optimum is not flat (a separated model's is: only the tiny penalty bends it).
            assert loss <= scipy_loss + 1e-12 * max(1.0, abs(scipy_loss))
            assert gradient <= max(scipy_gradient, 1e-7)
            if case not in ("separated", "unused rows"):
                assert np.abs(mine - scipys).max() * bradley_terry.ELO_PER_LOGIT < 0.01


def test_a_rating_outside_its_own_interval_is_drawn_at_its_place_with_the_interval_between_its_ends():
    # A percentile interval need not contain its rating; matplotlib's errorbar refused the negative distance
    # (a traceback from `capjudge leaderboard` and `capjudge arena`).
    from matplotlib.figure import Figure

    from capjudge.metrics.arena.verdict_plot import draw_ratings
    from capjudge.metrics.statistics.value_ci import ValueCI

    axes = Figure().add_subplot(1, 1, 1)
    draw_ratings(axes, [0.0, 1.0], [ValueCI(1000.0, 1001.0, 1010.0), ValueCI(990.0)], "o", "#000000")
    (points,) = [line for line in axes.lines if line.get_marker() == "o"]  # the caps are lines too
    assert list(points.get_ydata()) == [1000.0, 990.0]
    bars = [segment for collection in axes.collections for segment in collection.get_segments()]
    assert sorted((float(s[0][1]), float(s[1][1])) for s in bars) == [(990.0, 990.0), (1001.0, 1010.0)]


def test_the_batched_fit_of_many_models_that_met_few_others_is_scipys():
    # Forty models in a chain: 780 pairs, 39 of which met. The batched fit drops the rows no resample weighs and
    # keeps each row's outer product sparse (held dense they grew with the fourth power of the models: an
    # independent probe measured 275 s and 2.8 GB for 140 models); the optimum is scipy's all the same.
    from capjudge.metrics.arena.bradley_terry import (ELO_PER_LOGIT, BattleRows, design_matrix, fit_strengths,
                                                       fit_strengths_many)

    rng = np.random.default_rng(11)
    n_models = 40
    pairs = [(i, j) for i in range(n_models) for j in range(i + 1, n_models)]
    first, second = np.array([i for i, _ in pairs]), np.array([j for _, j in pairs])
    met = second == first + 1
    points = np.where(met, rng.uniform(0.3, 0.7, len(pairs)), 0.0)  # shares of points: no model separated
    design = design_matrix(BattleRows(first, second, points), n_models)
    weights = np.where(met, rng.poisson(3.0, size=(12, len(pairs))), 0).astype(float)
    start = fit_strengths(design, points, met * 3.0)
    batched = fit_strengths_many(design, points, weights, start)
    for row, mine in zip(weights, batched):
        scipys = fit_strengths(design, points, row, start)
        assert np.abs(mine - scipys).max() * ELO_PER_LOGIT < 0.01

"""The Bradley-Terry model as a weighted logistic regression, fitted with scipy's optimiser, and the Elo scale.

P(i beats j) = sigmoid(theta_i - theta_j + x_ij . beta): theta a strength per model (natural log-odds), x
optional per-battle covariates (the normalised length difference of `style_control`) with coefficients beta.
A battle row carries the points the first model took (1 win, 0 loss, 0.5 tie: a tie counts half a win to
each side, as FastChat's `compute_mle_elo` counts it by entering every tie once in each direction) and a
weight (how many battles the row stands for: a pair's battle count, or an item's bootstrap draw count). The
log-likelihood is linear in points and weight, so battles aggregated per model pair (points summed) give the
same fit as the battles one by one: that is what makes a 1,000-resample bootstrap over 10,000 items cheap.

Like FastChat's logistic regression (scikit-learn's, C = 1e6), the objective carries a tiny L2 penalty,
|w|^2 / (2 * 10^6): it keeps a model that wins every battle finite, and since every battle adds +g to one
strength and -g to another, the penalised optimum has strengths summing to 0 (mean rating = the anchor).

Elo scale: rating = ELO_ANCHOR + ELO_SCALE / ln(ELO_BASE) * theta, i.e. 400 points = 10:1 odds, the mean
model at 1000 (FastChat's SCALE=400, BASE=10, INIT_RATING=1000, without its optional anchor model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, log_expit

ELO_SCALE = 400.0
ELO_BASE = 10.0
ELO_ANCHOR = 1000.0
ELO_PER_LOGIT = ELO_SCALE / math.log(ELO_BASE)
# scikit-learn's penalty with C = 1e6, as FastChat fits it: |w|^2 / (2C) beside the summed log-loss.
RIDGE = 1e-6
ELO_SCALE_TEXT = (f"Elo scale: {ELO_SCALE:g} points = {ELO_BASE:g}:1 odds of winning, the models' mean "
                  f"rating anchored at {ELO_ANCHOR:g}")


@dataclass(frozen=True)
class BattleRows:
    """Battles (or battles aggregated per pair) as regression rows."""

    first: np.ndarray  # (rows,) model index
    second: np.ndarray  # (rows,) model index
    points: np.ndarray  # (rows,) the first model's points, in [0, 1]
    covariates: np.ndarray | None = None  # (rows, k): added to theta_first - theta_second with coefficients beta

    @property
    def n_covariates(self) -> int:
        return 0 if self.covariates is None else int(self.covariates.shape[1])


def design_matrix(rows: BattleRows, n_models: int) -> np.ndarray:
    """(rows, n_models + k): +1 in the first model's column, -1 in the second's, then the covariates."""
    design = np.zeros((rows.first.size, n_models + rows.n_covariates))
    index = np.arange(rows.first.size)
    design[index, rows.first] = 1.0
    design[index, rows.second] = -1.0
    if rows.covariates is not None:
        design[:, n_models:] = rows.covariates
    return design


def penalised_loss(theta: np.ndarray, z: np.ndarray, points: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The objective both fits minimise at `theta` (one parameter vector, or one per row), given its linear
    predictors `z` (design @ theta, per row): the weighted log-loss plus the ridge penalty."""
    log_loss = -np.sum(weights * (points * log_expit(z) + (1.0 - points) * log_expit(-z)), axis=-1)
    return log_loss + 0.5 * RIDGE * np.sum(theta * theta, axis=-1)


def fit_strengths(design: np.ndarray, points: np.ndarray, weights: np.ndarray,
                  start: np.ndarray | None = None) -> np.ndarray:
    """The penalised maximum-likelihood (theta, beta) for rows `design` with `points` and `weights`
    (scipy.optimize.minimize, trust-region with the exact Hessian; `start` warm-starts it, e.g. from the
    full-data fit when fitting bootstrap resamples)."""
    keep = weights > 0
    x, s, w = design[keep], points[keep], weights[keep]
    n_parameters = design.shape[1]

    def objective(parameters: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ parameters
        gradient = -x.T @ (w * (s - expit(z))) + RIDGE * parameters
        return float(penalised_loss(parameters, z, s, w)), gradient

    def hessian(parameters: np.ndarray) -> np.ndarray:
        p = expit(x @ parameters)
        return (x.T * (w * p * (1.0 - p))) @ x + RIDGE * np.eye(n_parameters)

    x0 = np.zeros(n_parameters) if start is None else np.asarray(start, dtype=np.float64)
    result = minimize(objective, x0, jac=True, hess=hessian, method="trust-exact", options={"gtol": 1e-8})
    return np.asarray(result.x)


# The bootstrap's fits (fit_strengths_many): Newton steps until the Newton decrement g.H^-1.g, the objective's
# predicted remaining decrease (times two), is below NEWTON_DECREMENT; a resample still short of it after
# MAX_NEWTON_STEPS is fitted by fit_strengths (scipy) alone.
NEWTON_DECREMENT = 1e-20
MAX_NEWTON_STEPS = 50


def _row_outer_products(design: np.ndarray) -> "scipy.sparse.csr_matrix":
    """(rows, n_parameters**2), sparse: row r is x_r x_r^T, flattened. A row of the design has two model
    entries (+1, -1) and its covariates, so each outer product has a handful of non-zeros; held dense, the
    (pairs x models^2) array grew with the fourth power of the models (100 models: 1 GB)."""
    from scipy.sparse import csr_matrix

    n_rows, n_parameters = design.shape
    row_of, column_of = np.nonzero(design)  # row-major: each row's entries together, in column order
    per_row = np.bincount(row_of, minlength=n_rows)
    first_of_row = np.cumsum(per_row) - per_row
    # Every entry paired with every entry of its own row: entry e repeated once per entry of its row (`left`),
    # beside those entries in turn (`right`).
    repeats = per_row[row_of]
    left = np.repeat(np.arange(row_of.size), repeats)
    turn = np.arange(left.size) - np.repeat(np.cumsum(repeats) - repeats, repeats)
    right = first_of_row[row_of[left]] + turn
    values = design[row_of, column_of]
    return csr_matrix((values[left] * values[right], (row_of[left], column_of[left] * n_parameters + column_of[right])),
                      shape=(n_rows, n_parameters * n_parameters))


def fit_strengths_many(design: np.ndarray, points: np.ndarray, weights: np.ndarray, start: np.ndarray) -> np.ndarray:
    """fit_strengths for every row of `weights` (resamples, rows), each warm-started from `start`; `points`
    is one row shared by all or one per resample.

    A bootstrap fits thousands of small problems that differ only in their weights. scipy's minimize fits one
    problem a call, and its set-up per call (0.4 ms) made 2,000 resamples of three models cost 0.8 s of CPU
    for every task of every leaderboard. Here every resample takes the same Newton steps of the same penalised
    objective at once, as array operations (the step halved until the objective decreases enough, Armijo's
    rule), and stops at the Newton decrement (NEWTON_DECREMENT); the objective is strictly convex (the
    penalty), so each resample converges to the one optimum fit_strengths finds."""
    points = np.broadcast_to(np.asarray(points, dtype=np.float64), weights.shape)
    # Rows no resample weighs (pairs of models that never met) add nothing to any fit: dropped, so that the work
    # grows with the pairs that met, not with every pair of models.
    weighed = weights.any(axis=0)
    design, points, weights = design[weighed], points[:, weighed], weights[:, weighed]
    n_parameters = design.shape[1]
    outer = _row_outer_products(design)
    ridge = RIDGE * np.eye(n_parameters)
    theta = np.tile(np.asarray(start, dtype=np.float64), (weights.shape[0], 1))
    active = np.arange(weights.shape[0])

    for _ in range(MAX_NEWTON_STEPS):
        if active.size == 0:
            break
        t, s, w = theta[active], points[active], weights[active]
        z = t @ design.T
        p = expit(z)
        gradient = -(w * (s - p)) @ design + RIDGE * t
        hessian = (outer.T @ (w * p * (1.0 - p)).T).T.reshape(-1, n_parameters, n_parameters) + ridge
        step = np.linalg.solve(hessian, gradient[..., None])[..., 0]
        decrement = np.sum(gradient * step, axis=1)
        going = decrement > NEWTON_DECREMENT
        active, t, z, s, w = active[going], t[going], z[going], s[going], w[going]
        step, decrement = step[going], decrement[going]
        before = penalised_loss(t, z, s, w)
        size = np.ones(active.size)
        for _ in range(60):  # the full step, or half of it, ... until the decrease is 1e-4 of the predicted (Armijo)
            trial = t - size[:, None] * step
            short = penalised_loss(trial, trial @ design.T, s, w) > before - 1e-4 * size * decrement
            if not short.any():
                break
            size[short] *= 0.5
        theta[active] = t - size[:, None] * step
    for b in active:  # not converged in MAX_NEWTON_STEPS: scipy's trust region, alone
        theta[b] = fit_strengths(design, points[b], weights[b], start)
    return theta


def elo(theta: np.ndarray) -> np.ndarray:
    """Strengths (natural log-odds, summing to 0) on the Elo scale."""
    return ELO_ANCHOR + ELO_PER_LOGIT * (np.asarray(theta) - np.mean(theta, axis=-1, keepdims=True))

"""Benchmark (issue #49, "Done means"): battles from 3 runs x 10,000 items, fitted with 1,000 item-bootstrap
resamples, must take under 30 s. Not a test and nothing here asserts on time: it prints one line per figure,
`BENCH <name> <value> <unit>`, as tests/benchmarks/run.py does.

    PYTHONPATH=<shim> .venv/bin/python tests/benchmarks/arena_fit.py [--items 10000] [--resamples 1000]

The scores are a G-VEval-like 0-100 scale rounded to whole points (so ties occur), three models a few points
apart; the battles are built by `score_battles` (the step `run_battles` ends in once the runs are read) and
fitted by `arena_ratings`. The time of reading the runs' files is the leaderboard's own and not counted here.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from capjudge.metrics.arena.battles import score_battles
from capjudge.metrics.arena.ratings import ArenaSettings, arena_ratings


def arena_fit_seconds(n_items: int = 10_000, n_resamples: int = 1_000, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    scores = {name: dict(zip((f"item{k}" for k in range(n_items)),
                             np.clip(np.round(rng.normal(mean, 12.0, n_items)), 0, 100).tolist()))
              for name, mean in (("model_a", 61.0), ("model_b", 63.0), ("model_c", 66.0))}
    started = time.perf_counter()
    table = score_battles(scores)
    built = time.perf_counter()
    ratings = arena_ratings(table, ArenaSettings(n_resamples=n_resamples, seed=seed))
    fitted = time.perf_counter()
    assert ratings.n_undefined == 0 and ratings.ranking == ("model_c", "model_b", "model_a")
    return {"arena_battles_seconds": built - started, "arena_fit_bootstrap_seconds": fitted - built,
            "arena_total_seconds": fitted - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--resamples", type=int, default=1_000)
    args = parser.parse_args()
    for name, value in arena_fit_seconds(args.items, args.resamples).items():
        print(f"BENCH {name} {value:.6g} s", flush=True)


if __name__ == "__main__":
    main()

"""What runs mean, from Python: the runs `capjudge leaderboard` reads, the board it builds, and the judge-human
correlation `capjudge correlate` computes. Thin: each is the command's own reader or statistic.

- `load_runs(paths)`: every model in lmms-eval output folders or results files (`capjudge.metrics.files.runs`);
- `build_leaderboard(runs, LeaderboardSettings(...), rank_by=...)`, `write_leaderboard(board, folder)` and
  `leaderboard_markdown(board)`: the board and its files (`capjudge.metrics.leaderboard`);
- `correlate(judge_scores, human_scores, annotators=..., settings=BootstrapSettings(...))`: Pearson, Spearman,
  Kendall tau-b and tau-c from scipy with item-bootstrap intervals (`capjudge.metrics.statistics.correlation`).

What the commands refuse, these refuse, as a ValueError naming the item or the field: scores in a list or a numpy
array alike (a number, or None/NaN for a missing one; no infinity, nothing beyond ±2**53; a 1-D array of judge
scores), and settings outside the bounds of the commands' flags (`LeaderboardSettings` / `BootstrapSettings`:
resamples 0 to 10,000, permutations 1 to 10,000, seed 0 to 2**32-1, confidence and alpha between 0 and 1).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from capjudge.metrics.files.runs import Run, read_runs


def load_runs(paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> tuple[list[Run], list[str]]:
    """Every model in the runs at `paths` (an lmms-eval `--output_path` folder, a model subfolder or a
    `*_results.json`; `"NAME=PATH"` labels a row), read as `capjudge leaderboard RUN ...` reads them, and the
    warnings it prints (a task run twice by one model: the run started last is used). Results files of one
    model are merged into one `Run`. Raises RunFileError naming the file for a run that cannot be read."""
    given = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    return read_runs([os.fspath(path) for path in given])

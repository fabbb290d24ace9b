"""`capjudge leaderboard --format json`: the board as one JSON document on stdout, for programs that read the
ranking without parsing leaderboard.csv: each model's rank, per-task ranks and every metric's estimate with its
interval, each task's arena (`arena_column.arena_json`: ratings with intervals, win rates, battles, the pairs
ordered otherwise than by the mean score, the method) or why it has none, the warnings, the method and the
files written. Numbers are as computed (rates as fractions); a figure that is not defined is null."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from capjudge.metrics.leaderboard.arena_column import arena_json
from capjudge.metrics.leaderboard.table import Leaderboard


def _number(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def leaderboard_json(board: Leaderboard, files: Mapping[str, Path | tuple[Path, ...]]) -> dict[str, Any]:
    models = []
    for row in board.rows:
        metrics = {key: {"value": _number(e.value), "ci_low": _number(e.ci_low), "ci_high": _number(e.ci_high),
                         "n": e.n, "source": e.source} for key, e in row.estimates.items()}
        models.append({"name": row.name, "rank": row.rank, "task_ranks": dict(row.task_ranks),
                       "items": dict(row.n_items), "metrics": metrics})
    return {
        "rank_by": board.rank_column.key if board.rank_column is not None else None,
        "task_main_metrics": {task: column.metric for task, column in board.task_rank_columns.items()},
        "models": models,
        "arena": {task: arena_json(arena) for task, arena in board.arenas.items()},
        "arena_not_made": dict(board.arena_missing),
        "warnings": list(board.warnings),
        "method": board.method,
        "files": {name: [str(p) for p in path] if isinstance(path, tuple) else str(path) for name, path in files.items()},
    }

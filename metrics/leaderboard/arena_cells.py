"""The arena's column in a task's main table, "arena (Elo, 95% CI)": each model's Bradley-Terry rating with its
item-bootstrap interval (`capjudge.metrics.leaderboard.arena_column`), placed after the mean score's comparison
columns (`layout`); whole Elo points, the interval under the value on the page."""

from __future__ import annotations

from collections.abc import Sequence

from capjudge.metrics.leaderboard.arena_column import TaskArena
from capjudge.metrics.leaderboard.cells import EMPTY, Cell, DisplayColumn, sort_key
from capjudge.metrics.leaderboard.table import Leaderboard, LeaderboardRow


def arena_header(confidence: float) -> str:
    return f"arena (Elo, {confidence:.0%} CI)"


def arena_column(arena: TaskArena, rows: Sequence[LeaderboardRow], confidence: float) -> DisplayColumn:
    """The main table's column: each row's rating with its interval (— for a model not in the arena)."""
    ranks, ranked = arena.ratings.ranks, len(arena.ratings.ranking)
    cells = []
    for row in rows:
        figure = arena.ratings.ratings.get(row.name)
        if figure is None or figure.value is None:
            cells.append(Cell(EMPTY))
            continue
        interval = "" if figure.ci_low is None or figure.ci_high is None else f"[{figure.ci_low:.0f}, {figure.ci_high:.0f}]"
        cells.append(Cell(f"{figure.value:.0f}", interval, sort=sort_key(figure.value),
                          note=f"rank {ranks[row.name]} of {ranked} in the arena"))
    return DisplayColumn(arena_header(confidence), tuple(cells))


def arena_csv_header(board: Leaderboard) -> list[str]:
    """leaderboard.csv's arena columns (after the length-controlled ones, before a panel's): per task with an
    arena, each model's rating with its interval and its arena rank; per task without one, why (in every row)."""
    return ([f"{task}/arena_elo{end}" for task in board.arenas for end in ("", "_ci_low", "_ci_high")]
            + [f"arena_rank_{task}" for task in board.arenas] + [f"arena_not_made_{task}" for task in board.arena_missing])


def arena_csv_cells(board: Leaderboard, name: str) -> list[object]:
    cells: list[object] = []
    for arena in board.arenas.values():
        figure = arena.ratings.ratings.get(name)
        cells += ["" if figure is None or part is None else float(part)
                  for part in ((None, None, None) if figure is None else (figure.value, figure.ci_low, figure.ci_high))]
    for arena in board.arenas.values():
        cells.append(arena.ratings.ranks.get(name, ""))
    return cells + list(board.arena_missing.values())

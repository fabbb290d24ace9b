"""The arena's figure per task, leaderboard_arena_<task>.png: each model's Elo rating with its interval, best
first (`capjudge.metrics.leaderboard.arena_column` computes them). Written beside the leaderboard's other
files, linked from leaderboard.md and inline in leaderboard.html (a data: URI, as the page's other figures: the
page is one self-contained file)."""

from __future__ import annotations

import io

from capjudge.metrics.arena.bradley_terry import ELO_ANCHOR
from capjudge.metrics.arena.verdict_plot import draw_ratings
from capjudge.metrics.leaderboard.arena_column import TaskArena
from capjudge.metrics.files.model_names import drawable_names
from capjudge.metrics.leaderboard.length_plot import task_file_names
from capjudge.metrics.leaderboard.table import Leaderboard

FILE_PREFIX = "leaderboard_arena_"


def arena_file_names(board: Leaderboard) -> dict[str, str]:
    """task -> its arena plot's file name (the task's name made safe, numbered when two would collide)."""
    return task_file_names(list(board.arenas), FILE_PREFIX)


def render_arena_pngs(board: Leaderboard) -> dict[str, bytes]:
    """file name -> PNG, one per task with an arena."""
    names = arena_file_names(board)
    return {names[task]: arena_png(arena) for task, arena in board.arenas.items()}


def arena_png(arena: TaskArena) -> bytes:
    """The models' ratings with their intervals, best first (Agg canvas, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    ratings = arena.ratings
    models = list(ratings.ranking)
    figure = Figure(figsize=(max(4.0, 0.9 * len(models) + 1.5), 3.4), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    positions = list(range(len(models)))
    draw_ratings(axes, positions, [ratings.ratings[m] for m in models], "o", "#2e86c1")
    axes.axhline(ELO_ANCHOR, color="#999999", linewidth=0.8)
    labels = drawable_names(models)
    axes.set_xticks(positions, [labels[m] for m in models], rotation=30, ha="right", fontsize=8, parse_math=False)
    axes.set_ylabel("Elo (mean model 1000)")
    axes.set_title(f"Arena {arena.task}: {arena.metric} battles", fontsize=10, parse_math=False)
    axes.grid(axis="y", alpha=0.3)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()

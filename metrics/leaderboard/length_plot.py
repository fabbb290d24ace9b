"""leaderboard_length_<task>.png: per task with a length-controlled column, each model's raw mean and its
length-controlled score side by side with their intervals, and the length coefficient beta with its interval.

One file per task, apart from leaderboard.png: that chart is one bar panel per main metric in the overall rank
order, and the comparison here needs its own order (the length-controlled ranking, so the models that move are
seen moving) and its own panel (beta); it is also embedded beside its task's table on the page, where a panel
of a shared chart could not be. Drawn from the board only: the raw means and intervals are the table's
estimates and the length-controlled scores and beta are the `LengthControlled` result the column shows
(`capjudge.metrics.leaderboard.length_column`); nothing is computed again.

Models run from the top in the length-controlled order (best first); each row holds the raw mean (grey open
circle, a little above) and the length-controlled score (blue square, a little below), joined by a thin line,
each with its interval as whiskers. A row's label gives both ranks (raw #2 -> LC #1) and is red when the model
is in a pair whose order changes (the table note's list). Where length-controlled scores leave the main
metric's scale, the title counts them and the scale's ends in view are drawn dashed. Names are data: drawn as text (no mathtext), line
breaks and other control characters shown as visible marks, long names cut in the middle.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from capjudge.metrics.leaderboard.layout import decimals
from capjudge.metrics.leaderboard.length_column import NO_CAPTIONS_WARNING
from capjudge.metrics.files.model_names import drawable_names
from capjudge.metrics.leaderboard.table import Leaderboard
from capjudge.metrics.statistics.value_ci import Scale, ValueCI

FILE_PREFIX = "leaderboard_length_"
_RAW, _CONTROLLED, _FLIPPED = "#7f8c8d", "#2e86c1", "#c0392b"
_UNSAFE_IN_FILE_NAME = re.compile(r"[^A-Za-z0-9_.-]")
_TASK_IN_FILE_NAME = 60  # so that an image line of leaderboard.md stays within its 120 columns


@dataclass(frozen=True)
class LengthPlotRow:
    model: str
    label: str  # as drawn: the name made safe to draw, and both ranks
    raw: ValueCI  # the table's mean with its interval
    controlled: ValueCI  # the length-controlled column's score with its interval
    raw_rank: int
    controlled_rank: int
    flipped: bool  # in a pair whose order changes between the raw and the length-controlled ranking


@dataclass(frozen=True)
class LengthPlot:
    """What one task's plot draws, rows in the length-controlled order (best first)."""

    task: str
    metric: str
    file_name: str
    rows: tuple[LengthPlotRow, ...]
    beta: ValueCI
    n_flips: int
    places: int
    confidence: float
    scale: Scale | None = None  # the main metric's scale: its ends are drawn, and figures beyond it counted
    n_outside: int = 0  # rows whose length-controlled score or interval leaves the scale (⚠ in the table)


@dataclass(frozen=True)
class DrawnLengthPlot:
    """The figure with the artists that carry its numbers (what a test reads back)."""

    plot: LengthPlot
    figure: Any  # matplotlib.figure.Figure
    raw: Any  # ErrorbarContainer: markers at the rows' raw means, whiskers at their intervals
    controlled: Any  # ErrorbarContainer: the length-controlled scores
    beta: Any  # ErrorbarContainer: beta and its interval
    labels: tuple[str, ...]  # the rows' labels, top to bottom
    beta_title: Any  # Text: beta with its interval in words, over beta's panel

    def png(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", metadata={"Software": None})  # same board, same bytes
        return buffer.getvalue()


def length_plots(board: Leaderboard) -> dict[str, LengthPlot]:
    """task -> its plot, for every task with length-controlled scores (none when the column is off, none where
    the data do not identify beta: a plot of numbers that are not results would show them as results)."""
    names = file_names(board)
    return {task: _plot(board, task, names[task]) for task in names}


def file_names(board: Leaderboard) -> dict[str, str]:
    """task -> its plot's file name: the task's name with anything but letters, digits, `_`, `.` and `-`
    replaced (a task name is data), numbered when two tasks would share a name."""
    return task_file_names([task for task, control in board.length_control.items() if control.identified], FILE_PREFIX)


def task_file_names(tasks: list[str], prefix: str) -> dict[str, str]:
    """task -> `prefix` + the task's name made safe, `.png` (the arena's plots are named the same way)."""
    names: dict[str, str] = {}
    for task in tasks:
        stem = prefix + _UNSAFE_IN_FILE_NAME.sub("_", task)[:_TASK_IN_FILE_NAME]
        name, number = f"{stem}.png", 2
        while name in names.values():
            name, number = f"{stem}_{number}.png", number + 1
        names[task] = name
    return names


def render_length_pngs(board: Leaderboard) -> dict[str, bytes]:
    """file name -> PNG, one per task with length-controlled scores."""
    return {plot.file_name: draw_length_plot(plot).png() for plot in length_plots(board).values()}


def missing_plot_note(board: Leaderboard, task: str) -> str:
    """Why a task that could have a plot has none ('' when it has one, when length control is off, when the
    task's main metric is not a score, or when the task has only one model: nothing to say there)."""
    column = board.task_rank_columns.get(task)
    control = board.length_control.get(task)
    if (not board.settings.length_control or (control is not None and control.identified) or column is None
            or column.kind != "score" or sum(task in row.n_items for row in board.rows) < 2):
        return ""
    if control is not None:
        why = "the data do not identify its length coefficient (see the note above)"
    elif task in board.length_undefined:
        why = "its length coefficient is undefined (see the note above)"
    elif any(w.startswith(f"{task}: {NO_CAPTIONS_WARNING}") for w in board.warnings):
        why = "a run's judged captions are not logged (see the warnings)"
    else:
        why = f"fewer than two models have judged items of {column.metric} with their captions logged"
    return f"No length-controlled plot for this task: {why}."


def plot_caption(plot: LengthPlot) -> str:
    """What the plot shows, in words (under it on the page, beside its link in leaderboard.md)."""
    return (f"{plot.file_name}: each model's raw mean {plot.metric} (grey circle) and its length-controlled score "
            f"(blue square) with their {plot.confidence:.0%} CIs, models ordered by the length-controlled ranking "
            f"(labels give both ranks; red: the model is in a pair whose order changes), and below, beta with "
            f"its CI.")


def _plot(board: Leaderboard, task: str, file_name: str) -> LengthPlot:
    control = board.length_control[task]
    column = board.task_rank_columns[task]
    rows = [row for row in board.rows if row.name in control.fit.scores]
    raw = {row.name: ValueCI(row.estimates[column.key].value, row.estimates[column.key].ci_low,
                             row.estimates[column.key].ci_high) for row in rows}
    controlled = {row.name: control.fit.scores[row.name] for row in rows}
    raw_ranks = _ranks(raw, column.higher_is_better)
    controlled_ranks = _ranks(controlled, column.higher_is_better)
    flipped = {name for pair in control.flips for name in pair}
    labels = drawable_names([row.name for row in rows])
    ordered = sorted(rows, key=lambda row: (controlled_ranks[row.name], raw_ranks[row.name], row.name))
    return LengthPlot(
        task=task, metric=column.metric, file_name=file_name,
        rows=tuple(LengthPlotRow(row.name, f"{labels[row.name]}\nraw #{raw_ranks[row.name]} → LC "
                                           f"#{controlled_ranks[row.name]}", raw[row.name], controlled[row.name],
                                 raw_ranks[row.name], controlled_ranks[row.name], row.name in flipped)
                   for row in ordered),
        beta=control.fit.beta, n_flips=len(control.flips), places=decimals(column, rows),
        confidence=board.settings.confidence, scale=column.scale,
        n_outside=sum(bool(controlled[row.name].outside(column.scale)) for row in rows),
    )


def _ranks(values: Mapping[str, ValueCI], higher_is_better: bool) -> dict[str, int]:
    """Competition ranks (1, 2, 2, 4) of the values shown, as the table's # column ranks."""
    from scipy.stats import rankdata

    names = list(values)
    points = np.array([values[name].value for name in names], dtype=float)
    signed = -points if higher_is_better else points
    return {name: int(rank) for name, rank in zip(names, rankdata(signed, method="min"))}


def draw_length_plot(plot: LengthPlot) -> DrawnLengthPlot:
    """Agg canvas: no display needed and no pyplot global state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = len(plot.rows)
    figure = Figure(figsize=(6.4, 2.1 + 0.55 * n), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    # Two subfigures, each laid out on its own: long model names narrow the scores' axes, not beta's, and
    # every title is centred on the figure's width (over an axes narrowed by long names it would be cut off).
    top, bottom = figure.subfigures(2, 1, height_ratios=[0.55 * n + 1.1, 1.0])
    scores, slope = top.subplots(), bottom.subplots()
    positions = np.arange(n)[::-1].astype(float)  # the best model on top
    raw = _errorbar(scores, [r.raw for r in plot.rows], positions + 0.17, fmt="o", color=_RAW, fill=False,
                    label="raw mean")
    controlled = _errorbar(scores, [r.controlled for r in plot.rows], positions - 0.17, fmt="s", color=_CONTROLLED,
                           fill=True, label="length-controlled")
    for row, y in zip(plot.rows, positions):
        if row.raw.value is not None and row.controlled.value is not None:
            scores.plot([row.raw.value, row.controlled.value], [y + 0.17, y - 0.17], color="#bbbbbb", linewidth=0.8,
                        zorder=0)
    labels = tuple(r.label for r in plot.rows)
    scores.set_yticks(positions, labels, fontsize=8, parse_math=False)
    for tick, row in zip(scores.get_yticklabels(), plot.rows):
        tick.set_color(_FLIPPED if row.flipped else "#222222")
    scores.set_ylim(-0.6, n - 0.4)
    scores.set_xlabel(f"{plot.metric} ({plot.confidence:.0%} CIs)", fontsize=9, parse_math=False)
    scores.grid(axis="x", alpha=0.3)
    scores.legend(loc="best", fontsize=8, frameon=False)
    changes = ("no pair of models changes order" if plot.n_flips == 0 else
               f"{plot.n_flips} pair{'s' if plot.n_flips > 1 else ''} of models change{'s' if plot.n_flips == 1 else ''} order")
    if plot.scale is not None and plot.n_outside:
        changes += (f"\n{plot.n_outside} length-controlled score{'s' if plot.n_outside > 1 else ''} outside the "
                    f"{plot.scale.text()} scale (dashed: its ends)")
        low, high = scores.get_xlim()
        for end in (plot.scale.low, plot.scale.high):
            if low <= end <= high:
                scores.axvline(end, color="#b9770e", linestyle="--", linewidth=0.9, zorder=0)
    top.suptitle("\n".join([*textwrap.wrap(f"{plot.task}: raw vs length-controlled, in the length-controlled "
                                           "order", 75), changes]), fontsize=10, parse_math=False)
    beta = _errorbar(slope, [plot.beta], np.zeros(1), fmt="D", color="#333333", fill=True, label="beta")
    slope.axvline(0.0, color="#999999", linewidth=0.8)
    ends = [v for v in (plot.beta.value, plot.beta.ci_low, plot.beta.ci_high, 0.0) if v is not None]
    pad = 0.1 * max(max(ends) - min(ends), 1e-9)
    slope.set_xlim(min(ends) - pad, max(ends) + pad)
    slope.set_yticks([])
    slope.set_ylim(-1, 1)
    beta_title = bottom.suptitle(_beta_text(plot), fontsize=9, parse_math=False)
    slope.set_xlabel(f"beta: {plot.metric} points per SD of log words", fontsize=8, parse_math=False)
    return DrawnLengthPlot(plot, figure, raw, controlled, beta, labels, beta_title)


def _errorbar(axes: Any, figures: list[ValueCI], y: np.ndarray, *, fmt: str, color: str, fill: bool, label: str) -> Any:
    """Markers at the values, whiskers to the interval's ends (none where a figure has no interval)."""
    values = np.array([np.nan if f.value is None else f.value for f in figures], dtype=float)
    lower = np.array([0.0 if f.ci_low is None or f.value is None else f.value - f.ci_low for f in figures])
    upper = np.array([0.0 if f.ci_high is None or f.value is None else f.ci_high - f.value for f in figures])
    return axes.errorbar(values, y, xerr=np.vstack([lower, upper]), fmt=fmt, color=color, ecolor=color, capsize=3,
                         markersize=6, markerfacecolor=color if fill else "white", label=label)


def _beta_text(plot: LengthPlot) -> str:
    beta, places = plot.beta, plot.places
    if beta.value is None:
        return "beta: undefined"
    if beta.ci_low is None or beta.ci_high is None:
        return f"beta = {beta.value:+.{places}f} (no CI: no bootstrap resamples)"
    reading = ("CI above 0: longer captions score higher" if beta.ci_low > 0 else
               "CI below 0: shorter captions score higher" if beta.ci_high < 0 else "CI includes 0")
    return f"beta = {beta.value:+.{places}f} [{beta.ci_low:+.{places}f}, {beta.ci_high:+.{places}f}]; {reading}"

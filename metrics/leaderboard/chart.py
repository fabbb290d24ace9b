"""leaderboard.png: one bar chart per main metric, models in rank order, with CI whiskers."""

from __future__ import annotations

import io
import math

from capjudge.metrics.files.model_names import drawable_names
from capjudge.metrics.leaderboard.table import Leaderboard


def render_chart_png(board: Leaderboard) -> bytes:
    """One bar chart per main metric, models in rank order, CI whiskers. Agg canvas: no display needed and no
    pyplot global state."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [c for c in board.main_columns if any(row.estimates[c.key].value is not None for row in board.rows)]
    n_cols = min(3, max(1, len(panels)))
    n_rows = max(1, math.ceil(len(panels) / n_cols))
    width = max(4.0, 0.9 * len(board.rows) + 1.5)
    figure = Figure(figsize=(width * n_cols, 3.4 * n_rows), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    if not panels:
        axes = figure.add_subplot(1, 1, 1)
        axes.text(0.5, 0.5, "no metric values to plot", ha="center", va="center")
        axes.set_axis_off()
    for index, column in enumerate(panels):
        axes = figure.add_subplot(n_rows, n_cols, index + 1)
        rows = [row for row in board.rows if row.estimates[column.key].value is not None]
        values = [row.estimates[column.key].value for row in rows]
        lower = [v - e.ci_low if e.ci_low is not None else 0.0 for v, e in zip(values, (r.estimates[column.key] for r in rows))]
        upper = [e.ci_high - v if e.ci_high is not None else 0.0 for v, e in zip(values, (r.estimates[column.key] for r in rows))]
        colours = ["#c0392b" if (row.comparison_for(column) and row.comparison_for(column).significant) else "#2e86c1" for row in rows]
        positions = list(range(len(rows)))
        axes.bar(positions, values, color=colours, yerr=[lower, upper], capsize=4, ecolor="#333333")
        # Names and metrics are data: `$...$` in one is text, not mathtext to typeset (or to fail on); a line
        # break or a 300-character name is shown as one line of a sensible length.
        labels = drawable_names([row.name for row in rows])
        axes.set_xticks(positions, [labels[row.name] for row in rows], rotation=30, ha="right", fontsize=8,
                        parse_math=False)
        axes.set_title(column.label, fontsize=10, parse_math=False)
        axes.grid(axis="y", alpha=0.3)
    figure.suptitle(f"Means with {board.settings.confidence:.0%} bootstrap CIs (red: significantly worse than the top model)", fontsize=10)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()

"""The arena report's figure, OUT/arena_<task>.png: per judge (panel member), each model's Bradley-Terry Elo
rating with its interval beside its length-controlled rating, models in the raw ranking's order, the judge's
position consistency and preference fairness in the panel's title. The verdict file's stamp is in a PNG text
chunk (as the sensitivity plot's), so a rerun replaces its own figure only."""

from __future__ import annotations

import io

from capjudge.metrics.arena.bradley_terry import ELO_ANCHOR
from capjudge.metrics.arena.verdict_report import VerdictReport
from capjudge.metrics.files.model_names import drawable_names
from capjudge.metrics.sensitivity.outputs import PLOT_STAMP_KEY
from capjudge.metrics.statistics.value_ci import ValueCI

_RAW, _CONTROLLED = "#2e86c1", "#d35400"


def draw_ratings(axes, positions: list[float], figures: list[ValueCI], marker: str, colour: str, label: str | None = None) -> None:
    """Each rating as a point and its interval as a bar between the interval's own ends, not as distances from
    the rating: a percentile interval need not contain its rating (a skewed bootstrap, or the last digits of
    a zero-width one), and errorbar refuses a negative distance. A figure without an interval is a point."""
    values = [f.value if f.value is not None else float("nan") for f in figures]
    lows = [f.ci_low if f.ci_low is not None else v for f, v in zip(figures, values)]
    highs = [f.ci_high if f.ci_high is not None else v for f, v in zip(figures, values)]
    axes.errorbar(positions, [(low + high) / 2 for low, high in zip(lows, highs)],
                  yerr=[(high - low) / 2 for low, high in zip(lows, highs)], fmt="none", capsize=4, color=colour)
    axes.plot(positions, values, marker, color=colour, label=label)


def verdict_png(report: VerdictReport) -> bytes:
    """One panel per judge (Agg canvas, no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = max(1, len(report.members))
    width = max(4.5, 0.9 * len(report.models) + 2.0)
    figure = Figure(figsize=(width, 3.4 * panels), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    labels = drawable_names(list(report.models)) if report.models else {}
    for index, member in enumerate(report.members or (None,)):
        axes = figure.add_subplot(panels, 1, index + 1)
        if member is None or member.overall.ratings is None:
            reason = "no verdicts" if member is None else member.overall.no_ratings
            axes.text(0.5, 0.5, f"No ranking: {reason}"[:120], ha="center", va="center", fontsize=8,
                      transform=axes.transAxes, parse_math=False)
            axes.set_axis_off()
            continue
        ratings = member.overall.ratings
        models = list(ratings.ranking)
        positions = list(range(len(models)))
        draw_ratings(axes, [p - 0.1 for p in positions], [ratings.ratings[m] for m in models], "o", _RAW, "Bradley-Terry")
        if member.length_controlled is not None:
            draw_ratings(axes, [p + 0.1 for p in positions], [member.length_controlled.ratings[m] for m in models],
                         "s", _CONTROLLED, "length-controlled")
        axes.axhline(ELO_ANCHOR, color="#999999", linewidth=0.8)
        axes.set_xticks(positions, [labels[m] for m in models], rotation=20, ha="right", fontsize=8, parse_math=False)
        axes.set_ylabel("Elo (mean model 1000)")
        bias = member.overall.bias
        consistency = "—" if bias.consistency.value is None else f"{bias.consistency.value:.2f}"
        fairness = "—" if bias.fairness.value is None else f"{bias.fairness.value:+.2f}"
        axes.set_title(f"{member.member}: position consistency {consistency}, preference fairness {fairness}",
                       fontsize=9, parse_math=False)
        axes.grid(axis="y", alpha=0.3)
        axes.legend(fontsize=7, loc="best")
    figure.suptitle(f"Arena {report.task}: {report.judge}"[:100], fontsize=10, parse_math=False)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={PLOT_STAMP_KEY: report.stamp})
    return buffer.getvalue()

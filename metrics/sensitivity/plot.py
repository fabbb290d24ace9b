"""sensitivity_<task>.png: per scorer, every measured (perturbation, dimension) shift with its CI, coloured by
whether the judge passed, beside the zero line (a sound judge's "down" rows sit left of it)."""

from __future__ import annotations

import io

from capjudge.metrics.sensitivity.outputs import PLOT_STAMP_KEY
from capjudge.metrics.sensitivity.report import SensitivityReport

_PASSED, _FAILED = "#2e86c1", "#c0392b"


def render_shifts_png(report: SensitivityReport, stamp: str | None = None) -> bytes:
    """Agg canvas: no display needed and no pyplot global state. `stamp` (the run's, `outputs.run_stamp`) goes
    into a PNG text chunk, so a later run knows whose plot it would replace."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    per_scorer = [[row for row in report.rows if row.scorer == scorer and row.shift is not None]
                  for scorer in report.scorers]
    height = max(2.5, 0.28 * max((len(rows) for rows in per_scorer), default=1) + 1.2)
    figure = Figure(figsize=(6.5 * len(report.scorers), height), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    for index, (scorer, rows) in enumerate(zip(report.scorers, per_scorer)):
        axes = figure.add_subplot(1, len(report.scorers), index + 1)
        if not rows:
            axes.text(0.5, 0.5, "no pair judged on both sides", ha="center", va="center")
            axes.set_axis_off()
            continue
        positions = list(range(len(rows)))[::-1]  # the first row on top, as in the table
        for position, row in zip(positions, rows):
            shift = row.shift
            assert shift is not None
            colour = _PASSED if shift.passed else _FAILED
            axes.errorbar(shift.mean_shift, position, xerr=[[shift.mean_shift - shift.interval.low],
                                                             [shift.interval.high - shift.mean_shift]],
                          fmt="o", color=colour, ecolor=colour, capsize=3)
        axes.axvline(0.0, color="#333333", linewidth=0.8)
        # Names are data: `$...$` in one is text, not mathtext.
        axes.set_yticks(positions, [f"{r.perturbation} / {r.dimension} ({r.shift.expected})" for r in rows],
                        fontsize=8, parse_math=False)
        axes.set_xlabel("perturbed - original (mean shift)", fontsize=9)
        axes.set_title(scorer, fontsize=10, parse_math=False)
        axes.grid(axis="x", alpha=0.3)
    figure.suptitle(f"{report.task}: shifts with {report.confidence:.0%} clip-bootstrap CIs "
                    "(blue: passes, red: fooled)", fontsize=10, parse_math=False)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={PLOT_STAMP_KEY: stamp} if stamp else None)
    return buffer.getvalue()

"""One table cell, one column of them, and how a figure becomes a cell: its digits, its interval, its marks.

Shared by every table of the leaderboard's sections (`capjudge.metrics.leaderboard.layout`), which the
Markdown and HTML pages render alike.

Marks after a value: ▼ a model significantly worse than the column's top model (Holm-corrected paired
permutation test); ⚠ a figure outside its score's scale (the range its judge declares, e.g. G-VEval 0-100,
AnyCap 0-4: `MetricColumn.scale`): the value or an end of its interval is no score the judge could give, a
length-controlled score extrapolated past the scale or an interval of a few items, so it is never shown as a
plain number beside real ones. The cell's note (the page's tooltip) says which figure and the scale, and the
section says it once more under its tables (`out_of_scale_note`), for the Markdown that has no tooltips.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from capjudge.metrics.leaderboard.stats import Comparison, Estimate
from capjudge.metrics.leaderboard.table import LeaderboardRow, MetricColumn
from capjudge.metrics.statistics.value_ci import Scale, ValueCI

WORSE_MARK = "▼"
OUT_OF_SCALE_MARK = "⚠"
EMPTY = "—"
_PARTS = {"value": "the value", "ci_low": "the interval's low end", "ci_high": "the interval's high end"}


@dataclass(frozen=True)
class Cell:
    """One table cell: the value, its interval (shown after it, or under it in HTML), the ▼ mark, the key the
    HTML sorts by, a longer description (the HTML's tooltip), and why the figure is outside its scale (shown
    as ⚠; '' when it is not)."""

    value: str
    interval: str = ""
    mark: str = ""
    sort: str = ""
    note: str = ""
    out_of_scale: OutOfScale | None = None

    @property
    def text(self) -> str:
        flag = OUT_OF_SCALE_MARK if self.out_of_scale else ""
        return " ".join(part for part in (self.value, self.interval, self.mark, flag) if part)

    @property
    def tooltip(self) -> str:
        return "; ".join(part for part in (self.note, self.out_of_scale.text if self.out_of_scale else "") if part)


@dataclass(frozen=True)
class OutOfScale:
    """Which parts of a figure (`value`, `ci_low`, `ci_high`) lie outside the scale of which metric."""

    parts: tuple[str, ...]
    scale: Scale
    metric: str

    @property
    def where(self) -> str:
        return f"the {self.scale.text()} scale of {self.metric}"

    @property
    def text(self) -> str:
        """`the value and its whole interval outside the 0-100 scale of gveval_mean: ...`"""
        if set(self.parts) == {"value", "ci_low", "ci_high"}:
            parts = "the value and its whole interval"
        elif set(self.parts) == {"ci_low", "ci_high"}:
            parts = "both ends of the interval"
        else:
            parts = " and ".join(_PARTS[part] for part in self.parts)
        return f"{parts} outside {self.where}: no score the judge can give"


@dataclass(frozen=True)
class DisplayColumn:
    header: str
    cells: tuple[Cell, ...]  # one per row of the section
    align: Literal["left", "right"] = "right"


def decimals(column: MetricColumn, rows: Sequence[LeaderboardRow]) -> int:
    """Rates: one decimal (of %). Scores: one when some model's value is 10 or more, else two."""
    if column.kind == "rate":
        return 1
    values = [abs(row.estimates[column.key].value) for row in rows if row.estimates[column.key].value is not None]
    return 1 if any(v >= 10 for v in values) else 2  # type: ignore[arg-type]


def scaled(value: float, column: MetricColumn) -> float:
    return 100 * value if column.kind == "rate" else value


def sort_key(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else repr(float(value))


def header(column: MetricColumn, prefix: str = "", ci_in_header: bool = False, confidence: float = 0.95) -> str:
    unit = " (%)" if column.kind == "rate" else ""
    name = column.metric.removeprefix(prefix)
    return f"{name}{unit}" + (f" [{confidence:.0%} CI]" if ci_in_header else "")


def flagged(cell: Cell, figure: ValueCI, scale: Scale | None, metric: str) -> Cell:
    """`cell` with the ⚠ flag and its reason when `figure` leaves `scale`."""
    outside = figure.outside(scale)
    if not outside or scale is None:
        return cell
    return replace(cell, out_of_scale=OutOfScale(outside, scale, metric))


def estimate_cell(
    estimate: Estimate,
    column: MetricColumn,
    places: int,
    comparison: Comparison | None = None,
    logged_bounds: tuple[Estimate, Estimate] | None = None,
) -> Cell:
    if estimate.value is None:
        return Cell(EMPTY)
    spelled = lambda v: f"{scaled(v, column):.{places}f}"  # noqa: E731
    interval = ""
    low, high = estimate.ci_low, estimate.ci_high
    if (low is None or high is None) and logged_bounds is not None:
        low, high = logged_bounds[0].value, logged_bounds[1].value
    if low is not None and high is not None:
        interval = f"[{spelled(low)}, {spelled(high)}]"
    elif estimate.source == "harness":
        interval = "(no CI)"
    note = f"{estimate.n} items" if estimate.source == "samples" else "lmms-eval's aggregate (no per-item log)"
    if estimate.noise_share is not None:
        note += f"; judge noise {estimate.noise_share:.0%} of the CI's width (k={estimate.replies})"
    worse = comparison is not None and comparison.significant
    cell = Cell(spelled(estimate.value), interval, WORSE_MARK if worse else "", sort_key(estimate.value), note)
    return flagged(cell, ValueCI(estimate.value, low, high), column.scale, column.metric)


def value_cell(value: float | None, column: MetricColumn, places: int) -> Cell:
    if value is None:
        return Cell(EMPTY)
    cell = Cell(f"{scaled(value, column):.{places}f}", sort=sort_key(value))
    return flagged(cell, ValueCI(value), column.scale, column.metric)


def interval_cell(figure: ValueCI, places: int, signed: bool = False) -> Cell:
    if figure.value is None:
        return Cell(EMPTY, note="not defined for this run's items")
    spelled = (lambda v: f"{v:+.{places}f}") if signed else (lambda v: f"{v:.{places}f}")  # noqa: E731
    interval = ""
    if figure.ci_low is not None and figure.ci_high is not None:
        interval = f"[{spelled(figure.ci_low)}, {spelled(figure.ci_high)}]"
    return Cell(spelled(figure.value), interval, sort=sort_key(figure.value))


def p_cell(comparison: Comparison | None) -> Cell:
    if comparison is None or comparison.p_adjusted is None:
        return Cell(EMPTY)
    return Cell(f"{comparison.p_adjusted:.3g}", sort=sort_key(comparison.p_adjusted),
                note=f"uncorrected p {comparison.p_value:.3g}" if comparison.p_value is not None else "")


def noise_cell(estimate: Estimate) -> Cell:
    if estimate.noise_share is None:
        why = "one reply per item" if estimate.replies == 1 else "no reply value behind this metric"
        return Cell(f"{EMPTY} (k={estimate.replies})", note=f"judge noise not measurable: {why}")
    return Cell(f"{estimate.noise_share:.0%} (k={estimate.replies})", sort=sort_key(estimate.noise_share))


def rank_cell(rank: int | None) -> Cell:
    return Cell(EMPTY if rank is None else str(rank), sort=sort_key(None if rank is None else float(rank)))


def count_cell(count: int | None) -> Cell:
    return Cell("?" if count is None else str(count), sort=sort_key(None if count is None else float(count)),
                note="" if count is not None else "no per-sample log")


def out_of_scale_note(rows: Sequence[LeaderboardRow], columns: Sequence[DisplayColumn]) -> str:
    """One sentence naming every flagged figure of a section's tables ('' when none is flagged)."""
    by_scale: dict[str, list[str]] = {}
    for column in columns:
        for row, cell in zip(rows, column.cells):
            if cell.out_of_scale is not None:
                shown = " ".join(part for part in (cell.value, cell.interval) if part)
                by_scale.setdefault(cell.out_of_scale.where, []).append(f"{row.name}, {column.header}: {shown}")
    return " ".join(f"{OUT_OF_SCALE_MARK} Outside {where} (no score the judge can give: an extrapolation, or an "
                    f"interval of a few items): {'; '.join(listed)}." for where, listed in by_scale.items())

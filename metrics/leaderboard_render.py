"""Writers for a `Leaderboard`: leaderboard.md, leaderboard.csv, leaderboard.png and a self-contained
leaderboard.html (no network: inline CSS and JS, the chart as a data URI).

Display conventions: scores keep the task's own scale (one decimal from 10 up, else two); rates are shown in
% in md/html and as fractions in the CSV (the CSV is for programs). A ▼ after a value marks a model that is
significantly worse than the column's top model (Holm-corrected paired permutation test).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import math
from dataclasses import dataclass
from pathlib import Path

from capjudge.metrics.leaderboard import Leaderboard, LeaderboardRow, MetricColumn
from capjudge.metrics.leaderboard_stats import Comparison, Estimate

WORSE_MARK = "▼"
USAGE_FIELDS = ("requests", "prompt_tokens", "completion_tokens", "cached_items")


@dataclass(frozen=True)
class LeaderboardFiles:
    markdown: Path
    csv: Path
    html: Path
    png: Path


def write_leaderboard(board: Leaderboard, out_dir: Path) -> LeaderboardFiles:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = LeaderboardFiles(
        out_dir / "leaderboard.md", out_dir / "leaderboard.csv", out_dir / "leaderboard.html", out_dir / "leaderboard.png"
    )
    png = render_chart_png(board)
    files.png.write_bytes(png)
    files.markdown.write_text(render_markdown(board), encoding="utf-8")
    write_csv(board, files.csv)
    files.html.write_text(render_html(board, png), encoding="utf-8")
    return files


# ---------------------------------------------------------------------------------------------------------
# Cell text
# ---------------------------------------------------------------------------------------------------------


def _number(value: float, column: MetricColumn) -> str:
    if column.kind == "rate":
        return f"{100 * value:.1f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def format_estimate(estimate: Estimate, column: MetricColumn, comparison: Comparison | None = None) -> str:
    if estimate.value is None:
        return "—"
    text = _number(estimate.value, column) + ("%" if column.kind == "rate" else "")
    if estimate.ci_low is not None and estimate.ci_high is not None:
        text += f" [{_number(estimate.ci_low, column)}, {_number(estimate.ci_high, column)}]"
    elif estimate.source == "harness":
        text += " (no CI)"
    if comparison is not None and comparison.significant:
        text += f" {WORSE_MARK}"
    return text


def _difference_text(comparison: Comparison | None, column: MetricColumn) -> str:
    if comparison is None or comparison.difference is None:
        return "—"
    text = f"{comparison.difference:+.2f}"
    if comparison.ci_low is not None and comparison.ci_high is not None:
        text += f" [{comparison.ci_low:+.2f}, {comparison.ci_high:+.2f}]"
    return text


def _p_text(comparison: Comparison | None) -> str:
    if comparison is None or comparison.p_adjusted is None:
        return "—"
    return f"{comparison.p_adjusted:.3g}"


def _differs_text(row: LeaderboardRow, board: Leaderboard) -> str:
    column = board.rank_column
    if column is None:
        return "—"
    comparison = row.comparison_for(column)
    if comparison is None:
        return "top" if board.top(column) == row.name else "—"
    if comparison.significant is None:
        return "untestable"
    return "yes" if comparison.significant else "no"


def _header_cells(board: Leaderboard) -> list[str]:
    rank_label = board.rank_column.label if board.rank_column else "rank metric"
    cells = ["Rank", "Model"]
    cells += [c.label + (" (%)" if c.kind == "rate" else "") for c in board.columns]
    cells += [f"Δ {rank_label} vs top [CI]", "p (Holm)", "Differs from top", "Items", "Judge"]
    return cells


def _row_cells(row: LeaderboardRow, board: Leaderboard) -> list[str]:
    cells = [str(row.rank) if row.rank is not None else "—", row.name]
    cells += [format_estimate(row.estimates[c.key], c, row.comparison_for(c)) for c in board.columns]
    rank_comparison = row.comparison_for(board.rank_column) if board.rank_column else None
    cells += [
        _difference_text(rank_comparison, board.rank_column) if board.rank_column else "—",
        _p_text(rank_comparison),
        _differs_text(row, board),
        ", ".join(f"{task}: {n if n is not None else '?'}" for task, n in row.n_items.items()),
        "; ".join(f"{task}: {', '.join(labels) or 'not recorded'}" for task, labels in row.judges.items()),
    ]
    return cells


def _legend(board: Leaderboard) -> str:
    ranked = f"Ranked by {board.rank_column.label}. " if board.rank_column else ""
    return f"{ranked}{WORSE_MARK}: significantly worse than the column's top model. {board.method}"


# ---------------------------------------------------------------------------------------------------------
# Markdown and CSV
# ---------------------------------------------------------------------------------------------------------


def render_markdown(board: Leaderboard) -> str:
    def row_text(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    header = _header_cells(board)
    lines = ["# Leaderboard", ""]
    if board.warnings:
        lines += ["## Warnings", ""] + [f"- ⚠ {warning}" for warning in board.warnings] + [""]
    lines += [row_text(header), "|" + "|".join("---" for _ in header) + "|"]
    lines += [row_text(_row_cells(row, board)) for row in board.rows]
    lines += ["", _legend(board), ""]
    lines += _usage_lines(board)
    return "\n".join(lines)


def _usage_lines(board: Leaderboard) -> list[str]:
    """What judging each run cost, as the API reported it (items answered from the cache cost nothing)."""
    rows = [(row.name, task, usage) for row in board.rows for task, usage in row.usage.items()]
    if not rows:
        return []
    lines = ["## Judge usage", "", "| model | task | items | from cache | requests | prompt tokens | completion tokens |",
             "|---|---|---|---|---|---|---|"]
    for name, task, usage in rows:
        lines.append(f"| {name} | {task} | {usage.get('items', 0)} | {usage.get('cached_items', 0)} | "
                     f"{usage.get('requests', 0)} | {usage.get('prompt_tokens', 0):,} | {usage.get('completion_tokens', 0):,} |")
    return lines + [""]


def write_csv(board: Leaderboard, path: Path) -> None:
    header = ["rank", "model", "results_paths"]
    for column in board.columns:
        header += [column.key, f"{column.key}_ci_low", f"{column.key}_ci_high", f"{column.key}_n"]
        if column.kind == "score":
            header += [f"{column.key}_diff_vs_top", f"{column.key}_p_vs_top", f"{column.key}_p_holm", f"{column.key}_differs_from_top"]
    header += ["rank_metric", "top_model", "test"]
    tasks = list(dict.fromkeys(c.task for c in board.columns))
    header += [f"items_{task}" for task in tasks] + [f"judge_{task}" for task in tasks]
    header += [f"{name}_{task}" for task in tasks for name in USAGE_FIELDS]
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for row in board.rows:
            cells: list[object] = [row.rank if row.rank is not None else "", row.name, "; ".join(str(p) for p in row.results_paths)]
            for column in board.columns:
                estimate = row.estimates[column.key]
                cells += [_csv_value(estimate.value), _csv_value(estimate.ci_low), _csv_value(estimate.ci_high), estimate.n]
                if column.kind == "score":
                    comparison = row.comparison_for(column)
                    cells += [
                        _csv_value(comparison.difference if comparison else None),
                        _csv_value(comparison.p_value if comparison else None),
                        _csv_value(comparison.p_adjusted if comparison else None),
                        "" if comparison is None or comparison.significant is None else str(comparison.significant).lower(),
                    ]
            cells += [
                board.rank_column.key if board.rank_column else "",
                board.top(board.rank_column) or "" if board.rank_column else "",
                "paired permutation (sign-flip), Holm-corrected",
            ]
            cells += [row.n_items.get(task) if row.n_items.get(task) is not None else "" for task in tasks]
            cells += ["; ".join(row.judges.get(task, ())) for task in tasks]
            cells += [row.usage.get(task, {}).get(name, "") for task in tasks for name in USAGE_FIELDS]
            writer.writerow(cells)


def _csv_value(value: float | None) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else repr(float(value))


# ---------------------------------------------------------------------------------------------------------
# Chart
# ---------------------------------------------------------------------------------------------------------


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
        axes.set_xticks(positions, [row.name for row in rows], rotation=30, ha="right", fontsize=8)
        axes.set_title(column.label, fontsize=10)
        axes.grid(axis="y", alpha=0.3)
    figure.suptitle(f"Means with {board.settings.confidence:.0%} bootstrap CIs (red: significantly worse than the top model)", fontsize=10)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------------------

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; white-space: nowrap; }
td:nth-child(2), th:nth-child(2) { text-align: left; }
th { background: #f0f3f6; cursor: pointer; user-select: none; }
th[aria-sort="ascending"]::after { content: " ▲"; }
th[aria-sort="descending"]::after { content: " ▼"; }
.warnings { background: #fff4e5; border-left: 4px solid #e67e22; padding: 0.5em 1em; }
.method { max-width: 60em; font-size: 0.9em; color: #555; }
img { max-width: 100%; margin-top: 1em; }
"""

# Sorts by each cell's data-sort (numbers numerically, empty cells last), toggling direction per click.
_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (header, column) {
  header.addEventListener("click", function () {
    var table = header.closest("table"), body = table.tBodies[0];
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[column].getAttribute("data-sort"), y = b.cells[column].getAttribute("data-sort");
      if (x === "") return 1; if (y === "") return -1;
      var nx = parseFloat(x), ny = parseFloat(y), order;
      if (!isNaN(nx) && !isNaN(ny)) { order = nx - ny; } else { order = x.localeCompare(y); }
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
"""


def _sort_keys(row: LeaderboardRow, board: Leaderboard) -> list[str]:
    def key(value: float | None) -> str:
        return "" if value is None else repr(float(value))

    keys = [key(row.rank), row.name]
    keys += [key(row.estimates[c.key].value) for c in board.columns]
    comparison = row.comparison_for(board.rank_column) if board.rank_column else None
    keys += [key(comparison.difference if comparison else None), key(comparison.p_adjusted if comparison else None)]
    keys += [_differs_text(row, board)]
    keys += [key(sum(n for n in row.n_items.values() if n is not None)), ""]
    return keys


def render_html(board: Leaderboard, png: bytes) -> str:
    escape = html.escape
    header = "".join(f"<th>{escape(cell)}</th>" for cell in _header_cells(board))
    body_rows = []
    for row in board.rows:
        cells = "".join(
            f'<td data-sort="{escape(sort)}">{escape(text)}</td>' for text, sort in zip(_row_cells(row, board), _sort_keys(row, board))
        )
        body_rows.append(f"<tr>{cells}</tr>")
    warnings = ""
    if board.warnings:
        items = "".join(f"<li>⚠ {escape(w)}</li>" for w in board.warnings)
        warnings = f'<div class="warnings"><h2>Warnings</h2><ul>{items}</ul></div>'
    chart = base64.b64encode(png).decode("ascii")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Leaderboard</title>"
        f"<style>{_STYLE}</style></head><body><h1>Leaderboard</h1>{warnings}"
        f'<table class="sortable"><thead><tr>{header}</tr></thead><tbody>{"".join(body_rows)}</tbody></table>'
        f'<p class="method">{escape(_legend(board))} Click a column header to sort.</p>'
        f'<img alt="Bar charts of the main metrics with confidence-interval whiskers" src="data:image/png;base64,{chart}">'
        f"<script>{_SCRIPT}</script></body></html>\n"
    )

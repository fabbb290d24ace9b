"""Correlation plots for `capjudge correlate --plot DIR`: the pairs a tau-b rests on, and the scorers side by side.

Written in DIR:

* ``scatter_<scorer>__<target>.png`` — per judge and human target, every (judge, human) pair the report
  correlated, one point per pair (``expand``: one per annotator; ``mean``: one per item), the tau-b and its CI
  in the title. When no judge is given (MSVD-Eval with ``--baselines`` only) the baselines are scattered instead.
* ``tau_b.png`` — Kendall tau-b with CI whiskers for every scorer (judges, classic baselines) and the annotator
  ceiling (tau-b between annotators), one panel per human target.
* ``correlation.html`` — the same images inline as data URIs: one file, nothing fetched.

The pairs come from :func:`capjudge.metrics.statistics.correlation.build_pairs`, the function the report itself correlates,
so a scatter shows exactly the points behind its number.

Ties: human scores (1-5, or quarter steps for a mean) and integer judge scores pile many pairs on one spot. An
axis on which two different items share a value is jittered by a uniform offset of at most ``JITTER_FRACTION``
(0.3) of the smallest gap between its distinct values, so a point never crosses half-way to a neighbouring value
and the order of distinct values is kept; any other axis is drawn as is (in ``expand`` mode an item's pairs share
its judge score by construction: they stay in one vertical line, showing the annotators' spread). The offsets come from ``numpy.random.default_rng(seed)`` with the
report's ``--seed``, fresh for every plot: the same command draws the same picture. Coefficients are computed on
the true values, never on the jittered ones.

A coefficient that cannot be computed (fewer than 3 pairs, a constant side, an all-missing scorer) is never
drawn as a number: its scatter and its row in the chart say "not measurable" with the report's reason.
"""

from __future__ import annotations

import base64
import html
import io
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Literal

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from capjudge.judges.atomic_files import write_replacing
from capjudge.metrics.statistics.correlation import BootstrapSettings, Coefficient, build_pairs
from capjudge.metrics.human_correlation.correlation_report import ALL_ITEMS, CorrelationReport

JITTER_FRACTION = 0.3
HTML_NAME = "correlation.html"
CHART_NAME = "tau_b.png"
EntryKind = Literal["judge", "baseline", "ceiling"]
KIND_STYLE: dict[str, dict[str, Any]] = {
    "judge": {"color": "#1f5fa8", "marker": "o", "label": "judge"},
    "baseline": {"color": "#6c6c6c", "marker": "s", "label": "classic baseline"},
    "ceiling": {"color": "#1e8449", "marker": "D", "label": "annotator ceiling (annotator vs annotator)"},
}
NOT_MEASURABLE_COLOR = "#b03a2e"


class PlotDirectoryError(OSError):
    """The --plot directory cannot be created or written; the message names it."""


# ---------------------------------------------------------------------------------------------------------
# What is drawn
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScatterPanel:
    """One scorer against one human target: the true pairs, the jittered positions drawn, and tau-b."""

    scorer: str
    target: str
    judge: np.ndarray
    human: np.ndarray
    shown_judge: np.ndarray
    shown_human: np.ndarray
    tau_b: Coefficient
    n_items: int
    pairs_dropped: int

    @property
    def not_measurable(self) -> str | None:
        return self.tau_b.undefined_reason if self.tau_b.value is None else None

    @property
    def judge_jittered(self) -> bool:
        return not np.array_equal(self.judge, self.shown_judge)

    @property
    def human_jittered(self) -> bool:
        return not np.array_equal(self.human, self.shown_human)


@dataclass(frozen=True)
class TauEntry:
    """One row of the tau-b chart: a scorer, or a pair of annotators, against one target."""

    target: str
    label: str
    kind: EntryKind
    tau_b: Coefficient


@dataclass(frozen=True)
class DrawnScatter:
    panel: ScatterPanel
    figure: Figure
    points: PathCollection  # the drawn markers; their offsets are the plotted positions


@dataclass(frozen=True)
class DrawnChart:
    entries: tuple[TauEntry, ...]
    figure: Figure  # each measurable entry is one ErrorbarContainer in its panel's axes.containers


@dataclass(frozen=True)
class PlotFiles:
    html: Path
    chart: Path
    scatters: tuple[Path, ...]
    notes: tuple[str, ...]  # what could not be measured, one line each


def tie_jitter(values: np.ndarray, item_of_value: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``values`` plus a uniform offset within ±JITTER_FRACTION of the smallest gap between distinct values,
    when two different items share a value; unchanged otherwise."""
    if values.size == 0:
        return values.copy()
    per_item = np.unique(np.column_stack([values, item_of_value]), axis=0)[:, 0]  # each item's distinct values
    distinct = np.unique(per_item)
    if distinct.size == per_item.size:
        return values.copy()
    if distinct.size == 1:  # no gap to scale by: a width small against the value itself
        half_width = JITTER_FRACTION * max(1.0, abs(float(distinct[0]))) * 0.1
    else:
        half_width = JITTER_FRACTION * float(np.diff(distinct).min())
    return values + rng.uniform(-half_width, half_width, size=values.size)


def scatter_panels(
    report: CorrelationReport,
    scorers: Mapping[str, Sequence[float | None] | np.ndarray],
    targets: Mapping[str, Sequence[Any] | np.ndarray],
    scattered: Sequence[str],
    item_ids: Sequence[str],
) -> list[ScatterPanel]:
    """A panel per (scattered scorer, target), its pairs built by the report's own pairing."""
    panels = []
    for target, human in targets.items():
        for scorer in scattered:
            pairs = build_pairs(scorers[scorer], human, report.annotators, item_ids=item_ids)
            rng = np.random.default_rng(report.settings.seed)
            shown_judge = tie_jitter(pairs.judge, pairs.item_of_pair, rng)
            shown_human = tie_jitter(pairs.human, pairs.item_of_pair, rng)
            result = report.row(scorer, target, ALL_ITEMS).result
            panels.append(ScatterPanel(
                scorer=scorer, target=target, judge=pairs.judge, human=pairs.human,
                shown_judge=shown_judge, shown_human=shown_human, tau_b=result["kendall_b"],
                n_items=pairs.n_items, pairs_dropped=pairs.missing.pairs_dropped,
            ))
    return panels


def tau_entries(report: CorrelationReport, judges: Sequence[str]) -> list[TauEntry]:
    """Per target: the judges, then every other scorer (the classic baselines), then each annotator pair."""
    entries: list[TauEntry] = []
    targets = list(dict.fromkeys(row.target for row in report.rows if row.group is ALL_ITEMS))
    ceilings = {agreement.target: agreement for agreement in report.ceiling}
    for target in targets:
        rows = [row for row in report.rows if row.group is ALL_ITEMS and row.target == target]
        ordered = [r for r in rows if r.scorer in judges] + [r for r in rows if r.scorer not in judges]
        entries += [
            TauEntry(target, row.scorer, "judge" if row.scorer in judges else "baseline", row.result["kendall_b"])
            for row in ordered
        ]
        if target in ceilings:
            entries += [
                TauEntry(target, f"annotators {pair.first}~{pair.second}", "ceiling", pair.kendall_b)
                for pair in ceilings[target].annotator_pairs
            ]
    return entries


# ---------------------------------------------------------------------------------------------------------
# Labels
# ---------------------------------------------------------------------------------------------------------


def tau_label(tau_b: Coefficient) -> str:
    """tau-b on the report's -1..1 scale, 3 decimals, as the JSON report holds it: "τb 0.407 [0.331, 0.474]"."""
    if tau_b.value is None:
        return f"τb not measurable: {tau_b.undefined_reason}"
    if tau_b.ci_low is None:
        return f"τb {tau_b.value:.3f} (no CI: no bootstrap resamples)"
    return f"τb {tau_b.value:.3f} [{tau_b.ci_low:.3f}, {tau_b.ci_high:.3f}]"


def interval_note(settings: BootstrapSettings) -> str:
    if settings.n_resamples == 0:
        return "no confidence intervals (--bootstrap 0)"
    return (f"{settings.confidence:.0%} CIs: {settings.ci_method}, {settings.n_resamples} item-level bootstrap "
            f"resamples, seed {settings.seed}")


def scatter_title(panel: ScatterPanel) -> str:
    head = f"{panel.scorer} vs human: {panel.target}"
    if panel.not_measurable:
        return f"{head}\n" + "\n".join(textwrap.wrap(tau_label(panel.tau_b), 70))
    return f"{head}\n{tau_label(panel.tau_b)}, n = {panel.judge.size} pairs ({panel.n_items} items)"


# ---------------------------------------------------------------------------------------------------------
# Figures (an Agg canvas per figure: no display, no pyplot global state)
# ---------------------------------------------------------------------------------------------------------


def draw_scatter(panel: ScatterPanel, annotators: str) -> DrawnScatter:
    figure = Figure(figsize=(5.6, 4.8), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    points = axes.scatter(panel.shown_judge, panel.shown_human, s=14, alpha=0.45, color=KIND_STYLE["judge"]["color"],
                          edgecolors="none")
    axes.set_title(scatter_title(panel), fontsize=10)
    jittered = "; ties jittered"
    axes.set_xlabel(f"{panel.scorer} score" + (jittered if panel.judge_jittered else ""), fontsize=9)
    per_pair = "one point per annotator" if annotators == "expand" else "annotators' mean per item"
    axes.set_ylabel(f"human: {panel.target} ({per_pair}{jittered if panel.human_jittered else ''})", fontsize=9)
    axes.grid(alpha=0.25)
    if panel.judge.size == 0:  # matplotlib's default ±0.05 axes would read as data
        axes.set_xticks([])
        axes.set_yticks([])
    if panel.not_measurable:
        # At the top, under the markers: the one or two points there are stay visible.
        axes.text(0.5, 0.96, "not measurable\n" + "\n".join(textwrap.wrap(panel.not_measurable, 40)),
                  transform=axes.transAxes, ha="center", va="top", fontsize=12, color=NOT_MEASURABLE_COLOR,
                  bbox={"facecolor": "white", "edgecolor": NOT_MEASURABLE_COLOR}, zorder=1)
        points.set_zorder(2)
    return DrawnScatter(panel, figure, points)


def draw_tau_chart(entries: Sequence[TauEntry], settings: BootstrapSettings) -> DrawnChart:
    targets = list(dict.fromkeys(e.target for e in entries))
    labels = list(dict.fromkeys(e.label for e in entries))
    n_cols = min(3, max(1, len(targets)))
    n_rows = max(1, -(-len(targets) // n_cols))
    label_width = 0.075 * max((len(label) for label in labels), default=8)
    figure = Figure(figsize=(max(6.4, label_width + 3.2 * n_cols), 0.9 + n_rows * (0.8 + 0.32 * len(labels))), dpi=100,
                    layout="constrained")
    FigureCanvasAgg(figure)
    low, high = _x_range(entries)
    rows = {label: position for position, label in enumerate(labels)}  # first label on top (axis inverted)
    for index, target in enumerate(targets):
        axes = figure.add_subplot(n_rows, n_cols, index + 1)
        axes.set_xlim(low, high)
        axes.set_ylim(len(labels) - 0.5, -0.5)
        axes.axvline(0, color="#999999", linewidth=0.8)
        axes.set_yticks(range(len(labels)), labels if index % n_cols == 0 else [""] * len(labels), fontsize=8)
        axes.set_title(f"human: {target}", fontsize=10)
        axes.grid(axis="x", alpha=0.3)
        present = set()
        for entry in (e for e in entries if e.target == target):
            present.add(entry.label)
            y, style = rows[entry.label], KIND_STYLE[entry.kind]
            if entry.tau_b.value is None:
                axes.text((low + high) / 2, y, "not measurable", ha="center", va="center", fontsize=8,
                          color=NOT_MEASURABLE_COLOR, style="italic")
                continue
            value = entry.tau_b.value
            xerr = None
            if entry.tau_b.ci_low is not None:
                xerr = [[value - entry.tau_b.ci_low], [entry.tau_b.ci_high - value]]
            axes.errorbar(
                [value], [y], xerr=xerr, fmt=style["marker"], color=style["color"], capsize=3, markersize=5,
            )
        for label in labels:
            if label not in present:
                axes.text((low + high) / 2, rows[label], "—", ha="center", va="center", color="#999999")
    kinds = list(dict.fromkeys(e.kind for e in entries))
    handles = [Line2D([], [], linestyle="none", marker=KIND_STYLE[k]["marker"], color=KIND_STYLE[k]["color"],
                      label=KIND_STYLE[k]["label"]) for k in kinds]
    if handles:
        figure.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
    figure.suptitle("\n".join(textwrap.wrap(f"Kendall τb with {interval_note(settings)}", 90)), fontsize=10)
    return DrawnChart(tuple(entries), figure)


def _x_range(entries: Sequence[TauEntry]) -> tuple[float, float]:
    ends = [v for e in entries for v in (e.tau_b.value, e.tau_b.ci_low, e.tau_b.ci_high) if v is not None]
    if not ends:
        return -1.0, 1.0
    low, high = min(min(ends), 0.0), max(max(ends), 0.0)
    pad = 0.05 * max(high - low, 0.2)
    return max(-1.05, low - pad), min(1.05, high + pad)


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})  # no version string: same input, same bytes
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------------------
# Files and the page
# ---------------------------------------------------------------------------------------------------------


def prepare_plot_dir(directory: str | Path) -> Path:
    """Create DIR and prove it writable before any work is done; PlotDirectoryError names it otherwise."""
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".capjudge-write-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise PlotDirectoryError(f"--plot {directory}: cannot write plots there ({error.strerror or error})") from error
    return path


def write_plots(
    directory: str | Path,
    report: CorrelationReport,
    *,
    scorers: Mapping[str, Sequence[float | None] | np.ndarray],
    targets: Mapping[str, Sequence[Any] | np.ndarray],
    judges: Sequence[str],
    item_ids: Sequence[str],
    title: str,
) -> PlotFiles:
    """Draw every scatter and the tau-b chart, write the PNGs and the page into ``directory``."""
    out = prepare_plot_dir(directory)
    scattered = list(judges) or list(scorers)
    panels = scatter_panels(report, scorers, targets, scattered, item_ids)
    chart = draw_tau_chart(tau_entries(report, judges), report.settings)
    chart_png = png_bytes(chart.figure)
    write_replacing(out / CHART_NAME, chart_png)
    names = _unique_file_names(panels)
    figures_html, scatter_paths, notes = [], [], []
    for panel, name in zip(panels, names):
        png = png_bytes(draw_scatter(panel, report.annotators).figure)
        write_replacing(out / name, png)
        scatter_paths.append(out / name)
        figures_html.append(_figure_html(panel, name, png))
        if panel.not_measurable:
            notes.append(f"scatter {panel.scorer} vs {panel.target}: not measurable ({panel.not_measurable})")
    scattered_pairs = {(panel.scorer, panel.target) for panel in panels}
    notes += [f"τb chart, {e.label} vs {e.target}: not measurable ({e.tau_b.undefined_reason})"
              for e in chart.entries if e.tau_b.value is None and (e.label, e.target) not in scattered_pairs]
    page = _page_html(report, title, chart_png, figures_html, notes, judges_given=bool(judges))
    html_path = out / HTML_NAME
    write_replacing(html_path, page)
    return PlotFiles(html_path, out / CHART_NAME, tuple(scatter_paths), tuple(notes))


def _unique_file_names(panels: Sequence[ScatterPanel]) -> list[str]:
    """scatter_<scorer>__<target>.png with anything but letters, digits, '-', '.' replaced; a clash gets a number."""
    names: list[str] = []
    for panel in panels:
        stem = "scatter_" + "__".join(re.sub(r"[^A-Za-z0-9.-]+", "_", part).strip("_") or "x"
                                      for part in (panel.scorer, panel.target))
        name, counter = f"{stem}.png", 2
        while name in names:
            name, counter = f"{stem}_{counter}.png", counter + 1
        names.append(name)
    return names


def _template(name: str) -> Template:
    return Template(resources.files("capjudge.metrics").joinpath("templates", name).read_text(encoding="utf-8"))


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _figure_html(panel: ScatterPanel, file_name: str, png: bytes) -> str:
    caption = tau_label(panel.tau_b)
    counts = (f"{panel.judge.size} pairs from {panel.n_items} items"
              + (f"; {panel.pairs_dropped} pairs dropped (a score missing)" if panel.pairs_dropped else ""))
    return _template("correlation_figure.html").substitute(
        css_class="scatter not-measurable" if panel.not_measurable else "scatter",
        scorer=html.escape(panel.scorer), target=html.escape(panel.target), file=html.escape(file_name),
        points=panel.judge.size, src=_data_uri(png), alt=html.escape(scatter_title(panel).replace("\n", ": ")),
        heading=html.escape(f"{panel.scorer} vs human: {panel.target}"),
        caption=html.escape(caption), counts=html.escape(counts),
    )


def _page_html(report: CorrelationReport, title: str, chart_png: bytes, figures: Sequence[str],
               notes: Sequence[str], judges_given: bool) -> str:
    per_pair = ("one point per annotator's score (annotators expanded, as the G-VEval code pairs them)"
                if report.annotators == "expand" else "one point per item (annotators' mean)")
    scatter_note = "" if judges_given else (
        "<p>No judge scores were given, so the classic baselines are scattered.</p>")
    if report.group_field:  # the per-group coefficients are in the report's tables, not drawn
        scatter_note += f"<p>Plots cover all items, not each {html.escape(report.group_field)} group.</p>"
    notes_html = "" if not notes else (
        '<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    return _template("correlation_plots.html").substitute(
        title=html.escape(title), intervals=html.escape(interval_note(report.settings)),
        per_pair=html.escape(per_pair), jitter=f"{JITTER_FRACTION:g}", seed=report.settings.seed,
        chart_src=_data_uri(chart_png), chart_file=CHART_NAME, notes=notes_html, scatter_note=scatter_note,
        figures="\n".join(figures),
    )

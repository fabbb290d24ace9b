"""Writers for a `Leaderboard`: leaderboard.md, leaderboard.csv, leaderboard.png, a self-contained
leaderboard.html (`capjudge.metrics.leaderboard.html`) and, per task with a length-controlled column,
leaderboard_length_<task>.png (`capjudge.metrics.leaderboard.length_plot`).

leaderboard.md is for people, in a terminal as much as rendered: one section per task (its layout is
`capjudge.metrics.leaderboard.layout`), tables padded into columns and cut into tables no wider than
`MARKDOWN_WIDTH` characters (the rank and model columns start each), prose wrapped to the same width, long
model names shortened (the full names listed under the table). leaderboard.csv is for programs: one row per
model, every metric with its CI, n, replies per item, judge-noise share and test, every task's judge; it is
as wide as it needs to be, with rates as fractions. A task judged by a panel of judges adds its panel part to
leaderboard.md (`### Judge panel`) and, to leaderboard.csv after every other column, each member's value and
rank, the run's agreement figures (alpha, each member's offset), the models whose order flips between members,
then each pair of members' tau-b. Its `outside_scale` column names a row's figures outside their score's scale
(the pages' ⚠); `length_not_identified_<task>` says why a task's length-controlled figures are left empty.

Names are data, and both files are safe to open whatever a name holds: in leaderboard.md a name's HTML, `|`
and `\\` are escaped and control characters (a newline) are shown as their Unicode pictures (␊), so a name
never breaks a table or a line or becomes markup; in leaderboard.csv a text cell that
starts with `=`, `+`, `-`, `@`, a tab or a carriage return (which a spreadsheet would run as a formula) or with
`'` gets one more `'` in front (drop a leading `'` to get the exact text; numbers are written as numbers).
Every name is checked before any file is written (`capjudge.judges.output_paths`), each written whole or not at all.
"""

from __future__ import annotations

import csv
import io
import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from capjudge.judges.atomic_files import discard, publish_replacing, stage, write_replacing
from capjudge.judges.output_paths import check_output_paths, output_problem
from capjudge.judges.client.panel import (
    ALPHA_METRIC as PANEL_ALPHA,
    KENDALL_METRIC as PANEL_KENDALL,
    OFFSET_METRIC as PANEL_OFFSET,
    member_metric,
    pair_name,
)
from capjudge.metrics.leaderboard.arena_cells import arena_csv_cells, arena_csv_header
from capjudge.metrics.leaderboard.arena_plot import FILE_PREFIX as ARENA_PLOT_PREFIX, render_arena_pngs
from capjudge.metrics.leaderboard.arena_section import arena_markdown_lines, arena_section
from capjudge.metrics.leaderboard.panel import TaskPanel
from capjudge.metrics.leaderboard.table import Leaderboard, LeaderboardRow
from capjudge.metrics.statistics.value_ci import ValueCI
from capjudge.metrics.leaderboard.chart import render_chart_png
from capjudge.metrics.leaderboard.html import render_html
from capjudge.metrics.files.model_names import cut_names
from capjudge.metrics.files.outputs import OutputError, writable_folder
from capjudge.metrics.leaderboard.length_plot import (
    FILE_PREFIX as LENGTH_PLOT_PREFIX,
    LengthPlot,
    length_plots,
    missing_plot_note,
    plot_caption,
    render_length_pngs,
)
from capjudge.metrics.leaderboard.layout import (
    Cell,
    DisplayColumn,
    PanelSection,
    TaskSection,
    legend,
    task_sections,
)

MARKDOWN_WIDTH = 120
MODEL_NAME_WIDTH = 24  # longer names are shortened in the Markdown tables (see short_names)
USAGE_FIELDS = ("requests", "prompt_tokens", "completion_tokens", "cached_items")
# What a spreadsheet runs as a formula at the start of a cell (OWASP's list), and the apostrophe that escapes it.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")
# Markup in Markdown text: a `<` that opens a tag and an `&` that starts an entity (a lone `p < 0.05` is text).
_MARKUP = re.compile(r"<(?=[A-Za-z/!?])|&(?=#?\w+;)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CI_ENDS = ("", "_ci_low", "_ci_high")  # a panel figure and its interval's ends, as a panel run names them
FILE_NAMES = ("leaderboard.md", "leaderboard.csv", "leaderboard.html", "leaderboard.png")  # LeaderboardFiles' order
_PART_SUFFIX = dict(zip(("value", "ci_low", "ci_high"), _CI_ENDS))  # a ValueCI's part -> its CSV column suffix

__all__ = ["LeaderboardFiles", "render_chart_png", "render_html", "render_markdown", "write_csv", "write_leaderboard"]


@dataclass(frozen=True)
class LeaderboardFiles:
    markdown: Path
    csv: Path
    html: Path
    png: Path
    length_plots: tuple[Path, ...] = ()  # leaderboard_length_<task>.png, one per task with length-controlled scores
    arena_plots: tuple[Path, ...] = ()  # leaderboard_arena_<task>.png, one per task with an arena


def check_leaderboard_names(out_dir: Path, flag: str = "--out", plots: Iterable[str] = ()) -> None:
    """The four files' names and `plots` in `out_dir` free or plain files (`check_output_paths`): the command
    checks the four before it builds the board, `write_leaderboard` all of them before it writes any."""
    check_output_paths(((out_dir / name, None) for name in (*FILE_NAMES, *plots)), flag=flag)


def write_leaderboard(board: Leaderboard, out_dir: Path | str, *, flag: str = "out_dir") -> LeaderboardFiles:
    """Write the four files and each task's length and arena plots into `out_dir` (made if missing). Every name is
    checked first: an empty `out_dir`, a file there, a folder or link under a file's name is one OutputError naming
    it and `flag`, and nothing is written. All files are written to temporary files, then moved into place. A plot
    an earlier board left that this one does not draw (a task gone) is removed: the folder shows no stale plot."""
    if isinstance(out_dir, str) and not out_dir.strip():  # Path("") is ".": the folder the caller happens to be in
        raise OutputError(f"{flag} {out_dir!r}: empty: name a folder ('.' for the current one)")
    out_dir = writable_folder(Path(out_dir), flag)
    length_pngs, arena_pngs = render_length_pngs(board), render_arena_pngs(board)
    check_leaderboard_names(out_dir, flag, (*length_pngs, *arena_pngs))
    files = LeaderboardFiles(*(out_dir / name for name in FILE_NAMES), tuple(out_dir / name for name in length_pngs),
                             tuple(out_dir / name for name in arena_pngs))
    png = render_chart_png(board)
    staged: dict[Path, Path] = {}
    contents = [(files.png, png), *((out_dir / name, plot) for name, plot in {**length_pngs, **arena_pngs}.items()),
                (files.markdown, render_markdown(board)), (files.csv, render_csv(board)),
                (files.html, render_html(board, png, length_pngs, arena_pngs))]
    try:
        for path, content in contents:
            staged[path] = stage(path, [content])
        for path, temporary in staged.items():
            publish_replacing(temporary, path)
    finally:
        discard(*staged.values())
    for prefix, drawn in ((LENGTH_PLOT_PREFIX, files.length_plots), (ARENA_PLOT_PREFIX, files.arena_plots)):
        for left in out_dir.glob(f"{prefix}*.png"):
            if left not in drawn and output_problem(left) is None:  # a folder or link there is not our plot
                left.unlink(missing_ok=True)
    return files


# ---------------------------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------------------------


def render_markdown(board: Leaderboard, width: int = MARKDOWN_WIDTH) -> str:
    lines = ["# Leaderboard", ""]
    plots = length_plots(board)
    if board.warnings:
        lines += ["## Warnings", ""]
        for warning in board.warnings:
            lines += textwrap.wrap(f"- ⚠ {markdown_text(warning)}", width, subsequent_indent="  ", break_on_hyphens=False)
        lines.append("")
    shorts = short_names([row.name for row in board.rows])
    for section in task_sections(board):
        lines += _section_lines(section, shorts, width,
                                _length_plot_lines(board, section.task, plots.get(section.task), width))
        arena = arena_section(board, section.task)
        lines += [] if arena is None else arena_markdown_lines(arena, shorts, lambda text: _wrapped(text, width),
                                                               lambda keys, columns: _tables(keys, columns, width))
    lines += ["## Method", ""] + _wrapped(legend(board), width) + [""]
    lines += _usage_lines(board, shorts, width)
    return "\n".join(lines)


def _length_plot_lines(board: Leaderboard, task: str, plot: LengthPlot | None, width: int) -> list[str]:
    """After the task's section: its length-controlled plot as an image (a file beside this one: its name is
    made of safe characters only, so it needs no escaping) and what it shows, or why it has none."""
    if plot is None:
        note = missing_plot_note(board, task)
        return _wrapped(note, width) + [""] if note else []
    return [f"![length-controlled plot]({plot.file_name})", ""] + _wrapped(plot_caption(plot), width) + [""]


def markdown_text(text: str) -> str:
    """`text` (names, tasks, judges: data) as Markdown that shows it and nothing else: no tag, no entity, no
    table cell boundary (`\\` and `|` escaped), no control character (shown as its Unicode picture, e.g. ␊
    for a newline)."""
    escaped = _MARKUP.sub(lambda match: "&lt;" if match.group() == "<" else "&amp;", text)
    escaped = escaped.replace("\\", "\\\\").replace("|", "\\|")
    return _CONTROL.sub(lambda match: chr(0x2400 + ord(match.group())) if match.group() != "\x7f" else "␡", escaped)


def _wrapped(text: str, width: int) -> list[str]:
    return textwrap.wrap(markdown_text(text), width, break_on_hyphens=False)


def _section_lines(section: TaskSection, shorts: dict[str, str], width: int, plot_lines: list[str]) -> list[str]:
    rank, model = section.keys
    model, names_note = _with_short_names(model, shorts, width)
    keys = (rank, model)
    lines = [f"## {markdown_text(section.task)}", ""] + _wrapped(section.caption, width) + [""]
    for chunk in _packed(keys, section.main, width):
        lines += _table(keys + tuple(chunk)) + [""]
    if section.length_note:  # under the main table, as on the page
        lines += _wrapped(section.length_note, width) + [""]
    if section.scale_note:
        lines += _wrapped(section.scale_note, width) + [""]
    lines += plot_lines
    if section.others:
        lines += _wrapped("Other metrics: mean [CI]; rates in % of the items.", width) + [""]
        for chunk in _packed(keys, section.others, width):
            lines += _table(keys + tuple(chunk)) + [""]
    lines += names_note
    lines += _wrapped(section.judge_note, width) + [""]
    for panel in section.panels:
        lines += _panel_lines(panel, shorts, width)
    return lines


def _panel_lines(panel: PanelSection, shorts: dict[str, str], width: int) -> list[str]:
    """The task's judge-panel part (its models' full names are spelled out under the task's first table)."""
    rank, model = panel.keys
    keys = (rank, _with_short_names(model, shorts, width)[0])
    lines = ["### Judge panel", ""] + _wrapped(panel.caption, width) + [""]
    for note in panel.notes:
        lines += _wrapped(note, width) + [""]
    for chunk in _packed(keys, panel.standings, width):
        lines += _table(keys + tuple(chunk)) + [""]
    lines += _wrapped(panel.flips_caption, width) + [""]
    for flip in panel.flips:
        lines += textwrap.wrap(f"- {markdown_text(flip.text)}", width, subsequent_indent="  ", break_on_hyphens=False)
    if panel.flips:
        lines.append("")
    lines += _wrapped(panel.agreement_caption, width) + [""]
    for chunk in _packed(keys, panel.agreement, width):
        lines += _table(keys + tuple(chunk)) + [""]
    return lines


def short_names(names: Sequence[str]) -> dict[str, str]:
    """Each model's name in the Markdown tables, cut to `MODEL_NAME_WIDTH` (capjudge.metrics.files.model_names);
    the same for a model in every table."""
    return cut_names(names, MODEL_NAME_WIDTH)


def _with_short_names(model: DisplayColumn, shorts: dict[str, str], width: int) -> tuple[DisplayColumn, list[str]]:
    """The model column with short names, and the note that spells out the ones that were cut."""
    cut = [(shorts[cell.value], cell.value) for cell in model.cells if shorts[cell.value] != cell.value]
    column = replace(model, cells=tuple(replace(cell, value=shorts[cell.value]) for cell in model.cells))
    note = _wrapped("Full model names: " + "; ".join(f"{short} = {full}" for short, full in cut), width) + [""] if cut else []
    return column, note


def _column_width(column: DisplayColumn) -> int:
    return max([len(column.header), 3] + [len(_escaped(cell)) for cell in column.cells])


def _table_width(columns: Sequence[DisplayColumn]) -> int:
    return sum(_column_width(c) for c in columns) + 3 * len(columns) + 1


def _packed(keys: Sequence[DisplayColumn], columns: Sequence[DisplayColumn], width: int) -> list[list[DisplayColumn]]:
    """`columns` in order, cut into as few tables as fit `width` with the key columns in front of each."""
    chunks: list[list[DisplayColumn]] = []
    for column in columns:
        if chunks and _table_width([*keys, *chunks[-1], column]) <= width:
            chunks[-1].append(column)
        else:
            chunks.append([column])
    return chunks


def _tables(keys: Sequence[DisplayColumn], columns: Sequence[DisplayColumn], width: int) -> list[str]:
    """`columns` as tables no wider than `width`, each starting with `keys`, a blank line after each."""
    return [line for chunk in _packed(keys, columns, width) for line in (*_table((*keys, *chunk)), "")]


def _escaped(cell: Cell) -> str:
    return markdown_text(cell.text)


def _table(columns: Sequence[DisplayColumn]) -> list[str]:
    widths = [_column_width(c) for c in columns]

    def line(cells: Sequence[str], aligns: Sequence[str]) -> str:
        padded = [text.ljust(w) if align == "left" else text.rjust(w) for text, w, align in zip(cells, widths, aligns)]
        return "| " + " | ".join(padded) + " |"

    aligns = [c.align for c in columns]
    rule = "|" + "|".join(("-" * (w + 1) + ":") if a == "right" else ("-" * (w + 2)) for w, a in zip(widths, aligns)) + "|"
    rows = [line([_escaped(c.cells[i]) for c in columns], aligns) for i in range(len(columns[0].cells))]
    return [line([_escaped(Cell(c.header)) for c in columns], ["left"] * len(columns)), rule, *rows]


def _usage_lines(board: Leaderboard, shorts: dict[str, str], width: int) -> list[str]:
    """What judging each run cost, as the API reported it (items answered from the cache cost nothing)."""
    rows = [(row.name, task, usage) for row in board.rows for task, usage in row.usage.items()]
    if not rows:
        return []
    names = ("model", "task", "items", "from cache", "requests", "prompt tokens", "completion tokens")
    values = [
        (name, task, str(usage.get("items", 0)), str(usage.get("cached_items", 0)), str(usage.get("requests", 0)),
         f"{usage.get('prompt_tokens', 0):,}", f"{usage.get('completion_tokens', 0):,}")
        for name, task, usage in rows
    ]
    columns = [
        DisplayColumn(header, tuple(Cell(row[i]) for row in values), align="left" if i < 2 else "right")
        for i, header in enumerate(names)
    ]
    model, names_note = _with_short_names(columns[0], shorts, width)
    return ["## Judge usage", "", *_table([model, *columns[1:]]), "", *names_note]


# ---------------------------------------------------------------------------------------------------------
# CSV
# ---------------------------------------------------------------------------------------------------------


def write_csv(board: Leaderboard, path: Path) -> None:
    write_replacing(Path(path), render_csv(board))


def render_csv(board: Leaderboard) -> str:
    header = ["rank", "model", "results_paths"]
    for column in board.columns:
        key = column.key
        header += [key, f"{key}_ci_low", f"{key}_ci_high", f"{key}_n", f"{key}_replies", f"{key}_judge_noise_share"]
        if column.kind == "score":
            header += [f"{key}_diff_vs_top", f"{key}_diff_ci_low", f"{key}_diff_ci_high", f"{key}_p_vs_top",
                       f"{key}_p_holm", f"{key}_differs_from_top"]
    header += ["rank_metric", "top_model", "test"]
    tasks = board.tasks
    header += [f"rank_{task}" for task in tasks] + [f"items_{task}" for task in tasks] + [f"judge_{task}" for task in tasks]
    header += [f"{name}_{task}" for task in tasks for name in USAGE_FIELDS]
    header += [f"report_url_{task}" for task in tasks]
    header.append("outside_scale")
    header += _length_header(board) + arena_csv_header(board)
    header += _panel_header(board)
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    writer.writerow([_csv_text(cell) for cell in header])
    for row in board.rows:
        cells: list[object] = [row.rank if row.rank is not None else "", row.name, "; ".join(str(p) for p in row.results_paths)]
        for column in board.columns:
            estimate = row.estimates[column.key]
            cells += [_csv_value(estimate.value), _csv_value(estimate.ci_low), _csv_value(estimate.ci_high), estimate.n,
                      estimate.replies, _csv_value(estimate.noise_share)]
            if column.kind == "score":
                comparison = row.comparison_for(column)
                cells += [
                    _csv_value(comparison.difference if comparison else None),
                    _csv_value(comparison.ci_low if comparison else None),
                    _csv_value(comparison.ci_high if comparison else None),
                    _csv_value(comparison.p_value if comparison else None),
                    _csv_value(comparison.p_adjusted if comparison else None),
                    "" if comparison is None or comparison.significant is None else str(comparison.significant).lower(),
                ]
        cells += [
            board.rank_column.key if board.rank_column else "",
            board.top(board.rank_column) or "" if board.rank_column else "",
            "paired permutation (sign-flip), Holm-corrected",
        ]
        cells += [_blank_if_none(row.task_ranks.get(task)) for task in tasks]
        cells += [_blank_if_none(row.n_items.get(task)) for task in tasks]
        cells += ["; ".join(row.judges.get(task, ())) for task in tasks]
        cells += [row.usage.get(task, {}).get(name, "") for task in tasks for name in USAGE_FIELDS]
        cells += [row.report_urls.get(task, "") for task in tasks]
        cells.append("; ".join(_outside_scale(board, row)))
        cells += _length_cells(board, row.name) + arena_csv_cells(board, row.name)
        cells += _panel_cells(board, row.name)
        writer.writerow([_csv_text(cell) for cell in cells])
    return handle.getvalue()


def _panel_header(board: Leaderboard) -> list[str]:
    """After every other column, per task judged by a panel (a board without one has none of these)."""
    return [name for task, panel in board.panels.items() for name in _panel_columns(task, panel)]


def _panel_columns(task: str, panel: TaskPanel) -> list[str]:
    """Each member's value of the ranked metric and its rank, the run's alpha and each member's offset with
    their intervals (named as in the run's results), the models whose order with this one flips, then each
    pair's tau-b with its interval (after the flips: the columns before them keep their places)."""
    names: list[str] = []
    for member in panel.members:
        names += [f"{task}/{member_metric(panel.metric, member)}", f"rank_{task}@{member}"]
    names += [f"{task}/{PANEL_ALPHA}{end}" for end in _CI_ENDS]
    names += [f"{task}/{member_metric(PANEL_OFFSET + end, member)}" for member in panel.members for end in _CI_ENDS]
    names.append(f"order_flips_{task}")
    return names + [f"{task}/{member_metric(PANEL_KENDALL + end, pair_name(*pair))}"
                    for pair in panel.pairs for end in _CI_ENDS]


def _panel_cells(board: Leaderboard, name: str) -> list[object]:
    cells: list[object] = []
    for task, panel in board.panels.items():
        model = next((m for m in panel.models if m.name == name), None)
        if model is None:  # not run on this task, or judged by one judge
            cells += [""] * len(_panel_columns(task, panel))
            continue
        for member in panel.members:
            cells += [_csv_value(model.standings[member].value), _blank_if_none(model.standings[member].rank)]
        for figure in (model.alpha, *(model.offsets[member] for member in panel.members)):
            cells += [_csv_value(figure.value), _csv_value(figure.ci_low), _csv_value(figure.ci_high)]
        cells.append("; ".join(panel.flips_of(name)))
        for pair in panel.pairs:
            figure = model.kendall[pair]
            cells += [_csv_value(figure.value), _csv_value(figure.ci_low), _csv_value(figure.ci_high)]
    return cells


def _length_header(board: Leaderboard) -> list[str]:
    """Before the panel columns, per task with a length-controlled column: each model's length-controlled main
    score with its interval, then the task's beta with its interval (the same in every row) and the models
    whose order with this one changes; after them, per task, why the data do not identify beta (empty where
    they do; where they do not, the figures before are empty: no number is a result)."""
    return ([f"{task}/{name}{end}" for task in board.length_control for name in ("length_controlled", "length_beta")
             for end in _CI_ENDS] + [f"length_order_flips_{task}" for task in board.length_control]
            + [f"length_not_identified_{task}" for task in board.length_control])


def _length_cells(board: Leaderboard, name: str) -> list[object]:
    cells: list[object] = []
    for control in board.length_control.values():
        for figure in (control.fit.scores.get(name), control.fit.beta):
            cells += [_csv_value(None if figure is None or not control.identified else getattr(figure, part))
                      for part in ("value", "ci_low", "ci_high")]
    for control in board.length_control.values():
        cells.append("; ".join(b if a == name else a for a, b in control.flips if name in (a, b)))
    return cells + [control.fit.not_identified or "" for control in board.length_control.values()]


def _outside_scale(board: Leaderboard, row: LeaderboardRow) -> list[str]:
    """The CSV columns of `row` whose numbers lie outside their score's scale (the ⚠ of the pages)."""
    named: list[str] = []
    for column in board.columns:
        outside = row.estimates[column.key].value_ci.outside(column.scale)
        named += [column.key + _PART_SUFFIX[part] for part in outside]
    for task, control in board.length_control.items():
        figure = control.fit.scores.get(row.name)
        if control.identified and figure is not None:
            outside = figure.outside(board.task_rank_columns[task].scale)
            named += [f"{task}/length_controlled{_PART_SUFFIX[part]}" for part in outside]
    for task, panel in board.panels.items():
        model = next((m for m in panel.models if m.name == row.name), None)
        scale = board.task_rank_columns[task].scale
        for member in panel.members if model is not None else ():
            if ValueCI(model.standings[member].value).outside(scale):  # type: ignore[union-attr]
                named.append(f"{task}/{member_metric(panel.metric, member)}")
    return named


def _blank_if_none(value: object) -> object:
    return "" if value is None else value


def _csv_value(value: float | None) -> float | str:
    """A number as a number (the CSV writer spells it as repr does); none as an empty cell."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _csv_text(cell: object) -> object:
    """A text cell a spreadsheet would run as a formula gets a leading `'` (so does one starting with `'`, so
    that dropping one leading `'` always gives the exact text back); numbers stay numbers."""
    if isinstance(cell, str) and cell.startswith(_FORMULA_START):
        return "'" + cell
    return cell

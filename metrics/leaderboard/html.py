"""leaderboard.html: one self-contained page (no network: the CSS, the sorting script and the chart inline).

The page, its style and its script are data files (`templates/leaderboard.{html,css,js}`); this module fills
them from the sections of `capjudge.metrics.leaderboard.layout`. Per task: the main table (rank, model,
main metric, difference from the top model, p, judge noise) sized to fit a laptop screen — intervals under
their values, long names and headers wrapping — then the other metrics, in a box that scrolls on its own
when a task has more of them than the screen is wide. A model's name links to its items of the task when
the board carries a report URL for it (`build_leaderboard(report_url=...)`). A task judged by a panel of judges
ends with its panel part (`div.panel`): the members' rankings, the pairs they order differently (`ul.flips`,
each item naming its two models in `data-first`/`data-second`) and their agreement, tables that scroll in their
own box. A task with length-controlled scores shows its plot (`capjudge.metrics.leaderboard.length_plot`, the
same PNG as the file written beside the page, inline) in `figure.length-plot` right beside its main table
(under it when the screen is too narrow for both); a task that could have one but has none says why
(`p.no-length-plot`). A task with an arena shows its ratings plot (`capjudge.metrics.leaderboard.arena_plot`, the
same PNG as leaderboard_arena_<task>.png beside the page, inline) in `figure.arena-figure`: every image of the
page is a data: URI, so the page moved or mailed alone shows all of them. A figure outside its score's scale
carries `span.out-of-scale` (⚠, its reason as the title) and is named again in the section's
`p.note.out-of-scale`.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from string import Template

from capjudge.metrics.leaderboard.table import Leaderboard, LeaderboardRow
from capjudge.metrics.leaderboard.arena_plot import render_arena_pngs
from capjudge.metrics.leaderboard.arena_section import ArenaSection, arena_html, arena_section
from capjudge.metrics.leaderboard.cells import OUT_OF_SCALE_MARK
from capjudge.metrics.leaderboard.layout import Cell, DisplayColumn, PanelSection, TaskSection, legend, task_sections
from capjudge.metrics.leaderboard.length_plot import (
    LengthPlot,
    length_plots,
    missing_plot_note,
    plot_caption,
    render_length_pngs,
)


@cache
def _template(name: str) -> str:
    return (files("capjudge.metrics") / "templates" / name).read_text(encoding="utf-8")


def render_html(board: Leaderboard, png: bytes, length_pngs: Mapping[str, bytes] | None = None,
                arena_pngs: Mapping[str, bytes] | None = None) -> str:
    """The page, with `png` as its chart and `length_pngs` and `arena_pngs` (file name -> PNG, as
    `render_length_pngs` and `render_arena_pngs` make them; made here when not given) in their tasks' parts."""
    escape = html.escape
    pngs = render_length_pngs(board) if length_pngs is None else length_pngs
    arena_figures = render_arena_pngs(board) if arena_pngs is None else arena_pngs
    plots = length_plots(board)
    warnings = ""
    if board.warnings:
        items = "".join(f"<li>⚠ {escape(w)}</li>" for w in board.warnings)
        warnings = f'<div class="warnings"><h2>Warnings</h2><ul>{items}</ul></div>'
    return Template(_template("leaderboard.html")).substitute(
        style=_template("leaderboard.css"),
        script=_template("leaderboard.js"),
        warnings=warnings,
        sections="\n".join(_section(section, _length_plot(plots.get(section.task), pngs),
                                    missing_plot_note(board, section.task), _arena(board, section.task, arena_figures))
                            for section in task_sections(board)),
        usage=_usage(board),
        method=escape(legend(board)),
        chart=base64.b64encode(png).decode("ascii"),
    )


def _length_plot(plot: LengthPlot | None, pngs: Mapping[str, bytes]) -> str:
    if plot is None or plot.file_name not in pngs:
        return ""
    escape = html.escape
    alt = f"{plot.task}: raw and length-controlled {plot.metric} per model with their CIs, and beta with its CI"
    data = base64.b64encode(pngs[plot.file_name]).decode("ascii")
    return (f'<figure class="length-plot" id="length-plot-{escape(plot.task)}">'
            f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}">'
            f'<figcaption>{escape(plot_caption(plot))}</figcaption></figure>')


def _arena(board: Leaderboard, task: str, pngs: Mapping[str, bytes]) -> str:
    """The task's arena part (`div.arena`, arena_section) with its figure inline, or '' when the board has none
    for it."""
    arena = arena_section(board, task)
    if arena is None:
        return ""
    # The figure inline when its PNG was made (arena_html links the file beside the page otherwise).
    figure = _arena_figure(arena, pngs[arena.figure]) if not arena.reason and arena.figure in pngs else None
    return arena_html(arena, lambda columns, kind: _table(columns, arena.rows, task, kind), figure)


def _arena_figure(arena: ArenaSection, png: bytes) -> str:
    escape = html.escape
    alt = f"{arena.task}: each model's arena rating (Elo) with its interval, best first"
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure class="arena-figure" id="arena-plot-{escape(arena.task)}">'
            f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}"></figure>')


def _section(section: TaskSection, length_plot: str, missing_plot: str, arena: str = "") -> str:
    escape = html.escape
    keys = (section.keys[0], section.keys[1])
    main = _table((*keys, *section.main), section.rows, section.task, "main")
    parts = [
        f'<section id="task-{escape(section.task)}"><h2>{escape(section.task)}</h2>',
        f'<p class="caption">{escape(section.caption)}</p>',
        f'<div class="beside">{main}{length_plot}</div>' if length_plot else main,
    ]
    if section.length_note:
        parts.append(f'<p class="note length-control">{escape(section.length_note)}</p>')
    if section.scale_note:
        parts.append(f'<p class="note out-of-scale">{escape(section.scale_note)}</p>')
    if missing_plot:
        parts.append(f'<p class="note no-length-plot">{escape(missing_plot)}</p>')
    if section.others:
        parts += [
            '<p class="note">Other metrics: mean with its CI under it; rates in % of the items.</p>',
            f'<div class="wide">{_table((*keys, *section.others), section.rows, section.task, "others")}</div>',
        ]
    judge = f'<p class="judge">{escape(section.judge_note)}</p>'
    panels = "".join("\n" + _panel(section.task, panel) for panel in section.panels)
    parts.append(judge + panels + (f"\n{arena}" if arena else "") + "</section>")
    return "\n".join(parts)


def _panel(task: str, panel: PanelSection) -> str:
    """The task's judge-panel part: its members' rankings, the pairs they order differently, their agreement."""
    escape = html.escape
    notes = "".join(f'<p class="note">{escape(note)}</p>' for note in panel.notes)
    flips = ""
    if panel.flips:
        items = "".join(f'<li data-first="{escape(flip.first)}" data-second="{escape(flip.second)}">{escape(flip.text)}</li>'
                        for flip in panel.flips)
        flips = f'<ul class="flips">{items}</ul>'
    return "\n".join([
        f'<div class="panel" id="panel-{escape(task)}"><h3>Judge panel</h3>',
        f'<p class="caption">{escape(panel.caption)}</p>{notes}',
        f'<div class="wide">{_table((*panel.keys, *panel.standings), panel.rows, task, "panel")}</div>',
        f'<p class="note flips-caption">{escape(panel.flips_caption)}</p>{flips}',
        f'<p class="note">{escape(panel.agreement_caption)}</p>',
        f'<div class="wide">{_table((*panel.keys, *panel.agreement), panel.rows, task, "panel-agreement")}</div></div>',
    ])


def _table(columns: tuple[DisplayColumn, ...], rows: tuple[LeaderboardRow, ...], task: str, kind: str) -> str:
    head = "".join(
        f'<th class="{column.align}">{_breakable(column.header)}</th>' for column in columns
    )
    body = []
    for index, row in enumerate(rows):
        cells = []
        for position, column in enumerate(columns):
            cell = column.cells[index]
            content = _link(cell, row.report_urls.get(task)) if position == 1 else _content(cell)
            classes = column.align + (" model" if position == 1 else "")
            title = f' title="{html.escape(cell.tooltip)}"' if cell.tooltip else ""
            cells.append(f'<td class="{classes}" data-sort="{html.escape(cell.sort)}"{title}>{content}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<table class="sortable {kind}" data-task="{html.escape(task)}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")


def _breakable(header: str) -> str:
    """Metric names are long words: let them break after their underscores."""
    return html.escape(header).replace("_", "_<wbr>")


def _content(cell: Cell) -> str:
    escape = html.escape
    mark = f' <span class="worse">{escape(cell.mark)}</span>' if cell.mark else ""
    if cell.out_of_scale:
        mark += f' <span class="out-of-scale" title="{escape(cell.out_of_scale.text)}">{OUT_OF_SCALE_MARK}</span>'
    interval = f'<span class="ci">{escape(cell.interval)}</span>' if cell.interval else ""
    return f'<span class="value">{escape(cell.value)}{mark}</span>{interval}'


def _link(cell: Cell, url: str | None) -> str:
    if not url:
        return html.escape(cell.value)
    return f'<a href="{html.escape(url)}">{html.escape(cell.value)}</a>'


def _usage(board: Leaderboard) -> str:
    rows = [(row.name, task, usage) for row in board.rows for task, usage in row.usage.items()]
    if not rows:
        return ""
    escape = html.escape
    head = '<th class="left">model</th><th class="left">task</th>' + "".join(
        f"<th>{name}</th>" for name in ("items", "from cache", "requests", "prompt tokens", "completion tokens"))
    body = "".join(
        f'<tr><td class="left">{escape(name)}</td><td class="left">{escape(task)}</td><td>{usage.get("items", 0)}</td>'
        f'<td>{usage.get("cached_items", 0)}</td><td>{usage.get("requests", 0)}</td>'
        f'<td>{usage.get("prompt_tokens", 0):,}</td><td>{usage.get("completion_tokens", 0):,}</td></tr>'
        for name, task, usage in rows
    )
    return f'<h2>Judge usage</h2><div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'

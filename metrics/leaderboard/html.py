"""leaderboard.html: one self-contained page (no network: the CSS, the sorting script and the chart inline).

The page, its style and its script are data files (`templates/leaderboard.{html,css,js}`); this module fills
them from the sections of `capjudge.metrics.leaderboard.layout`. Per task: the main table (rank, model,
main metric, difference from the top model, p, judge noise) sized to fit a laptop screen — intervals under
their values, long names and headers wrapping — then the other metrics, in a box that scrolls on its own
when a task has more of them than the screen is wide. A model's name links to its items of the task when
the board carries a report URL for it (`build_leaderboard(report_url=...)`). A task judged by a panel of judges
ends with its panel part (`div.panel`): the members' rankings, the pairs they order differently (`ul.flips`,
each item naming its two models in `data-first`/`data-second`) and their agreement, tables that scroll in their
own box.
"""

from __future__ import annotations

import base64
import html
from functools import cache
from importlib.resources import files
from string import Template

from capjudge.metrics.leaderboard.table import Leaderboard, LeaderboardRow
from capjudge.metrics.leaderboard.layout import Cell, DisplayColumn, PanelSection, TaskSection, legend, task_sections


@cache
def _template(name: str) -> str:
    return (files("capjudge.metrics") / "templates" / name).read_text(encoding="utf-8")


def render_html(board: Leaderboard, png: bytes) -> str:
    escape = html.escape
    warnings = ""
    if board.warnings:
        items = "".join(f"<li>⚠ {escape(w)}</li>" for w in board.warnings)
        warnings = f'<div class="warnings"><h2>Warnings</h2><ul>{items}</ul></div>'
    return Template(_template("leaderboard.html")).substitute(
        style=_template("leaderboard.css"),
        script=_template("leaderboard.js"),
        warnings=warnings,
        sections="\n".join(_section(section) for section in task_sections(board)),
        usage=_usage(board),
        method=escape(legend(board)),
        chart=base64.b64encode(png).decode("ascii"),
    )


def _section(section: TaskSection) -> str:
    escape = html.escape
    keys = (section.keys[0], section.keys[1])
    parts = [
        f'<section id="task-{escape(section.task)}"><h2>{escape(section.task)}</h2>',
        f'<p class="caption">{escape(section.caption)}</p>',
        _table((*keys, *section.main), section.rows, section.task, "main"),
    ]
    if section.length_note:
        parts.append(f'<p class="note length-control">{escape(section.length_note)}</p>')
    if section.others:
        parts += [
            '<p class="note">Other metrics: mean with its CI under it; rates in % of the items.</p>',
            f'<div class="wide">{_table((*keys, *section.others), section.rows, section.task, "others")}</div>',
        ]
    judge = f'<p class="judge">{escape(section.judge_note)}</p>'
    parts.append(judge + "".join("\n" + _panel(section.task, panel) for panel in section.panels) + "</section>")
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
            title = f' title="{html.escape(cell.note)}"' if cell.note else ""
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

"""What the leaderboard shows of a task's arena (`capjudge.metrics.leaderboard.arena_column`), before any markup,
and its Markdown and HTML parts (the pages' own table writers are passed in, so the arena's tables are padded,
cut to the terminal's width, escaped and sortable exactly as the task's other tables).

The main table's column "arena (Elo, 95% CI)" is `arena_cells`'. After the task's tables, the arena's own part:
its models by rating (#) with their battles, mean score and rank by mean score (# by mean), the win-rate
matrix (row model's share of the points against the column's, ties half; columns named by the arena rank),
the pairs the arena orders otherwise than the mean score, the figure (leaderboard_arena_<task>.png, a file
beside the page, linked; or the page's own figure markup, which leaderboard.html passes in to show the PNG
inline) and the method. A task whose runs make no arena shows one line saying why instead.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from capjudge.metrics.leaderboard.arena_cells import arena_column, arena_header
from capjudge.metrics.leaderboard.arena_column import TaskArena
from capjudge.metrics.leaderboard.arena_plot import arena_file_names
from capjudge.metrics.leaderboard.cells import (
    EMPTY,
    Cell,
    DisplayColumn,
    decimals,
    rank_cell,
    sort_key,
    value_cell,
)
from capjudge.metrics.leaderboard.table import Leaderboard, LeaderboardRow

Columns = tuple[DisplayColumn, ...]


@dataclass(frozen=True)
class OrderChange:
    """A pair the arena orders otherwise than the mean score, in one sentence."""

    above_by_mean: str
    above_by_rating: str
    text: str


@dataclass(frozen=True)
class ArenaSection:
    task: str
    reason: str = ""  # why the task has no arena ('' when it has one: then nothing else below is empty)
    caption: str = ""
    rows: tuple[LeaderboardRow, ...] = ()  # the arena's models, best rating first
    keys: Columns = ()  # the arena's rank and the model, first in each of its tables
    ratings: Columns = ()  # Elo with its interval, battles, mean score, rank by mean score
    matrix_caption: str = ""
    matrix: Columns = ()  # one column per opponent, named by its arena rank
    order_caption: str = ""
    order: tuple[OrderChange, ...] = ()
    figure: str = ""  # the plot's file name, beside the page
    method: str = ""


def arena_section(board: Leaderboard, task: str) -> ArenaSection | None:
    """The task's arena part; None when the board has no arena for the task and no reason (arena turned off,
    or a task without a main score)."""
    if task not in board.arenas:
        reason = board.arena_missing.get(task)
        return None if reason is None else ArenaSection(task, reason=f"No arena: {reason}")
    arena = board.arenas[task]
    ratings = arena.ratings
    by_name = {row.name: row for row in board.rows}
    rows = tuple(by_name[model] for model in ratings.ranking)
    column = board.task_rank_columns[task]
    places = decimals(column, rows)
    position = {model: k + 1 for k, model in enumerate(ratings.ranking)}
    figures = [ratings.ratings[m] for m in ratings.ranking]
    table = (
        DisplayColumn(arena_header(board.settings.confidence), arena_column(arena, rows, board.settings.confidence).cells),
        DisplayColumn("battles", tuple(Cell(str(n), sort=sort_key(float(n))) for n in
                                       (sum(c for (a, _), c in ratings.battles.items() if a == m) for m in ratings.ranking))),
        DisplayColumn(f"{column.metric} (mean)", tuple(value_cell(arena.means.get(m), column, places) for m in ratings.ranking)),
        DisplayColumn("# by mean", tuple(rank_cell(row.task_ranks.get(task)) for row in rows)),
    )
    matrix = tuple(DisplayColumn(f"vs #{position[b]}", tuple(_share(ratings.win_rates.get((a, b)) if a != b else None)
                                                              for a in ratings.ranking))
                   for b in ratings.ranking)
    undefined = (f" {ratings.n_undefined} of {ratings.settings.n_resamples} resamples drew no battle for some model "
                 "and are left out of the intervals." if ratings.n_undefined else "")
    undefined += "".join(f" No interval for {model}: {reason}." for model, reason in ratings.no_interval.items())
    return ArenaSection(
        task=task,
        caption=(f"Arena ({arena.metric}): {ratings.n_battles} battles ({ratings.n_ties} ties) on {ratings.n_items} "
                 f"items, at no judging cost: every pair of models on every item both have a score for. # is the "
                 f"arena's rank, # by mean the task's rank by mean score. Ratings {figures[0].value:.0f} to "
                 f"{figures[-1].value:.0f}.{undefined}"),
        rows=rows,
        keys=(DisplayColumn("#", tuple(rank_cell(rank) for rank in map(ratings.ranks.get, ratings.ranking))),
              DisplayColumn("Model", tuple(Cell(m, sort=m) for m in ratings.ranking), align="left")),
        ratings=table,
        matrix_caption=("Win rate of the row's model against the column's (vs #k: the arena's k-th model), in % of "
                        "their battles, a tie counting half:"),
        matrix=matrix,
        order_caption=_order_caption(arena),
        order=tuple(_order_change(arena, a, b, column.metric) for a, b in arena.order_differs),
        figure=arena_file_names(board)[task],
        method=arena.method,
    )


def _share(value: float | None) -> Cell:
    return Cell(EMPTY) if value is None else Cell(f"{100 * value:.0f}%", sort=sort_key(value))


def _order_caption(arena: TaskArena) -> str:
    if len(arena.ratings.models) < 2:
        return ""
    if not arena.order_differs:
        return "The arena orders every pair of models as the mean score does."
    return "Pairs the arena orders otherwise than the mean score (a few big wins can lift a mean, not a rating):"


def _order_change(arena: TaskArena, above: str, below: str, metric: str) -> OrderChange:
    ratings, means = arena.ratings.ratings, arena.means
    return OrderChange(above, below, (
        f"{above} above {below} by mean {metric} ({means[above]:.3g} vs {means[below]:.3g}); {below} above {above} "
        f"by rating ({ratings[below].value:.0f} vs {ratings[above].value:.0f})."))


def arena_markdown_lines(section: ArenaSection, shorts: Mapping[str, str], wrapped: Callable[[str], list[str]],
                         tables: Callable[[Columns, Columns], list[str]]) -> list[str]:
    """The arena part of leaderboard.md: `wrapped` escapes and wraps prose, `tables` lays out key columns and
    columns as the page's other tables (padded, cut to width, one blank line after each)."""
    lines = ["### Arena", ""]
    if section.reason:
        return lines + wrapped(section.reason) + [""]
    rank, model = section.keys
    keys = (rank, replace(model, cells=tuple(replace(cell, value=shorts.get(cell.value, cell.value))
                                             for cell in model.cells)))
    lines += wrapped(section.caption) + [""] + tables(keys, section.ratings)
    lines += wrapped(section.matrix_caption) + [""] + tables(keys, section.matrix)
    if section.order_caption:
        lines += wrapped(section.order_caption) + [""]
    for change in section.order:
        lines += [f"- {line}" if k == 0 else f"  {line}" for k, line in enumerate(wrapped(change.text))]
    if section.order:
        lines.append("")
    # The file name is made of safe characters only (arena_plot): no escaping needed.
    lines += [f"![arena ratings]({section.figure})", ""] + wrapped(section.method) + [""]
    return lines


def _figure_link(file_name: str) -> str:
    escape = html.escape
    return (f'<p class="arena-figure"><a class="arena-figure" href="{escape(file_name)}">The arena\'s ratings with '
            f"their intervals ({escape(file_name)})</a></p>")


def arena_html(section: ArenaSection, table: Callable[[Columns, str], str], figure: str | None = None) -> str:
    """The arena part of leaderboard.html (`div.arena`): `table(columns, kind)` writes one sortable table of the
    arena's rows, as the page's other tables. `figure` is the figure's markup as the page shows it (the page
    inlines the PNG); without it, a line links the figure's file beside the page."""
    escape = html.escape
    head = f'<div class="arena" id="arena-{escape(section.task)}"><h3>Arena</h3>'
    if section.reason:
        return f'{head}<p class="note no-arena">{escape(section.reason)}</p></div>'
    order = ""
    if section.order:
        order = '<ul class="arena-order">' + "".join(
            f'<li data-above-by-mean="{escape(c.above_by_mean)}" data-above-by-rating="{escape(c.above_by_rating)}">'
            f"{escape(c.text)}</li>" for c in section.order) + "</ul>"
    return "\n".join([
        f'{head}<p class="caption">{escape(section.caption)}</p>',
        f'<div class="wide">{table((*section.keys, *section.ratings), "arena")}</div>',
        f'<p class="note">{escape(section.matrix_caption)}</p>',
        f'<div class="wide">{table((*section.keys, *section.matrix), "arena-wins")}</div>',
        f'<p class="note arena-order-caption">{escape(section.order_caption)}</p>{order}',
        figure if figure is not None else _figure_link(section.figure),
        f'<p class="note arena-method">{escape(section.method)}</p></div>',
    ])

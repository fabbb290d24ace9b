"""What a leaderboard shows, per task, before any markup: the sections the Markdown and HTML pages share.

One section per task: its models in the order of the task's main metric, a *main* table (the main metric
with its CI, the difference from the top model with its CI, the Holm-corrected p, the judge-noise share when
some model was judged k > 1 times per item, items when they differ) and the task's *other* metrics after it
(other main scores, per-type scores, corpus-level aggregates, then rates and descriptive values), and the
judge's identity once, as the section's note.

Column headers drop the prefix every metric of the task shares (`gveval_`, `anycap_`); the caption names
the main metric in full. A corpus-level metric logged with its own interval as two more metrics
(`gveval_kendall_b_mean` with `..._ci_low` and `..._ci_high`) is shown as one value with its interval; the
CSV keeps all three.

Display conventions: scores keep the task's own scale (one decimal when some model's value is 10 or more,
else two; a column's CIs and differences use the same); rates are in %. A ▼ after a value marks a model
that is significantly worse than the column's top model (Holm-corrected paired permutation test); a ⚠ a
figure outside its score's scale, listed again under the section's tables (`capjudge.metrics.leaderboard.
cells`). A length-controlled column whose beta the data do not identify shows "not identified", no number.

A task some run judged with a panel of judges (`capjudge.metrics.leaderboard.panel`) gets a *panel* part:
each member's value of the main metric and its rank of the models beside the panel's, one sentence per pair
of models whose order changes between members (or one saying no pair does), and the members' agreement per
model (alpha, each pair of members' Kendall tau-b and each member's offset from the panel, with the run's
intervals). Other tasks get none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from capjudge.judges.client.panel import pair_name
from capjudge.metrics.leaderboard.arena_cells import arena_column
from capjudge.metrics.leaderboard.length_column import TaskLengthControl, length_note
from capjudge.metrics.leaderboard.panel import OrderFlip, TaskPanel
from capjudge.metrics.leaderboard.table import Leaderboard, LeaderboardRow, MetricColumn
from capjudge.metrics.leaderboard.cells import (
    EMPTY,
    WORSE_MARK,
    Cell,
    DisplayColumn,
    count_cell,
    decimals,
    estimate_cell,
    flagged,
    header,
    interval_cell,
    noise_cell,
    out_of_scale_note,
    p_cell,
    rank_cell,
    scaled,
    sort_key,
    value_cell,
)
from capjudge.metrics.statistics.value_ci import ValueCI

__all__ = ["Cell", "DisplayColumn", "PanelSection", "TaskSection", "decimals", "legend", "task_sections"]


@dataclass(frozen=True)
class FlipNote:
    """One pair of models whose order changes between a panel's members, said in one sentence."""

    first: str
    second: str
    text: str


@dataclass(frozen=True)
class PanelSection:
    """The panel part of a task judged by a panel: its tables start with their own keys (the panel's rank and
    the model) and hold only the models the panel judged."""

    caption: str
    notes: tuple[str, ...]  # runs judged by different panels; models judged by one judge
    rows: tuple[LeaderboardRow, ...]  # the panel-judged models, in the panel's rank order
    keys: tuple[DisplayColumn, DisplayColumn]
    standings: tuple[DisplayColumn, ...]  # the panel's value, then each member's value and rank
    flips_caption: str
    flips: tuple[FlipNote, ...]
    agreement_caption: str
    agreement: tuple[DisplayColumn, ...]  # alpha, each pair's tau-b, each member's offset, with their intervals


@dataclass(frozen=True)
class TaskSection:
    task: str
    caption: str  # what ranks the rows, and the number of items when every model has the same
    rows: tuple[LeaderboardRow, ...]  # models run on this task, in its rank order
    keys: tuple[DisplayColumn, DisplayColumn]  # rank and model, first in every table of the section
    main: tuple[DisplayColumn, ...]
    others: tuple[DisplayColumn, ...]
    judge_note: str
    # The panel part: one for a task some run judged with a panel of judges, none for a task judged by one judge.
    panels: tuple[PanelSection, ...] = ()
    # Under the main table when the task has a length-controlled column: beta, order changes, the method.
    length_note: str = ""
    # Under the tables: every figure shown with ⚠ (outside its score's scale), named; '' when there is none.
    scale_note: str = ""


def task_sections(board: Leaderboard) -> list[TaskSection]:
    return [_section(board, task) for task in board.tasks]


def _section(board: Leaderboard, task: str) -> TaskSection:
    main_column = board.task_rank_columns.get(task)
    rows = tuple(sorted(
        (row for row in board.rows if task in row.n_items),
        key=lambda row: (row.task_ranks.get(task) is None, row.task_ranks.get(task) or 0, row.name),
    ))
    keys = (
        DisplayColumn("#", tuple(rank_cell(row.task_ranks.get(task)) for row in rows)),
        DisplayColumn("Model", tuple(Cell(row.name, sort=row.name) for row in rows), align="left"),
    )
    columns = [c for c in board.columns if c.task == task]
    prefix = _shared_prefix([c.metric for c in columns])
    bounds = _logged_bounds(columns)
    folded = {bound.key for pair in bounds.values() for bound in pair}
    main: list[DisplayColumn] = []
    control: TaskLengthControl | None = None
    if main_column is not None:
        main.append(_metric_column(main_column, rows, board, prefix, ci_in_header=True))
        control = board.length_control.get(task)
        if control is not None:
            main.append(_length_column(control, main_column, rows, board))
        main.append(_difference_column(main_column, rows, board))
        main.append(DisplayColumn("p (Holm)", tuple(p_cell(row.comparison_for(main_column)) for row in rows)))
        if any(row.estimates[main_column.key].replies > 1 for row in rows):
            main.append(DisplayColumn("Judge noise", tuple(noise_cell(row.estimates[main_column.key]) for row in rows)))
        # The arena's ranking beside the mean's (arena_cells), last of the mean's columns: where a table must be
        # split to fit, the mean's own figures stay together in the first part.
        if task in board.arenas:
            main.append(arena_column(board.arenas[task], rows, board.settings.confidence))
    item_counts = {row.n_items.get(task) for row in rows}
    if len(item_counts) > 1 or None in item_counts:
        main.append(DisplayColumn("Items", tuple(count_cell(row.n_items.get(task)) for row in rows)))
    order = {"score": 0, "rate": 1, "descriptive": 2}
    others = tuple(_metric_column(c, rows, board, prefix, bounds=bounds.get(c.key)) for c in sorted(
        (c for c in columns if c != main_column and c.key not in folded), key=lambda c: (order[c.kind], not c.main)))
    return TaskSection(
        task=task,
        caption=_caption(main_column, item_counts),
        rows=rows,
        keys=keys,
        main=tuple(main),
        others=others,
        judge_note=_judge_note(rows, task),
        scale_note=out_of_scale_note(rows, (*main, *others)),
        length_note=board.length_undefined.get(task, "") if control is None else length_note(
            control, decimals(main_column, rows), board.settings.n_resamples, board.settings.seed,
            board.settings.confidence),
        panels=() if main_column is None or task not in board.panels
        else (_panel_section(board.panels[task], main_column, rows, prefix),),
    )


def _shared_prefix(metrics: Sequence[str]) -> str:
    """The `word_` every metric name starts with ('' when they do not share one, or for a single metric)."""
    if len(metrics) < 2:
        return ""
    first = metrics[0].split("_", 1)[0] + "_"
    return first if all(m.startswith(first) and len(m) > len(first) for m in metrics) else ""


def _logged_bounds(columns: Sequence[MetricColumn]) -> dict[str, tuple[MetricColumn, MetricColumn]]:
    """column key -> its `_ci_low` and `_ci_high` columns, for metrics whose interval is logged as two more."""
    by_metric = {c.metric: c for c in columns}
    return {
        c.key: (by_metric[f"{c.metric}_ci_low"], by_metric[f"{c.metric}_ci_high"])
        for c in columns if f"{c.metric}_ci_low" in by_metric and f"{c.metric}_ci_high" in by_metric
    }


def _caption(main_column: MetricColumn | None, item_counts: set[int | None]) -> str:
    parts = []
    if main_column is not None:
        better = "higher" if main_column.higher_is_better else "lower"
        parts.append(f"Ranked by {main_column.metric} ({better} is better)")
    if len(item_counts) == 1 and None not in item_counts:
        parts.append(f"{next(iter(item_counts))} items")
    return "; ".join(parts) + "."


def legend(board: Leaderboard) -> str:
    """The method paragraph every rendering ends with: what ranks, what ▼ means, how CIs and tests are made."""
    ranked = f"Overall rank (the CSV's rank column): by {board.rank_column.label}. " if board.rank_column else ""
    return f"{ranked}{WORSE_MARK}: significantly worse than the column's top model. {board.method}"


def _judge_note(rows: Sequence[LeaderboardRow], task: str) -> str:
    labels = {row.name: ", ".join(row.judges.get(task, ())) or "not recorded" for row in rows}
    distinct = set(labels.values())
    if len(distinct) == 1:
        who = "" if len(rows) == 1 else f" (all {len(rows)} models)"
        return f"Judge{who}: {distinct.pop()}"
    return "Judges differ: " + "; ".join(f"{name}: {label}" for name, label in labels.items())


# ---------------------------------------------------------------------------------------------------------
# A panel of judges
# ---------------------------------------------------------------------------------------------------------

AGREEMENT_CAPTION = (
    "Agreement among the members, per model: each run's own figures on the members' per-item scores of the "
    "judge's main metric, with the intervals the run computed (item bootstrap, 95%). alpha: Krippendorff's "
    "alpha across the members (1: they agree, 0: no better than chance). tau-b a~b: Kendall's tau-b between "
    "two members' scores of the items (1: they order the items alike, -1: reversed). offset@member: the mean of "
    "(member - panel) over the items, negative for a member harsher than the panel."
)


def _panel_section(panel: TaskPanel, column: MetricColumn, rows: Sequence[LeaderboardRow], prefix: str) -> PanelSection:
    by_name = {model.name: model for model in panel.models}
    panel_rows = tuple(row for row in rows if row.name in by_name)
    models = [by_name[row.name] for row in panel_rows]
    panel_values = {row.name: row.estimates[column.key].value for row in panel_rows}
    places = _panel_places(column, [*panel_values.values(),
                                    *(s.value for model in models for s in model.standings.values())])
    name = column.metric.removeprefix(prefix)
    standings = [DisplayColumn(f"{name} (panel)", tuple(value_cell(panel_values[row.name], column, places)
                                                      for row in panel_rows))]
    for member in panel.members:
        standings.append(DisplayColumn(f"{name}@{member}", tuple(
            value_cell(model.standings[member].value, column, places) for model in models)))
        standings.append(DisplayColumn(f"# {member}", tuple(rank_cell(model.standings[member].rank)
                                                             for model in models)))
    agreement = [DisplayColumn("alpha [95% CI]", tuple(interval_cell(model.alpha, 2) for model in models))]
    agreement += [
        DisplayColumn(f"tau-b {pair_name(*pair)} [95% CI]", tuple(interval_cell(model.kendall[pair], 2)
                                                                  for model in models))
        for pair in panel.pairs
    ]
    agreement += [
        DisplayColumn(f"offset@{member} [95% CI]", tuple(interval_cell(model.offsets[member], places, signed=True)
                                                          for model in models))
        for member in panel.members
    ]
    values = {model.name: {m: s.value for m, s in model.standings.items()} for model in models}
    return PanelSection(
        caption=(f"Judge panel: {', '.join(panel.members) or 'no member every run has'}. Each member's "
                 f"{column.metric} (its mean over the items, from the run's results) and its rank of the models "
                 f"(# member), beside the panel's value and rank (#)."),
        notes=(*_panel_notes(panel), *filter(None, [out_of_scale_note(panel_rows, standings)])),
        rows=panel_rows,
        keys=(DisplayColumn("#", tuple(rank_cell(row.task_ranks.get(panel.task)) for row in panel_rows)),
              DisplayColumn("Model", tuple(Cell(row.name, sort=row.name) for row in panel_rows), align="left")),
        standings=tuple(standings),
        flips_caption=_flips_caption(panel),
        flips=tuple(_flip_note(flip, values, panel_values, column, places) for flip in panel.flips),
        agreement_caption=AGREEMENT_CAPTION,
        agreement=tuple(agreement),
    )


def _panel_notes(panel: TaskPanel) -> tuple[str, ...]:
    notes = []
    if panel.panels_differ:
        panels = "; ".join(f"{model.name}: {', '.join(model.members)}" for model in panel.models)
        compared = (f"only the members every panel run has are compared ({', '.join(panel.members)})" if panel.members
                    else "no member judged every panel run, so no member's ranking is compared")
        notes.append(f"Runs were judged by different panels ({panels}); {compared}.")
    if panel.without_panel:
        notes.append(f"Judged by one judge, not a panel, and so not in this part: {', '.join(panel.without_panel)}.")
    return tuple(notes)


def _flips_caption(panel: TaskPanel) -> str:
    if len(panel.members) < 2:
        return "Fewer than two members judged every model: no member orders to compare."
    if len(panel.models) < 2:
        return "One model: no pair of models to order."
    if not panel.flips:
        return ("No pair of models changes order between members: every member orders every pair of models as "
                "the others do (ties aside).")
    return ("Pairs of models whose order changes between members (another judge would have ranked them the other "
            "way):")


def _flip_note(flip: OrderFlip, values: dict[str, dict[str, float | None]], panel_values: dict[str, float | None],
               column: MetricColumn, places: int) -> FlipNote:
    def number(value: float | None) -> str:
        return EMPTY if value is None else f"{scaled(value, column):.{places}f}"

    def by(above: str, below: str, members: Sequence[str]) -> str:
        return f"{above} above by " + ", ".join(
            f"{member} ({number(values[above][member])} vs {number(values[below][member])})" for member in members)

    parts = [by(flip.first, flip.second, flip.first_above), by(flip.second, flip.first, flip.second_above)]
    if flip.tied:
        parts.append(f"tied by {', '.join(flip.tied)}")
    a, b = panel_values.get(flip.first), panel_values.get(flip.second)
    if flip.panel_first is None:
        parts.append(f"the panel does not order them ({number(a)} vs {number(b)})")
    else:
        below = flip.second if flip.panel_first == flip.first else flip.first
        parts.append(f"the panel puts {flip.panel_first} above "
                     f"({number(panel_values.get(flip.panel_first))} vs {number(panel_values.get(below))})")
    return FlipNote(flip.first, flip.second, f"{flip.first} vs {flip.second}: " + "; ".join(parts) + ".")


def _panel_places(column: MetricColumn, values: Sequence[float | None]) -> int:
    """As `decimals`, over the panel's and the members' values."""
    if column.kind == "rate":
        return 1
    return 1 if any(v is not None and abs(v) >= 10 for v in values) else 2


# ---------------------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------------------


def _metric_column(
    column: MetricColumn,
    rows: Sequence[LeaderboardRow],
    board: Leaderboard,
    prefix: str,
    ci_in_header: bool = False,
    bounds: tuple[MetricColumn, MetricColumn] | None = None,
) -> DisplayColumn:
    places = decimals(column, rows)
    cells = tuple(
        estimate_cell(row.estimates[column.key], column, places, row.comparison_for(column),
                      None if bounds is None else (row.estimates[bounds[0].key], row.estimates[bounds[1].key]))
        for row in rows
    )
    return DisplayColumn(header(column, prefix, ci_in_header, board.settings.confidence), cells)


def _length_column(control: TaskLengthControl, column: MetricColumn, rows: Sequence[LeaderboardRow],
                   board: Leaderboard) -> DisplayColumn:
    """Each model's main score at the task's reference length (`length_column`), beside its raw mean; where
    the data do not identify beta, "not identified" in every row (the reason in the note under the table)."""
    places = decimals(column, rows)
    why = control.fit.not_identified
    cells = tuple(
        Cell("not identified", note=f"no length-controlled score: {why}") if why is not None
        else flagged(interval_cell(figure, places), figure, column.scale, column.metric)
        for row in rows for figure in [control.fit.scores.get(row.name, ValueCI(None))])
    return DisplayColumn(f"length-controlled [{board.settings.confidence:.0%} CI]", cells)


def _difference_column(column: MetricColumn, rows: Sequence[LeaderboardRow], board: Leaderboard) -> DisplayColumn:
    places = decimals(column, rows)
    top = board.top(column)
    cells = []
    for row in rows:
        comparison = row.comparison_for(column)
        if comparison is None or comparison.difference is None:
            cells.append(Cell("top" if row.name == top else EMPTY))
            continue
        signed = lambda v: f"{scaled(v, column):+.{places}f}"  # noqa: E731
        interval = ""
        if comparison.ci_low is not None and comparison.ci_high is not None:
            interval = f"[{signed(comparison.ci_low)}, {signed(comparison.ci_high)}]"
        cells.append(Cell(signed(comparison.difference), interval, sort=sort_key(comparison.difference),
                          note=f"{comparison.n_common} items in common with {comparison.reference}"))
    return DisplayColumn(f"Δ vs top [{board.settings.confidence:.0%} CI]", tuple(cells))

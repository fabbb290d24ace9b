"""A task judged by a panel of judges (#28), seen from the leaderboard: each member's ranking beside the panel's,
the pairs of models whose order changes between members, and how the members agreed in each run.

A panel run's results JSON holds, besides the panel's values under the task's usual names, each member's
under `<metric>@<member>` (`gveval_mean@harsh`) and the agreement figures of the members' per-item main
scores: `panel_alpha` (Krippendorff's alpha), `panel_kendall_b@<a>~<b>` (each pair's Kendall tau-b, a before b
in the panel file's order) and `panel_offset@<member>` (mean member − panel), each with `_ci_low`/`_ci_high`
(placed before the `@`: `panel_offset_ci_low@harsh`). Everything here is read from those
aggregates (`TaskRun.harness_values`): a member's value of a metric is its mean over the items, as the run
computed it, so a run without --log_samples shows the same. A task is a panel task when some run of it has
member metrics; its members are the suffixes of `<metric>@<member>` for the task's own metrics, in the order
the run wrote them (the panel file's): who judged a run is read by capjudge.metrics.files.judged_by.

Runs judged by different panels are compared on the members every panel run has (and tau-b on the pairs of
those, whichever order a run's panel file lists the two in: tau-b is symmetric). A pair of models flips when
one member puts A above B and another B above A (members that tie them, or lack a value for either, say
nothing about the pair). Nothing here renders: `capjudge.metrics.leaderboard.layout` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from capjudge.judges.client.panel import (
    ALPHA_METRIC,
    KENDALL_METRIC,
    OFFSET_METRIC,
    member_metric,
    member_pairs,
    pair_name,
)
from capjudge.metrics.files.judged_by import judged_by_results
from capjudge.metrics.files.panel_figures import panel_figure
from capjudge.metrics.files.runs import Run
from capjudge.metrics.files.task_run import TaskRun
from capjudge.metrics.statistics.value_ci import ValueCI



@dataclass(frozen=True)
class MemberStanding:
    """One member's view of one model: its mean of the ranked metric, and the rank that gives the model among
    the panel-judged models (competition ranking, 1, 2, 2, 4; None without a value)."""

    value: float | None
    rank: int | None


@dataclass(frozen=True)
class PanelModel:
    """One model judged by a panel: its members' standings and the run's agreement figures."""

    name: str
    members: tuple[str, ...]  # its run's whole panel, in the panel file's order
    standings: Mapping[str, MemberStanding]  # compared member -> standing
    alpha: ValueCI
    kendall: Mapping[tuple[str, str], ValueCI]  # pair of compared members (TaskPanel.pairs) -> tau-b
    offsets: Mapping[str, ValueCI]  # compared member -> mean (member - panel)


@dataclass(frozen=True)
class OrderFlip:
    """Two models some member ranks one way and another member the other way. `first` is the model the panel
    ranks higher (the one listed first when the panel ties them or ranks neither)."""

    first: str
    second: str
    first_above: tuple[str, ...]  # members that put `first` above `second`
    second_above: tuple[str, ...]  # members that put `second` above `first`
    tied: tuple[str, ...]  # members that give both the same value
    panel_first: str | None  # the model the panel ranks higher; None: tied, or one has no panel rank

    @property
    def models(self) -> tuple[str, str]:
        return (self.first, self.second)


@dataclass(frozen=True)
class TaskPanel:
    """The panel view of one task: the metric the members rank by, the members compared, every panel-judged
    model (in the panel's rank order) and the pairs whose order changes between members."""

    task: str
    metric: str  # the task's ranked metric; each member's value is `<metric>@<member>`
    higher_is_better: bool
    members: tuple[str, ...]  # the members every panel run has, in the first run's order
    models: tuple[PanelModel, ...]
    flips: tuple[OrderFlip, ...]
    panels_differ: bool  # some runs were judged by other members than others
    without_panel: tuple[str, ...] = ()  # models of the task judged by one judge, not a panel

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """Every pair of compared members, in `members`' order (the first before the second)."""
        return member_pairs(self.members)

    def flips_of(self, model: str) -> tuple[str, ...]:
        """The models whose order with `model` changes between members."""
        return tuple(other for flip in self.flips for other in flip.models if model in flip.models and other != model)


def panel_tasks(runs: Sequence[Run]) -> tuple[str, ...]:
    """The tasks some run judged with a panel (capjudge.metrics.files.judged_by, from the runs' results)."""
    return tuple(dict.fromkeys(task for run in runs for task, task_run in run.tasks.items()
                               if judged_by_results(task_run).pooled))


def task_panel(
    runs: Sequence[Run], task: str, metric: str, higher_is_better: bool, panel_ranks: Mapping[str, int | None]
) -> TaskPanel:
    """The panel view of `task` (one of `panel_tasks`) ranked by `metric` (`panel_ranks`: the board's rank of
    each model by the panel's value)."""
    judged = [(run.name, run.tasks[task]) for run in runs if task in run.tasks]
    panels = {name: judged_by_results(task_run).logged_apart for name, task_run in judged}
    panel_runs = [(name, task_run) for name, task_run in judged if panels[name]]
    if not panel_runs:
        raise ValueError(f"task {task}: no run of it was judged by a panel")
    shared = set.intersection(*(set(panels[name]) for name, _ in panel_runs))
    members = tuple(member for member in panels[panel_runs[0][0]] if member in shared)
    values = {name: {m: panel_figure(task_run, metric, m).value for m in members} for name, task_run in panel_runs}
    ranks = {m: _ranks({name: values[name][m] for name, _ in panel_runs}, higher_is_better) for m in members}
    order = sorted((name for name, _ in panel_runs),
                   key=lambda name: (panel_ranks.get(name) is None, panel_ranks.get(name) or 0, name))
    by_name = dict(panel_runs)
    models = tuple(
        PanelModel(
            name=name,
            members=panels[name],
            standings={m: MemberStanding(values[name][m], ranks[m].get(name)) for m in members},
            alpha=panel_figure(by_name[name], ALPHA_METRIC, ""),
            kendall={pair: _pair_figure(by_name[name], pair) for pair in member_pairs(members)},
            offsets={m: panel_figure(by_name[name], OFFSET_METRIC, m) for m in members},
        )
        for name in order
    )
    return TaskPanel(
        task=task,
        metric=metric,
        higher_is_better=higher_is_better,
        members=members,
        models=models,
        flips=_flips(order, members, values, panel_ranks, higher_is_better),
        panels_differ=len({panels[name] for name, _ in panel_runs}) > 1,
        without_panel=tuple(name for name, _ in judged if not panels[name]),
    )




def _pair_figure(task_run: TaskRun, pair: tuple[str, str]) -> ValueCI:
    """The run's tau-b of `pair`: named `a~b` in its panel file's order, which may be the other way round
    from the first run's (tau-b and its interval are the same either way)."""
    first, second = pair
    names = (pair_name(first, second), pair_name(second, first))
    named = next((n for n in names if member_metric(KENDALL_METRIC, n) in task_run.harness_values), names[0])
    return panel_figure(task_run, KENDALL_METRIC, named)


def _ranks(values: Mapping[str, float | None], higher_is_better: bool) -> dict[str, int]:
    """Competition ranking (1, 2, 2, 4) of the models with a value, as the board ranks by the panel."""
    named = [(name, value) for name, value in values.items() if value is not None]
    if not named:
        return {}
    signed = np.array([-value if higher_is_better else value for _, value in named])
    return {name: int(rank) for (name, _), rank in zip(named, rankdata(signed, method="min"))}


def _flips(
    order: Sequence[str],
    members: Sequence[str],
    values: Mapping[str, Mapping[str, float | None]],
    panel_ranks: Mapping[str, int | None],
    higher_is_better: bool,
) -> tuple[OrderFlip, ...]:
    sign = 1.0 if higher_is_better else -1.0
    flips = []
    for position, first in enumerate(order):
        for second in order[position + 1:]:
            sides: dict[int, list[str]] = {1: [], -1: [], 0: []}
            for member in members:
                a, b = values[first][member], values[second][member]
                if a is not None and b is not None:
                    sides[int(np.sign(sign * (a - b)))].append(member)
            if sides[1] and sides[-1]:
                flips.append(OrderFlip(first, second, tuple(sides[1]), tuple(sides[-1]), tuple(sides[0]),
                                       _panel_first(first, second, panel_ranks)))
    return tuple(flips)


def _panel_first(first: str, second: str, panel_ranks: Mapping[str, int | None]) -> str | None:
    a, b = panel_ranks.get(first), panel_ranks.get(second)
    if a is None or b is None or a == b:
        return None
    return first if a < b else second

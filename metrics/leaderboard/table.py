"""A leaderboard as data: its columns, its ranked rows and the board itself, before any rendering.

Kept apart from `board` (which builds one) so that the caveats, the layout and the renderers can name these
types without importing the builder, which imports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from capjudge.metrics.leaderboard.arena_column import TaskArena
from capjudge.metrics.leaderboard.length_column import TaskLengthControl
from capjudge.metrics.leaderboard.panel import TaskPanel
from capjudge.metrics.leaderboard.stats import Comparison, Estimate, LeaderboardSettings
from capjudge.metrics.statistics.value_ci import Scale


@dataclass(frozen=True)
class MetricColumn:
    task: str
    metric: str
    kind: Literal["score", "rate", "descriptive"]
    higher_is_better: bool
    main: bool
    is_failure: bool
    label: str
    # The range the column's judge declares its scores in (G-VEval 0-100, AnyCap 0-4); None: none declared
    # (rates, descriptive values, corpus-level figures, a judge that declares none). Figures beyond it are flagged.
    scale: Scale | None = None

    @property
    def key(self) -> str:
        return f"{self.task}/{self.metric}"


@dataclass(frozen=True)
class LeaderboardRow:
    name: str
    results_paths: tuple[Path, ...]
    rank: int | None
    estimates: Mapping[str, Estimate]  # column key -> estimate
    comparisons: Mapping[str, Comparison]  # score column key -> comparison with that column's top model
    judges: Mapping[str, tuple[str, ...]]  # task -> judge labels
    n_items: Mapping[str, int | None]  # task -> items in the samples log
    usage: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # task -> requests, tokens, cached items
    task_ranks: Mapping[str, int | None] = field(default_factory=dict)  # task -> rank by that task's main metric
    # task -> where this model's items of the task are shown (the per-item report); the HTML links the row there.
    report_urls: Mapping[str, str] = field(default_factory=dict)

    def comparison_for(self, column: MetricColumn) -> Comparison | None:
        return self.comparisons.get(column.key)


@dataclass(frozen=True)
class Leaderboard:
    columns: tuple[MetricColumn, ...]
    rank_column: MetricColumn | None
    rows: tuple[LeaderboardRow, ...]  # ranked
    warnings: tuple[str, ...]
    settings: LeaderboardSettings
    method: str  # one paragraph naming the CI and the test, for every rendering
    task_rank_columns: Mapping[str, MetricColumn] = field(default_factory=dict)  # task -> its main metric
    # task -> its members' rankings and agreement, for the tasks some run judged with a panel of judges.
    panels: Mapping[str, TaskPanel] = field(default_factory=dict)
    # task -> its length-controlled scores and beta, for the tasks where they are defined (see length_column).
    length_control: Mapping[str, TaskLengthControl] = field(default_factory=dict)
    length_undefined: Mapping[str, str] = field(default_factory=dict)  # task -> why it has no such column
    # task -> its arena (battles decided by its main score; arena_column), and task -> why it has none.
    arenas: Mapping[str, TaskArena] = field(default_factory=dict)
    arena_missing: Mapping[str, str] = field(default_factory=dict)

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.task for c in self.columns))

    @property
    def main_columns(self) -> tuple[MetricColumn, ...]:
        return tuple(c for c in self.columns if c.main)

    def top(self, column: MetricColumn) -> str | None:
        """The model the column's comparisons refer to; without comparisons, the best value."""
        for row in self.rows:
            comparison = row.comparisons.get(column.key)
            if comparison is not None:
                return comparison.reference
        valued = [row for row in self.rows if row.estimates[column.key].value is not None]
        if not valued:
            return None
        sign = 1.0 if column.higher_is_better else -1.0
        return max(valued, key=lambda row: sign * row.estimates[column.key].value).name  # type: ignore[operator]

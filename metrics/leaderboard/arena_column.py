"""The leaderboard's arena (issue #49 item 1): per task, battles between the models decided by the task's main
metric item by item (`capjudge.metrics.arena.run_battles`), their Bradley-Terry ratings on the Elo scale with
item-bootstrap intervals, the win-rate matrix and the pairs whose order differs from the mean-score ranking;
as data (`TaskArena`, made by `board.build_leaderboard` through `board_arenas`), a plain Markdown section and a
JSON object. The leaderboard's pages show it through `arena_section` (tables, column, notes) and
`arena_plot` (the PNG).

A task's arena is computed from the same runs and main metric the board ranks the task by, at no judging
cost; a task whose runs make no arena (one model, no shared items, no per-item log, a main metric that is a
rate) gets the ArenaError's one line as its reason instead, and the rest of the board is untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from capjudge.metrics.arena.errors import ArenaError
from capjudge.metrics.arena.ratings import METHOD, ArenaRatings, ArenaSettings, arena_ratings, order_differences
from capjudge.metrics.arena.run_battles import run_battles
from capjudge.metrics.files.runs import Run


@dataclass(frozen=True)
class TaskArena:
    task: str
    metric: str
    margin: float
    ratings: ArenaRatings
    means: Mapping[str, float]  # the mean-score ranking the arena is compared with
    order_differs: tuple[tuple[str, str], ...]  # (above by mean score, above by rating)

    @property
    def method(self) -> str:
        decided = (f"decided by {self.metric}, a tie when the two differ by at most {self.margin:g}"
                   if self.margin else f"decided by {self.metric}, a tie when equal")
        settings = self.ratings.settings
        return METHOD.format(decided=decided, confidence=settings.confidence, n_resamples=settings.n_resamples,
                             seed=settings.seed)


def task_arenas(runs: Sequence[Run], main_metrics: Mapping[str, str], settings: ArenaSettings = ArenaSettings(),
                margin: float = 0.0) -> tuple[dict[str, TaskArena], dict[str, str]]:
    """task -> its arena, for each task of `main_metrics` (task -> metric); task -> why it has none."""
    found: dict[str, TaskArena] = {}
    reasons: dict[str, str] = {}
    for task, metric in main_metrics.items():
        taking_part = [run for run in runs if task in run.tasks]
        try:
            battles = run_battles(taking_part, task, metric, margin=margin)
        except ArenaError as problem:
            reasons[task] = str(problem)
            continue
        ratings = arena_ratings(battles.table, settings)
        found[task] = TaskArena(task, metric, battles.margin, ratings, battles.means,
                                order_differences(ratings, battles.means, battles.higher_is_better))
    return found, reasons


def board_arenas(runs: Sequence[Run], main_scores: Mapping[str, str], n_resamples: int, seed: int,
                 confidence: float) -> tuple[dict[str, TaskArena], dict[str, str]]:
    """The leaderboard's arenas: `main_scores` task -> its main metric (a score), with the board's bootstrap
    settings; task -> why it has none for every task whose arena cannot be made."""
    return task_arenas(runs, main_scores, ArenaSettings(n_resamples=n_resamples, seed=seed, confidence=confidence))


def arena_markdown(arena: TaskArena, text: Callable[[str], str] = str) -> str:
    """A plain Markdown section (model names through `text`, e.g. the leaderboard's escaping); the leaderboard
    page itself lays the arena out as its other tables (`arena_section`)."""
    ratings = arena.ratings
    lines = [f"### Arena: {arena.task} ({arena.metric})", "",
             "| model | Elo [95% CI] | battles | mean score |", "|---|---|---|---|"]
    for model in ratings.ranking:
        value = ratings.ratings[model]
        interval = f" [{value.ci_low:.0f}, {value.ci_high:.0f}]" if value.ci_low is not None else ""
        battles = sum(n for (a, _), n in ratings.battles.items() if a == model)
        mean = arena.means.get(model)
        lines.append(f"| {text(model)} | {value.value:.0f}{interval} | {battles} | "
                     f"{'' if mean is None else f'{mean:.3g}'} |")
    lines += ["", "Win rate of the row model against the column model (ties count half):", "",
              "| | " + " | ".join(map(text, ratings.ranking)) + " |", "|---" * (len(ratings.ranking) + 1) + "|"]
    for a in ratings.ranking:
        cells = ["" if a == b or ratings.win_rates.get((a, b)) is None else f"{100 * ratings.win_rates[(a, b)]:.1f}%"
                 for b in ratings.ranking]
        lines.append(f"| {text(a)} | " + " | ".join(cells) + " |")
    lines.append("")
    if arena.order_differs:
        lines.append("Pairs the arena orders otherwise than the mean score: " + "; ".join(
            f"{text(a)} above {text(b)} by mean score, {text(b)} above {text(a)} by rating" for a, b in arena.order_differs) + ".")
    else:
        lines.append("The arena orders every pair of models as the mean score does.")
    lines += ["", arena.method]
    return "\n".join(lines)


def arena_json(arena: TaskArena) -> dict[str, Any]:
    ratings = arena.ratings
    return {
        "task": arena.task, "metric": arena.metric, "tie_margin": arena.margin,
        "ratings": {m: {"elo": ratings.ratings[m].value, "ci_low": ratings.ratings[m].ci_low,
                        "ci_high": ratings.ratings[m].ci_high, "mean_score": arena.means.get(m)}
                    for m in ratings.ranking},
        "win_rates": {a: {b: ratings.win_rates.get((a, b)) for b in ratings.models if b != a} for a in ratings.models},
        "battles": {a: {b: ratings.battles[(a, b)] for b in ratings.models if b != a} for a in ratings.models},
        "order_differs": [list(pair) for pair in arena.order_differs],
        "n_items": ratings.n_items, "n_battles": ratings.n_battles, "n_ties": ratings.n_ties,
        "n_undefined_resamples": ratings.n_undefined, "no_interval": dict(ratings.no_interval), "method": arena.method,
    }

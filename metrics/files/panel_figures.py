"""A panel run's agreement figures as its results JSON holds them, read the same way by every reader (the
leaderboard's and the item report's panel parts).

A run judged by a panel of judges (capjudge.judges.client.panel) aggregates `panel_alpha`,
`panel_kendall_b@<a>~<b>` and `panel_offset@<member>`, each with its interval's ends placed before the `@`
(`panel_offset_ci_low@<member>`). lmms-eval writes NaN for a figure the run could not compute (too few items,
no spread): that is no figure here (None), never 0. A figure is a `ValueCI`; its interval's ends are None when
the run has none.
"""

from __future__ import annotations

import math
from capjudge.judges.client.panel import CI_HIGH, CI_LOW, member_metric
from capjudge.metrics.files.task_run import TaskRun
from capjudge.metrics.statistics.value_ci import ValueCI


def panel_figure(task_run: TaskRun, metric: str, member: str | None = None) -> ValueCI:
    """`metric` (e.g. `panel_alpha`) of the whole panel, or of one member or pair (`harsh`, `harsh~lenient`)."""

    def value(suffix: str) -> float | None:
        name = metric + suffix if not member else member_metric(metric + suffix, member)
        found = task_run.harness_values.get(name)
        return None if found is None or not math.isfinite(found) else float(found)

    return ValueCI(value(""), value(CI_LOW), value(CI_HIGH))

"""Who judged a run's task, as the run's files say: the one notion of it every reader takes (the item report,
`capjudge correlate --run`, the leaderboard), built here and nowhere else.

A run is judged by members. One judge is a run with one member, whose values are the run's own, and no panel
figures. A panel (capjudge.judges.client.panel) pools its members' judgments into the run's values, and its
run also logs each member's values as `<metric>@<member>` and the members' agreement figures
(capjudge.metrics.files.panel_figures). Two sources say which, and both are read here:

- a samples line's record (`judged_by_record`): a panel run's names the panel in `judged.judge.panel` (its
  file, quorum and members, each with its model and endpoint); any other record's judge is the one member;
- a run's results (`judged_by_results`, no samples needed, as the leaderboard reads runs): the suffixes of
  `<metric>@<member>` for the task's own metrics, in the order the run wrote them (the panel file's); none,
  one judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capjudge.judges.client.panel import MEMBER_NAME, MEMBER_SEPARATOR, ONE_JUDGE, PANEL_FIELD
from capjudge.judges.record import JUDGE_KEY, RECORD_METRIC
from capjudge.metrics.files.run_file_error import RunFileError
from capjudge.metrics.files.task_run import TaskRun


@dataclass(frozen=True)
class RunMember:
    """One judge of a run, as the run names it (model and endpoint None where it does not say them)."""

    name: str
    model: str | None = None
    endpoint: str | None = None


@dataclass(frozen=True)
class JudgedBy:
    """The members that judged a run's task, in the panel file's order; `pooled`: the run's values pool them
    (a panel), so each member's values are logged apart and the run has agreement figures."""

    members: tuple[RunMember, ...]
    pooled: bool = False
    file: str | None = None  # the panel file, as the run logged it
    quorum: int | None = None  # members that had to judge an item for the panel to score it

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(member.name for member in self.members)

    @property
    def logged_apart(self) -> tuple[str, ...]:
        """The members whose values the run logs apart from its own (`<metric>@<member>`): a panel's members;
        none for one judge, whose values are the run's."""
        return self.names if self.pooled else ()


def one_judge(model: str | None = None, endpoint: str | None = None) -> JudgedBy:
    return JudgedBy((RunMember(ONE_JUDGE, model, endpoint),))


def judged_by_record(line: Mapping[str, Any], where: str) -> JudgedBy:
    """Who judged the item a samples `line` logs, from its record's judge (`where`: the file and line, for a
    RunFileError naming a panel record that does not say what one says)."""
    record = line.get(RECORD_METRIC)
    judge = record.get(JUDGE_KEY) if isinstance(record, Mapping) else None
    if not isinstance(judge, Mapping):
        return one_judge(_text(judge))  # old logs name the judge model alone, or no judge at all
    if judge.get(PANEL_FIELD) is None:
        return one_judge(_text(judge.get("model")), _text(judge.get("endpoint")))
    panel = judge[PANEL_FIELD]
    field = f"`{RECORD_METRIC}.{JUDGE_KEY}.{PANEL_FIELD}`"
    if not isinstance(panel, Mapping):
        raise RunFileError(f"{where}: {field} is not an object")
    members = panel.get("members")
    if not isinstance(members, list) or not members or not all(
            isinstance(m, Mapping) and isinstance(m.get("name"), str) and MEMBER_NAME.match(m["name"]) for m in members):
        raise RunFileError(f"{where}: {field[:-1]}.members` is not a list of named members")
    try:
        quorum = member_count(panel.get("quorum"), f"{field[:-1]}.quorum`")
    except ValueError as problem:
        raise RunFileError(f"{where}: {problem}") from None
    return JudgedBy(
        members=tuple(RunMember(m["name"], _text(m.get("model")), _text(m.get("endpoint"))) for m in members),
        pooled=True,
        file=_text(panel.get("file")),
        quorum=quorum,
    )


def judged_by_results(task_run: TaskRun) -> JudgedBy:
    """Who judged `task_run`, from its results alone: a panel's members are the suffixes of its
    `<metric>@<member>` for the task's own metrics, in the order the run wrote them."""
    metrics = set(task_run.metric_names)
    members: dict[str, None] = {}
    for name in task_run.harness_values:
        metric, separator, member = name.partition(MEMBER_SEPARATOR)
        if separator and member and metric in metrics:
            members.setdefault(member)
    if not members:
        return one_judge()
    return JudgedBy(tuple(RunMember(name) for name in members), pooled=True)


def member_count(value: Any, field: str) -> int | None:
    """A logged number of members (a quorum): a whole number from 1, or None when not logged; a ValueError
    naming `field` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{field} is {value!r}, not a number of members")
    return value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None

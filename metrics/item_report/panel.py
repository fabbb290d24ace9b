"""A run judged by a panel of judges (#28) in the item report: each member's judgment of an item beside the
panel's, which members the panel pooled and why it left the others out, and how the members agreed over the run.

A panel run (capjudge.judges.client.panel) logs per item

- the panel's record under `judged`: its judge names the panel (`judge.panel`: `file`, `quorum`, `members`
  with `name`, `model`, `endpoint`), its judgment holds the pooled values and says which members were pooled
  (`judgment.panel`: `judged_by`, `not_judged` {member: failure kind}, `quorum`); it has no reply of its own;
- each member's own record under `judged@<member>`: an ordinary record, laid out as any other
  (capjudge.metrics.item_report.views), and its values as `<metric>@<member>`.

Who judged a line (the panel its record names, or one judge) is read by capjudge.metrics.files.judged_by.

Its results hold the members' agreement over the items: `panel_alpha`, `panel_kendall_b@<a>~<b>` for each pair
(in the panel file's order), `panel_offset@<member>` (mean member − panel), each with `_ci_low` / `_ci_high`
placed before the `@`. They are read from the run's aggregates as lmms-eval wrote them (`TaskRun.harness_values`);
a figure the run could not compute (NaN) is shown as none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from capjudge.judges.client.panel import (
    ALPHA_METRIC,
    KENDALL_METRIC,
    OFFSET_METRIC,
    PANEL_FIELD,
    member_metric,
    pair_name,
)
from capjudge.judges.known_judges import judge_descriptor
from capjudge.judges.record import (
    JUDGMENT_KEY,
    RECORD_METRIC,
    JudgedRecord,
    LoggedJudge,
    RecordError,
)
from capjudge.metrics.files.judged_by import JudgedBy, RunMember, member_count
from capjudge.metrics.files.panel_figures import panel_figure
from capjudge.metrics.files.task_run import TaskRun
from capjudge.metrics.files.values import NotANumber, item_number
from capjudge.metrics.item_report.views import JudgmentView, view_judgment
from capjudge.metrics.statistics.annotator_agreement import PairAgreement
from capjudge.metrics.statistics.panel_agreement import MemberOffset
from capjudge.metrics.statistics.value_ci import ValueCI


class PanelRecordError(ValueError):
    """A panel run's line that does not say what a panel record says; the message names the field."""


@dataclass(frozen=True)
class MemberJudgment:
    """One member's judgment of an item, and whether the panel's values of the item include it."""

    name: str
    model: str | None
    score: float | None  # the member's value of the task's main metric (`<main>@<member>`; None: unjudged)
    pooled: bool  # the panel pooled this member's judgment
    left_out: str | None  # why the panel did not (the failure kind it logged); None when pooled
    judge: int  # index into the section's `judges`
    view: JudgmentView


@dataclass(frozen=True)
class PanelJudgment:
    """How the panel judged an item: its quorum and each member's judgment (the pooled values are the model's
    judgment itself)."""

    quorum: int | None
    members: tuple[MemberJudgment, ...]


@dataclass(frozen=True)
class RunPanelAgreement:
    """How a panel's members agreed over one run of a task, as the run's results hold it (the computed
    agreement is capjudge.metrics.statistics.panel_agreement.PanelAgreement)."""

    model: str  # the run
    file: str | None
    quorum: int | None
    members: tuple[RunMember, ...]
    level: str | None  # alpha's level of measurement: the judge's `score_level` (None: not logged)
    alpha: ValueCI
    pairs: tuple[PairAgreement[str, ValueCI], ...]
    offsets: tuple[MemberOffset, ...]  # mean (member − panel) over the items both scored


def logged_panel_judgment(line: Mapping[str, Any], record: JudgedRecord | None, panel: JudgedBy, main_metric: str,
                          judge_index: Callable[[LoggedJudge | None], int]) -> PanelJudgment:
    """Each member's judgment of the item a panel run's `line` logs (`record`: the panel's record of it;
    `panel`: who judged it, pooled); `judge_index` gives a member's judge its place in the section's judges."""
    judged_by, not_judged, quorum = _pooling(record, panel)
    members = []
    for member in panel.members:
        key = member_metric(RECORD_METRIC, member.name)
        if key not in line:
            raise PanelRecordError(f"no record of panel member {member.name!r} (`{key}`)")
        try:
            own = JudgedRecord.from_logged(line[key])
            descriptor = judge_descriptor(own.judge)
        except RecordError as problem:  # a DescriptorError too
            raise PanelRecordError(f"`{key}`: {problem}") from None
        score_key = member_metric(main_metric, member.name)
        try:
            score = item_number(line.get(score_key))
        except NotANumber as problem:
            raise PanelRecordError(f"`{score_key}`: {problem}") from None
        members.append(MemberJudgment(
            name=member.name,
            model=own.judge.model if own.judge is not None and own.judge.model else member.model,
            score=score,
            pooled=member.name in judged_by,
            left_out=None if member.name in judged_by else not_judged.get(member.name, "not logged"),
            judge=judge_index(own.judge),
            view=view_judgment(descriptor, own.judgment),
        ))
    return PanelJudgment(quorum if quorum is not None else panel.quorum, tuple(members))


def run_panel_agreement(model: str, task_run: TaskRun, panel: JudgedBy, level: str | None) -> RunPanelAgreement:
    """The members' agreement over `model`'s run of a task, from the run's aggregates."""
    names = panel.names
    return RunPanelAgreement(
        model=model, file=panel.file, quorum=panel.quorum, members=panel.members, level=level,
        alpha=panel_figure(task_run, ALPHA_METRIC, None),
        pairs=tuple(PairAgreement(first, second, panel_figure(task_run, KENDALL_METRIC, pair_name(first, second)))
                    for i, first in enumerate(names) for second in names[i + 1:]),
        offsets=tuple(MemberOffset(name, panel_figure(task_run, OFFSET_METRIC, name)) for name in names),
    )


# ---------------------------------------------------------------------------------------------------------


def _pooling(record: JudgedRecord | None, panel: JudgedBy) -> tuple[set[str], dict[str, str], int | None]:
    """(members pooled, {member left out: why}, quorum) from the panel's `judgment.panel`."""
    logged = record.judgment.fields.get(PANEL_FIELD) if record is not None and record.judgment is not None else None
    where = f"`{RECORD_METRIC}.{JUDGMENT_KEY}.{PANEL_FIELD}`"
    if not isinstance(logged, Mapping):
        raise PanelRecordError(f"{where} is missing: the record does not say which members the panel pooled")
    judged_by, not_judged = logged.get("judged_by"), logged.get("not_judged")
    if not isinstance(judged_by, list) or not all(name in panel.names for name in judged_by):
        raise PanelRecordError(f"{where}.judged_by is not a list of the panel's members {list(panel.names)}")
    if not isinstance(not_judged, Mapping) or not all(
            name in panel.names and isinstance(kind, str) for name, kind in not_judged.items()):
        raise PanelRecordError(f"{where}.not_judged is not an object of the panel's members and failure kinds")
    try:
        quorum = member_count(logged.get("quorum"), f"{where}.quorum")
    except ValueError as problem:
        raise PanelRecordError(str(problem)) from None
    return set(judged_by), dict(not_judged), quorum

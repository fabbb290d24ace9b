"""Who judges a task: one judge, or a panel of judges — one object, resolved once per task.

Everything that judges or counts (the task inside lmms-eval, `capjudge judge` and its worker processes, the
Batch API stage, `capjudge estimate`) works on the same shape: a tuple of members, each with its own judge
configuration and logged identity, whose judgments of an item come back keyed by member name. One judge is a
panel of one member. What differs between one judge and a panel is only what the run *logs and aggregates*
(a panel adds per-member metrics, a quorum and agreement figures, and tolerates a member that does not answer),
and that difference lives in the two classes below, chosen in one place: `who_judges`.

Why two small classes rather than one class with a `len(members) == 1` test in each method: a single judge's
output predates panels and is kept byte for byte (no `@member` metrics, no `panel` record field, the probe's
own error when the judge does not answer), so the single judge is not "a panel whose figures happen to be
empty" but a panel whose combination is the identity. Each class states its own rule once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from capjudge.judges.client.config import ConfigError, JudgeConfig
from capjudge.judges.client.panel import ONE_JUDGE, Panel, configured_panel
from capjudge.judges.descriptor import JudgeDescriptor
from capjudge.judges.pairwise.record import PairRecord
from capjudge.judges.types import ParseFailure
from capjudge.tasks.harness.item_judgment import ItemJudgment
from capjudge.tasks.harness.members import Member
from capjudge.tasks.harness.panel_pairwise import COMBINED, combined_record
from capjudge.tasks.harness.panel_judging import (
    panel_aggregations,
    panel_higher_is_better,
    panel_item_metrics,
    panel_judgment,
)

log = logging.getLogger(__name__)

# The scorer name a report gives a panel's own judgment, beside its members' (the one judge's is ONE_JUDGE).
PANEL_SCORER = "panel"


@dataclass(frozen=True)
class ItemHooks:
    """What the judge's task supplies for one item's metrics (bound to its document)."""

    combine: Callable[[list[Any]], Any]
    unjudged: Callable[[str, ParseFailure], Any]  # (caption, failure) -> the judge's unjudged result
    item_metrics: Callable[[ItemJudgment, Mapping[str, Any]], dict[str, Any]]  # (judgment, identity) -> metrics


class WhoJudges:
    """The members that judge a task, what the run's record logs as its judge, and how their judgments of one
    item become its metrics. Built by `who_judges`; the members' configurations only when first needed (the
    aggregations need the names alone, and a run that only counts requests needs no endpoint or key)."""

    def __init__(self, settings: Any):
        self.settings = settings
        self.descriptor: JudgeDescriptor = settings.descriptor  # the judge's, as its settings name it

    @cached_property
    def members(self) -> tuple[Member, ...]:
        raise NotImplementedError

    @cached_property
    def identity(self) -> Mapping[str, Any]:
        raise NotImplementedError

    def first_config(self) -> JudgeConfig:
        """The configuration a caller that needs one client gets: the first member's."""
        return self.members[0].config

    def check_answering(self, probe: Callable[[Member], None]) -> None:
        """Probe the members before any item is judged (`probe` raises ConfigError for one that does not answer)."""
        raise NotImplementedError

    def item_metrics(self, judgments: Mapping[str, ItemJudgment], hooks: ItemHooks) -> dict[str, Any]:
        """One item's metrics from its members' judgments (keyed by member name)."""
        raise NotImplementedError

    def scorers(self) -> tuple[str, ...]:
        """The names a report gives the run's scorers: the judge's, or the panel's and then each member's."""
        raise NotImplementedError

    def scored_judgments(self, judgments: Mapping[str, ItemJudgment], hooks: ItemHooks) -> dict[str, ItemJudgment]:
        """One item's judgment per scorer (`scorers`), from its members' judgments."""
        raise NotImplementedError

    def aggregations(self, base: Mapping[str, Any]) -> dict[str, Any]:
        """The task's aggregations, from the YAML's (`base`)."""
        raise NotImplementedError

    def higher_is_better(self, base: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def batch_folder(self, root: Path, member: Member) -> Path:
        """Where a member's Batch API state and input files live under the stage's batch folder."""
        raise NotImplementedError

    def priced_members(self) -> tuple[tuple[str, str, tuple[float, float] | None], ...]:
        """(name, model, its own prices) of each member `capjudge estimate` prices on a line of its own; read
        from the panel file alone, so no key or endpoint is needed (the one judge is priced at --price-*)."""
        raise NotImplementedError

    def keyless_configs(self) -> tuple[tuple[str, JudgeConfig], ...]:
        """(name, configuration without its key) of each member, built as a run builds it (where it sends, its
        model, its reply cache and so its budget folder), for `capjudge estimate`, which reads what earlier runs
        learned there and sends nothing: no key is read, so a member whose key variable is unset is still here."""
        raise NotImplementedError

    def pair_records(self, members: Sequence[PairRecord]) -> list[PairRecord]:
        """`capjudge arena`'s records of one pair, from its members' (in member order): what the verdict file
        holds of it."""
        raise NotImplementedError

    def record_members(self) -> list[str]:
        """Who the records of one pair are by, in `pair_records`' order."""
        raise NotImplementedError


class OneJudge(WhoJudges):
    """One judge (the environment's: OPENAI_BASE_URL, MODEL_VERSION, ...): a panel of one whose combination is
    its member's judgment, logged exactly as before panels existed."""

    @cached_property
    def members(self) -> tuple[Member, ...]:
        config = JudgeConfig.from_env()
        return (Member(ONE_JUDGE, config, self.settings.identity(config), ""),)

    @cached_property
    def identity(self) -> Mapping[str, Any]:
        return self.members[0].identity

    def check_answering(self, probe: Callable[[Member], None]) -> None:
        probe(self.members[0])  # its own error, as it is: there is no quorum to fall back on

    def item_metrics(self, judgments: Mapping[str, ItemJudgment], hooks: ItemHooks) -> dict[str, Any]:
        (judgment,) = judgments.values()
        return hooks.item_metrics(judgment, self.identity)

    def scorers(self) -> tuple[str, ...]:
        return (ONE_JUDGE,)

    def scored_judgments(self, judgments: Mapping[str, ItemJudgment], hooks: ItemHooks) -> dict[str, ItemJudgment]:
        (judgment,) = judgments.values()
        return {ONE_JUDGE: judgment}

    def aggregations(self, base: Mapping[str, Any]) -> dict[str, Any]:
        return dict(base)

    def higher_is_better(self, base: Mapping[str, Any]) -> dict[str, Any]:
        return dict(base)

    def batch_folder(self, root: Path, member: Member) -> Path:
        return root  # where a one-judge batch run has always kept its state (a rerun re-attaches to it)

    def priced_members(self) -> tuple[tuple[str, str, tuple[float, float] | None], ...]:
        return ()

    def keyless_configs(self) -> tuple[tuple[str, JudgeConfig], ...]:
        try:
            # The key the environment holds is dropped: this configuration is for reading, never for sending.
            return ((ONE_JUDGE, JudgeConfig.from_env(require_key=False).with_overrides(api_key=None, require_key=False)),)
        except ConfigError:
            return ()  # no judge a run could build (a run refuses it with this error): no folder of its to read

    def pair_records(self, members: Sequence[PairRecord]) -> list[PairRecord]:
        return list(members)

    def record_members(self) -> list[str]:
        return [member.name for member in self.members]


class PanelOfJudges(WhoJudges):
    """A panel file's members (capjudge.judges.client.panel): each judges every item as it would alone; the
    panel's score is the judge's own combination of the members' results with a quorum, and the run also logs
    each member's metrics and the members' agreement (capjudge.tasks.harness.panel_judging)."""

    def __init__(self, settings: Any, panel: Panel):
        super().__init__(settings)
        self.panel = panel

    @cached_property
    def members(self) -> tuple[Member, ...]:
        return tuple(Member(m.name, m.config, {**self.settings.identity(m.config), "panel_member": m.name}, f" @{m.name}")
                     for m in self.panel.members)

    @cached_property
    def identity(self) -> Mapping[str, Any]:
        # The panel's own record: the judge and its settings, the members instead of one model.
        return {**self.settings.identity(self.first_config()), "model": f"panel({','.join(self.panel.names)})",
                "endpoint": None, "panel": self.panel.logged()}

    def check_answering(self, probe: Callable[[Member], None]) -> None:
        # A member that does not answer is reported by name; the run goes on while the rest make a quorum
        # (its items then fail fast behind its breaker and are counted against it).
        answering = 0
        for member in self.members:
            try:
                probe(member)
                answering += 1
            except ConfigError as error:
                log.error("capjudge: panel member %r: %s", member.name, error)
        if answering < self.panel.quorum:
            raise ConfigError(f"panel {self.panel.source}: {answering} of {len(self.members)} members answer, "
                              f"fewer than the quorum of {self.panel.quorum} (each member's problem is logged above)")

    def item_metrics(self, judgments: Mapping[str, ItemJudgment], hooks: ItemHooks) -> dict[str, Any]:
        return panel_item_metrics(judgments, self.panel, self.members, self.identity, self.descriptor, hooks.combine,
                                  hooks.unjudged, hooks.item_metrics)

    def scorers(self) -> tuple[str, ...]:
        return (PANEL_SCORER, *self.panel.names)

    def scored_judgments(self, judgments: Mapping[str, ItemJudgment], hooks: ItemHooks) -> dict[str, ItemJudgment]:
        caption = next(iter(judgments.values())).caption
        combined = panel_judgment(judgments, self.panel, hooks.combine, lambda failure: hooks.unjudged(caption, failure))
        return {PANEL_SCORER: combined, **judgments}

    def aggregations(self, base: Mapping[str, Any]) -> dict[str, Any]:
        return panel_aggregations(base, self.panel.names, self.descriptor)

    def higher_is_better(self, base: Mapping[str, Any]) -> dict[str, Any]:
        return panel_higher_is_better(base, self.panel.names, self.descriptor)

    def batch_folder(self, root: Path, member: Member) -> Path:
        return root / member.name  # one state file per member: each member's batches resume on their own

    def priced_members(self) -> tuple[tuple[str, str, tuple[float, float] | None], ...]:
        return tuple((m.name, m.model, m.prices) for m in self.panel.members)

    def keyless_configs(self) -> tuple[tuple[str, JudgeConfig], ...]:
        return tuple((m.name, m.keyless) for m in self.panel.members if m.keyless is not None)

    def pair_records(self, members: Sequence[PairRecord]) -> list[PairRecord]:
        # The panel's own verdict of the pair beside its members' (capjudge.tasks.harness.panel_pairwise).
        return [*members, combined_record(members, self.panel.quorum, str(self.identity["model"]))]

    def record_members(self) -> list[str]:
        return [*(member.name for member in self.members), COMBINED]


def who_judges(settings: Any, metadata: Mapping[str, Any] | None, *, configs: bool = True) -> WhoJudges:
    """Who judges a task with these settings: the panel CAPJUDGE_PANEL (or the task metadata's `panel`) names,
    else the environment's one judge. The one place that tells the two apart; its problems are ConfigErrors
    naming the file and member. `configs=False` (requests counted, never sent): a panel's members are read
    without their keys (`keyless_configs`: where each sends and caches, for reading only), and `members` must not
    be asked for."""
    panel = configured_panel(metadata or {}, configs=configs)
    if panel is None:
        return OneJudge(settings)
    return PanelOfJudges(settings, panel)

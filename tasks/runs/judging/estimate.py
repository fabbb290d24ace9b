"""What judging a task will cost, before a single request is made: what `capjudge estimate` does (its
parser: capjudge.tasks.cli.estimate).

    capjudge estimate --task anycap_style --price-input 2.50 --price-output 10.00
    capjudge estimate results/runs --task gveval            # the captions of a --predict_only run
    capjudge estimate --captions my_model.jsonl --task anycap_style

The task is built as lmms-eval builds it; every item's judge request is built exactly as a run would build it
(frames sampled and encoded included) and counted, not sent: text at 4 characters per token, images by
OpenAI's tile formula (capjudge.judges.client.rate_limits). Before generation there are no captions yet: each item's
reference stands in for its caption (a caption of the same length costs the same).

Printed per task: items, requests (with the re-asks expected at `--reask-rate`), input tokens (text and
images), expected output tokens (`--output-tokens` per reply; the judge's `max_tokens` is only the ceiling),
and the cost at the prices given (USD per 1M tokens; no price list is built in, prices change). With a panel of
judges (CAPJUDGE_PANEL, capjudge.judges.client.panel) every member asks every request: one line per member, at
its own `price_input`/`price_output` from the panel file or else at --price-*, and the panel's total; the panel
file is read without its keys (nothing is sent). Each judge's reply cache is looked into, read-only, with the
client's own request keys (capjudge.judges.client.cache_reader): the requests printed are those left to send,
beside how many of the total the cache already holds, and the tokens and cost are of those left to pay for. After a run, the usage the API reported is in every sample's
record and in the leaderboard's "Judge usage" table.

Then what earlier runs learned of the API's charge per request (capjudge.judges.client.charge), read from the
budget folder a run of each judge uses (`learned_charges`): for the one judge a line when its folder holds a
learned charge; for a panel a line per member, its charge or "none learned yet". Read-only, and keyless.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from capjudge.judges.client.cache_reader import RequestRecorder
from capjudge.judges.client.charge import LearnedCharge
from capjudge.judges.client.rate_limits import TokenEstimate, estimate_tokens
from capjudge.judges.types import ChatRequest, JudgeOutcome, JudgeReply

if TYPE_CHECKING:
    from capjudge.tasks.harness.who_judges import WhoJudges

# A reply's length when none is given: G-VEval's four statements with their reasoning run to about this.
DEFAULT_OUTPUT_TOKENS = 200


class EstimateError(ValueError):
    """A bad option or input; the message names it."""


class EstimatingClient(RequestRecorder):
    """A judge client that builds each request, counts it, and sends nothing. It keeps each request as the
    judge asked for it (`RequestRecorder`), so that the judges' reply caches can be asked which of them a run
    would send."""

    not_sent = "estimate only"

    def __init__(self, model: str | None):
        super().__init__()
        self.model = model
        self.estimates: list[TokenEstimate] = []

    def judge(self, request: ChatRequest, parse: Callable[[JudgeReply], Any], **kwargs: Any) -> JudgeOutcome[Any]:
        self.estimates.append(estimate_tokens(request))
        return super().judge(request, parse, **kwargs)


@dataclass(frozen=True)
class MemberCost:
    """One panel member's share of a panel run: the same requests as one judge, at the member's prices."""

    name: str
    model: str
    cost: float | None  # of the requests its reply cache does not hold
    prices_from: str  # "the panel file", "--price-input/--price-output" or "" (no price)


@dataclass(frozen=True)
class LeftToPay:
    """What one judge's reply cache already holds of the run's requests, and what is left to send and pay for."""

    cache: str  # the cache file as messages name it (or why none is read)
    cached: float  # requests its cache answers (scaled like every count)
    requests: float
    text_tokens: int
    image_tokens: int
    output_tokens: float
    cost: float | None  # of the requests left, at this judge's prices (None: no price)

    def line(self, total: float) -> str:
        return (f"  {self.cache}: {self.cached:,.0f} of the {total:,.0f} requests already there (a run replays them): "
                f"{self.requests:,.0f} left to pay for")


@dataclass(frozen=True)
class CostEstimate:
    task: str
    items: int
    requests: float  # per judge, before the reply cache
    text_tokens: int
    image_tokens: int
    output_tokens: float
    cost: float | None  # per judge (with a panel: at the --price-* prices, when given), before the reply cache
    members: tuple[MemberCost, ...] = ()  # with a panel (CAPJUDGE_PANEL): every member asks every request
    unit: str = "items"  # what `items` counts: a task's items, or a sensitivity run's judgments
    charges: tuple[MemberCharge, ...] = ()  # what earlier runs learned of the API's charge (`capjudge estimate`)
    left: tuple[LeftToPay, ...] = ()  # per judge (the one judge, or each member): what its reply cache holds

    def cache_note(self) -> str:
        """What the reply cache already answers, said on a dry run's first line (`capjudge arena --dry-run`,
        `capjudge sensitivity --dry-run`): the one judge's count there; a panel's, member by member below."""
        if len(self.left) == 1 and not self.members:
            return (f", {self.left[0].cached:,.0f} of them already in the reply cache: {self.left[0].requests:,.0f} "
                    "left to send")
        return " (each panel member's reply cache: below)"

    def lines(self) -> list[str]:
        learned = [line for line in (charge.line() for charge in self.charges) if line is not None]
        if not self.members:
            left = self.left[0] if self.left else LeftToPay(
                "no reply cache read (no judge configured)", 0, self.requests, self.text_tokens, self.image_tokens,
                self.output_tokens, self.cost)
            cost = f"${left.cost:,.2f}" if left.cost is not None else "(give --price-input and --price-output)"
            return [
                f"task {self.task}: {self.items} {self.unit}, {left.requests:,.0f} requests expected",
                left.line(self.requests),
                f"  input tokens:  {left.text_tokens + left.image_tokens:,} ({left.text_tokens:,} text + "
                f"{left.image_tokens:,} images) in the requests left to pay for",
                f"  output tokens: {left.output_tokens:,.0f} expected in the requests left to pay for",
                f"  cost: {cost} for the requests left to pay for (the cached ones cost nothing)",
                *learned,
            ]
        cached = any(left.cached for left in self.left)
        expected = "in total per judge (less what its reply cache holds: below)" if cached else "expected per judge"
        before = " per judge, before the reply cache" if cached else " per judge"
        lines = [
            f"task {self.task}: {self.items} {self.unit}, {self.requests:,.0f} requests {expected}",
            f"  input tokens:  {self.text_tokens + self.image_tokens:,} ({self.text_tokens:,} text + {self.image_tokens:,} images){before}",
            f"  output tokens: {self.output_tokens:,.0f} expected{before}",
            f"  panel of {len(self.members)} judges, each asked every request it has no cached reply to:",
        ]
        for member, left in zip(self.members, self.left):
            priced = (f"${member.cost:,.2f} (prices from {member.prices_from})" if member.cost is not None
                      else "(no price: give price_input/price_output in the panel file, or --price-*)")
            lines.append(f"    {member.name} ({member.model}): {left.requests:,.0f} requests, cost {priced}; "
                         f"{left.cached:,.0f} of its {self.requests:,.0f} already in its reply cache ({left.cache})")
        costs = [member.cost for member in self.members]
        total = f"${sum(costs):,.2f}" if all(c is not None for c in costs) else "(not every member has a price)"  # type: ignore[misc]
        lines.append(f"  panel total: {sum(left.requests for left in self.left):,.0f} requests, cost {total} "
                     f"(the requests left to pay for)")
        return [*lines, *learned]


def estimate_task(task_name: str, include_path: Path, run: Path | None, captions: Path | None, *, limit: int | None,
                  reask_rate: float, output_tokens: float, prices: tuple[float, float] | None) -> CostEstimate:
    from capjudge.tasks.runs.judging.stage import caption_source, load_judged_task, pair_captions
    from capjudge.tasks.harness.judged_task import counting_requests_only

    # Nothing is sent, so no judge needs to answer and no key needs to be set; what a judge's settings name
    # (endpoint, model, cache) is read only to find what earlier runs learned there (learned_charges).
    with counting_requests_only():
        task = load_judged_task(task_name, include_path)
        # A panel (CAPJUDGE_PANEL) asks every request of every member; read without keys, since nothing is sent.
        who = task.who_judges()
    docs = list(task.eval_docs)
    if run is not None or captions is not None:
        source = caption_source(run, captions, task_name, None)
        items = [(doc, caption) for _, doc, caption in pair_captions(source, docs, task, "capjudge estimate")]
    else:
        items = [(doc, _stand_in_caption(doc)) for doc in docs]
    counted = items[:limit] if limit else items
    return price_items(task, task_name, len(items), counted, reask_rate=reask_rate, output_tokens=output_tokens,
                       prices=prices, who=who)


def price_items(task: Any, name: str, total: int, counted: Sequence[tuple[Mapping[str, Any], str]], *,
                reask_rate: float, output_tokens: float, prices: tuple[float, float] | None, who: WhoJudges,
                unit: str = "items", judge_one: Callable[[Mapping[str, Any], str, Any], Any] | None = None,
                ) -> CostEstimate:
    """Build `counted` items' requests with the task's own per-item function against the counting client, scale
    the counts to `total` items, and price them: each of `who`'s panel members on its own line, read without
    keys (`priced_members`), with what earlier runs learned of each judge's charge (`learned_charges`).
    `judge_one(doc, text, client)` replaces the task's per-item function when a run judges through another one
    (`capjudge arena`'s pairwise orders)."""
    from capjudge.judges.client.config import configured_model

    settings = task.settings()
    client = EstimatingClient(configured_model())
    quiet = [logging.getLogger(name) for name in ("capjudge.tasks.harness.judged_task", "capjudge.tasks.runs.arena")]
    levels = [logger.level for logger in quiet]  # every item "fails" as not sent: not news
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    try:
        for doc, caption in counted:
            if judge_one is None:
                type(task).judge_item(doc, caption, settings, client)
            else:
                judge_one(doc, caption, client)
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
    if not client.estimates:
        raise EstimateError(f"task {name!r}: no item could be built into a request (missing videos?)")
    scale = (total / len(counted)) * (1 + reask_rate)

    def tally(chosen: Sequence[TokenEstimate], at: tuple[float, float] | None) -> LeftToPay:
        requests = len(chosen) * scale
        text, images = sum(e.text for e in chosen) * scale, sum(e.images for e in chosen) * scale
        output = requests * output_tokens
        cost = None if at is None else ((text + images) * at[0] + output * at[1]) / 1e6
        return LeftToPay("", 0, requests, round(text), round(images), output, cost)

    everything = tally(client.estimates, prices)
    own_prices = {member: own for member, _, own in who.priced_members()}
    left = tuple(_left_to_pay(client, config, lambda chosen: tally(chosen, own_prices.get(member) or prices))
                 for member, config in _judges_to_look_up(who))
    members = tuple(
        MemberCost(member, model, share.cost,
                   "the panel file" if own else "--price-input/--price-output" if prices else "")
        for (member, model, own), share in zip(who.priced_members(), left))
    return CostEstimate(name, total, everything.requests, everything.text_tokens, everything.image_tokens,
                        everything.output_tokens, everything.cost, members, unit, learned_charges(who), left)


def _judges_to_look_up(who: WhoJudges) -> list[tuple[str, Any]]:
    """(name, keyless configuration or None) of each judge, in `priced_members` order for a panel."""
    configs = dict(who.keyless_configs())
    names = [member for member, _, _ in who.priced_members()] or list(configs)
    return [(member, configs.get(member)) for member in names]


def _left_to_pay(client: EstimatingClient, config: Any, tally: Callable[[Sequence[TokenEstimate]], LeftToPay]) -> LeftToPay:
    """What of the built requests this judge's reply cache answers, looked up as its client looks them up
    (capjudge.judges.client.cache_reader: read-only; a missing file is an empty cache and is not created)."""
    from dataclasses import replace

    from capjudge.judges.client.cache_reader import CacheReader

    if config is None:  # no configuration a run could build (its run refuses it): nothing known cached
        return replace(tally(client.estimates), cache="no reply cache read (no usable judge configuration)")
    reader = CacheReader(config)
    try:
        sent = [estimate for estimate, (request, parse, how) in zip(client.estimates, client.asked)
                if reader.needs_request(request, parse, **how)]
    finally:
        reader.close()
    left = tally(sent)
    cached = tally(client.estimates).requests - left.requests
    missing = "" if reader.path is None or reader.path.exists() else " (no such file yet)"
    return replace(left, cache=f"{reader.name}{missing}", cached=cached)


@dataclass(frozen=True)
class MemberCharge:
    """What one judge's budget folder holds of the API's charge per request, learned by earlier runs from its
    rate-limit headers (capjudge.judges.client.charge)."""

    member: str | None  # the panel member; None for the one judge
    endpoint: str  # its endpoint label (JudgeConfig.endpoint_label: no credentials)
    model: str | None
    folder: Path  # the budget folder a run of this judge uses
    learned: LearnedCharge | None  # None: nothing learned there (or no folder yet)

    def line(self) -> str | None:
        """The line `capjudge estimate` prints. The one judge: only when something is learned (no line: none).
        A panel member: always, so every member is seen to be looked up, saying so when none is learned."""
        import time

        who = f"learned charge{'' if self.member is None else f' of panel member {self.member}'} " \
              f"({self.endpoint}, {self.model or 'no model named'})"
        if self.learned is None:
            return None if self.member is None else f"{who}: none learned yet ({self.folder} holds none)"
        learned = self.learned
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(learned.at)) if learned.at > 0 else "unknown"
        if learned.at_problem is not None:  # a stored time that is none (read_learned_charge): said, not shown
            when = f"an unknown time ({learned.at_problem})"
        return (f"{who}: the API's rate limiter counted {learned.ratio:.2f}x capjudge's token estimate per request "
                f"({learned.samples} replies kept, the latest at {when}; {self.folder})")


def learned_charges(who: WhoJudges) -> tuple[MemberCharge, ...]:
    """What each judge's budget folder (`who`: the one judge or each panel member) has learned of the API's
    charge per request. The folder is the one a run of that judge uses (judge_budget_folder of the same
    configuration, built without its key: beside its reply cache, per endpoint and model); nothing is made,
    nothing sent, no key read. An unreadable window file is a BudgetFileError naming it (and the member)."""
    from capjudge.judges.client.budget import judge_budget_folder
    from capjudge.judges.client.charge import BudgetFileError, read_learned_charge
    from capjudge.tasks.harness.who_judges import PanelOfJudges

    panel = isinstance(who, PanelOfJudges)
    charges = []
    for name, config in who.keyless_configs():
        folder = judge_budget_folder(config)
        try:
            learned = read_learned_charge(folder)
        except BudgetFileError as error:
            raise BudgetFileError(f"panel member {name}: {error}" if panel else str(error)) from None
        charges.append(MemberCharge(name if panel else None, config.endpoint_label, config.model, folder, learned))
    return tuple(charges)


def _stand_in_caption(doc: Mapping[str, Any]) -> str:
    for field in ("candidate", "reference"):
        if isinstance(doc.get(field), str) and doc[field].strip():
            return doc[field]
    references = doc.get("references") or []
    return str(references[0]) if references else "a caption"

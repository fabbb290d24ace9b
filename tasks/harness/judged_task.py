"""`JudgedTask`: the one task path every capjudge judge goes through inside lmms-eval (and `capjudge judge`).

A judge's task class (e.g. `GVEvalTask`) supplies only what is its own:

- `settings_type`: a `JudgeSettings` subclass (how the YAML metadata and the environment become settings);
- `run_judge(doc, caption, settings, client, video)`: build the judge on the per-item client and judge;
- `unjudged(doc, caption, settings, failure)`: the judge's result for an item that cannot be judged at all;
- `metric_values(doc, result)`: the per-item values its `metric_list` aggregates.

Everything else is here, once: resolving the settings and the judge configuration (once per task), the
missing-video rule, observing the judge call (raw reply, cache hit, requests), judging every response ahead
of `process_results` at the client's concurrency, and the per-item record.

The per-item record. lmms-eval writes every key `process_results` returns into the `--log_samples` line AND
aggregates every key into the results JSON, so a log-only key would show up there as an empty metric. The
record therefore rides as the value of one real metric, `judged` (aggregated by `count_judged`: how many
items have a valid judgment): a `capjudge.judges.record.JudgedRecord` — the item's id (lmms-eval drops the
document from the log), which judge with which settings, and what it said (scores, failure kind, raw reply,
cache hit, requests; with k > 1 replies each reply and their spread). The readers (`capjudge.metrics.files.
runs` and those built on it) read it back through the same type.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from capjudge.judges.client.cache_files import check_cache_file
from capjudge.judges.client.config import JudgeConfig
from capjudge.judges.client.observed import ObservedClient
from capjudge.judges.client.preflight import preflight_enabled, probe_judge
from capjudge.judges.client.registry import shared_client
from capjudge.judges.descriptor import JudgeDescriptor
from capjudge.judges.record import (
    JUDGE_KEY,
    RECORD_METRIC,
    JudgedRecord,
    LoggedJudge,
    ReplySample,
    reply_spread,
)
from capjudge.judges.run_outcome import lmms_eval_predict_only, max_failure_rate, running_as_lmms_eval
from capjudge.judges.types import JudgeResult, ParseFailure, Usage
from capjudge.tasks import capjudge_version
from capjudge.tasks.harness.aggregations import named_means
from capjudge.tasks.harness.item_judgment import ItemJudgment
from capjudge.tasks.harness.members import JudgmentsByMember, Member, judge_by_members
from capjudge.tasks.harness.settings import MAX_CAPTION_CHARS_LIMIT, MAX_JUDGE_SAMPLES, parse_count, setting
from capjudge.tasks.harness.sources import check_videos, missing_video_problem, video_path
from capjudge.tasks.harness.prejudge import item_key
from capjudge.tasks.harness.sourced_task import SourcedTask
from capjudge.tasks.harness.who_judges import ItemHooks, WhoJudges, who_judges
from lmms_eval.api.reasoning import parse_reasoning_tags_config, strip_reasoning_tags

log = logging.getLogger(__name__)

VIDEO_MISSING = "video_missing"
CAPTION_TOO_LONG = "caption_too_long"
# Far above any real caption (the tasks generate at most 512 tokens, a few thousand characters) and far below
# what would make one request costly: a runaway 50 MB output is an unjudged item, never a paid request.
DEFAULT_MAX_CAPTION_CHARS = 20_000
# How much of a caption that was too long to judge the sample log keeps (the item report shows it).
CAPTION_PREVIEW_CHARS = 1_000


@dataclass(frozen=True)
class JudgeSettings:
    """A judge's task settings. Subclasses add their fields and `resolve(metadata, env)`, and name their judge's
    `descriptor` (its module's `DESCRIPTOR`): the judge's name, version and published model are read from it,
    and every sample log's `judge` record carries its facts."""

    descriptor: ClassVar[JudgeDescriptor]
    judge_name: ClassVar[str]  # the three below are the descriptor's, set when a subclass names it
    judge_version: ClassVar[str]
    published_model: ClassVar[str]
    needs_video: ClassVar[bool] = True
    needs_logprobs: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "descriptor" in cls.__dict__:
            cls.judge_name = cls.descriptor.name
            cls.judge_version = cls.descriptor.version
            cls.published_model = cls.descriptor.published_model

    def logged_settings(self) -> dict[str, Any]:
        """The settings as the sample log's `judge.settings` records them."""
        raise NotImplementedError

    def local_reply_constraint(self) -> dict[str, Any]:
        """The judge's reply-format constraint for the local llama.cpp server (its module's
        `local_reply_constraint`)."""
        raise NotImplementedError

    def extra_request_params(self) -> dict[str, Any]:
        """The local llama.cpp server's output constraint, when the settings ask for it (subclasses have a
        `constrained_output` field, from CAPJUDGE_CONSTRAINED_OUTPUT); nothing for any other server."""
        return self.local_reply_constraint() if getattr(self, "constrained_output", False) else {}

    def identity(self, config: JudgeConfig) -> dict[str, Any]:
        """The sample log's `judge` record: which judge, which model, which settings, which capjudge."""
        return {
            "name": self.judge_name,
            "model": config.model or self.published_model,
            "endpoint": config.endpoint_label,
            "judge_version": self.judge_version,
            # The package around the judge (tasks, aggregation, caption handling) changes scores too.
            "capjudge_version": capjudge_version(),
            "settings": self.logged_settings(),
            "descriptor": self.descriptor.facts(),
        }


def resolve_samples(metadata: Mapping[str, Any], env: Mapping[str, str] | None = None) -> int:
    """k replies per item: task metadata `judge_samples`, overridden by CAPJUDGE_JUDGE_SAMPLES (default 1, the
    published protocol)."""
    return setting(metadata, "judge_samples", 1, parse_count(MAX_JUDGE_SAMPLES), env_name="CAPJUDGE_JUDGE_SAMPLES", env=env)


def resolve_max_caption_chars(metadata: Mapping[str, Any], env: Mapping[str, str] | None = None) -> int:
    """The longest caption sent to the judge, in characters: task metadata `max_caption_chars`, overridden by
    CAPJUDGE_MAX_CAPTION_CHARS (default DEFAULT_MAX_CAPTION_CHARS). A longer caption ends `caption_too_long`."""
    return setting(metadata, "max_caption_chars", DEFAULT_MAX_CAPTION_CHARS, parse_count(MAX_CAPTION_CHARS_LIMIT),
                   env_name="CAPJUDGE_MAX_CAPTION_CHARS", env=env)


def caption_too_long_problem(item_id: str, caption: str, limit: int) -> str | None:
    """Why the caption is not sent (naming the item, its length and the setting), or None when it may be."""
    if len(caption) <= limit:
        return None
    return (f"item {item_id}: caption has {len(caption):,} characters, above CAPJUDGE_MAX_CAPTION_CHARS "
            f"({limit:,}); not sent to the judge")


def caption_preview(caption: str) -> str:
    """The start of a caption too long to judge, marked as cut, for the sample log."""
    return f"{caption[:CAPTION_PREVIEW_CHARS]}… [cut: {len(caption):,} characters in all]"


@contextmanager
def counting_requests_only() -> Iterator[None]:
    """Tasks built inside this block (by `capjudge estimate`) only build and count their requests: loading them
    checks their settings, data and videos, and asks for no judge, API key, reply cache or pre-flight probe."""
    JudgedTask.sends_requests = False
    try:
        yield
    finally:
        JudgedTask.sends_requests = True


class JudgedTask(SourcedTask):
    """A SourcedTask whose per-item metrics come from judging the model's caption (see the module docstring
    for what a subclass supplies)."""

    settings_type: ClassVar[type[JudgeSettings]]
    # False while `capjudge estimate` builds tasks (see `counting_requests_only`): their requests are built and
    # counted, never sent, so they need their settings but no judge endpoint, API key, reply cache or probe.
    sends_requests: ClassVar[bool] = True
    _prejudged: JudgmentsByMember | None = None
    _settings: Any = None
    _who: WhoJudges | None = None

    # -- what a judge's task supplies ---------------------------------------------------------------------

    @classmethod
    def run_judge(cls, doc: Mapping[str, Any], caption: str, settings: Any, client: ObservedClient, video: Any) -> JudgeResult:
        raise NotImplementedError

    @classmethod
    def unjudged(cls, doc: Mapping[str, Any], caption: str, settings: Any, failure: ParseFailure) -> JudgeResult:
        raise NotImplementedError

    @classmethod
    def metric_values(cls, doc: Mapping[str, Any], result: Any) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def combine(cls, results: list[Any]) -> Any:
        """One result from k replies to the same item: the mean of the judged ones' scores."""
        raise NotImplementedError

    # -- one item -------------------------------------------------------------------------------------------

    @classmethod
    def judge_item(cls, doc: Mapping[str, Any], caption: str, settings: Any, client: Any) -> ItemJudgment:
        """Judge one caption. Never raises for a bad item: a caption too long to send, a missing video or a
        failed judgment is an unjudged result with its failure kind."""
        item_id = str(doc["id"])
        video = video_path(doc) if settings.needs_video else None
        shown_video = str(video) if video else None
        judge = settings.judge_name
        limit = getattr(settings, "max_caption_chars", DEFAULT_MAX_CAPTION_CHARS)
        too_long = caption_too_long_problem(item_id, caption, limit)
        if too_long is not None:  # never a request: its cost would grow with the caption, without bound
            log.error("%s %s -> item unjudged (%s)", judge, too_long, CAPTION_TOO_LONG)
            result = cls.unjudged(doc, caption, settings, ParseFailure(CAPTION_TOO_LONG, too_long))
            return ItemJudgment(item_id, caption_preview(caption), shown_video, result, raw_reply=None,
                                cache_hit=False, requests=0)
        if settings.needs_video:
            problem = missing_video_problem(doc)
            if problem is not None:
                log.error("%s %s -> item unjudged (%s)", judge, problem, VIDEO_MISSING)
                result = cls.unjudged(doc, caption, settings, ParseFailure(VIDEO_MISSING, problem))
                return ItemJudgment(item_id, caption, shown_video, result, raw_reply=None, cache_hit=False, requests=0)
        k = getattr(settings, "samples", 1)
        replies = []
        for j in range(k):  # k independent replies at the judge's own sampling, each its own cache entry
            observed = ObservedClient(client, extra_params=settings.extra_request_params(),
                                      default_model=settings.published_model, sample_offset=j * settings.max_tries)
            replies.append((cls.run_judge(doc, caption, settings, observed, video), observed))
        result = replies[0][0] if k == 1 else cls.combine([r for r, _ in replies])
        if not result.ok:
            log.warning("%s item %s unjudged: %s: %s", judge, item_id, result.failure_kind, (result.failure_detail or "")[:300])
        first = replies[0][1]
        usage = sum((observed.usage for _, observed in replies), Usage())
        samples = tuple(
            ReplySample(r.log_fields(), raw_reply=o.raw_reply, cache_hit=o.cache_hit, requests=o.requests_made)
            for r, o in replies
        ) if k > 1 else ()
        fields = settings.descriptor.reply_fields
        return ItemJudgment(item_id, caption, shown_video, result, first.raw_reply,
                            all(o.cache_hit for _, o in replies), sum(o.requests_made for _, o in replies), usage,
                            samples, reply_spread(samples, fields) if samples else None)

    @classmethod
    def item_metrics(cls, doc: Mapping[str, Any], judgment: ItemJudgment, identity: Mapping[str, Any]) -> dict[str, Any]:
        """The per-item values lmms-eval aggregates, the logged record among them (as `judged`)."""
        metrics = cls.metric_values(doc, judgment.result)
        record = JudgedRecord(judgment.item_id, LoggedJudge.from_logged(identity), judgment.logged()).to_json()
        # The identity is logged as the settings built it (`JudgeSettings.identity`), key for key.
        metrics[RECORD_METRIC] = {**record, JUDGE_KEY: dict(identity)}
        return metrics

    # -- settings, once per task ------------------------------------------------------------------------

    def settings(self) -> Any:
        """The judge settings (task metadata and environment overrides), resolved once; needs no judge."""
        if self._settings is None:
            self._settings = self.settings_type.resolve(self.config.metadata or {})  # type: ignore[attr-defined]
        return self._settings

    def who_judges(self) -> WhoJudges:
        """Who judges this task (one judge, or a panel: CAPJUDGE_PANEL or metadata `panel`), resolved once with the
        settings, so a run cannot judge items under two settings or two juries; its problems are ConfigErrors
        naming the file and member. The members' configurations (environment included) are built on first use."""
        if self._who is None:
            self._who = who_judges(self.settings(), self.config.metadata or {}, configs=self.sends_requests)
        return self._who

    def judge_config(self) -> JudgeConfig:
        """The judge configuration a caller that needs one client gets: the first (or only) member's."""
        return self.who_judges().first_config()

    def judge_configs(self) -> tuple[JudgeConfig, ...]:
        """Every judge configuration this task judges with: each member's (one, for one judge)."""
        return tuple(member.config for member in self.who_judges().members)

    # -- load-time checks -------------------------------------------------------------------------------

    def check_ready(self) -> None:
        """The settings parse, the judge is configured, and its reply cache can live where it is configured
        (only the settings when the task's requests are counted, not sent)."""
        self.settings()
        max_failure_rate()  # read again when the run ends; a bad value must not wait until every item is paid for
        if not self.sends_requests or lmms_eval_predict_only():  # a generate-only run needs no judge, no key
            return
        for config in self.judge_configs():  # the one judge's, or each panel member's
            if config.use_cache and config.cache_path is not None:
                check_cache_file(config.cache_path)  # where it lives, and that it is a usable cache file

    def check_judge(self) -> None:
        """Unless CAPJUDGE_PREFLIGHT=0: the judge answers one minimal request with the model items will use."""
        if not self.sends_requests or not preflight_enabled() or lmms_eval_predict_only():
            return
        needs_logprobs = self.settings().needs_logprobs
        self.who_judges().check_answering(
            lambda member: probe_judge(member.config, member.identity["model"], needs_logprobs=needs_logprobs))

    def check_rows(self, rows: list[dict[str, Any]]) -> None:
        if not self.settings().needs_video:
            return
        check_videos(self.config.task, rows)

    # -- judging ----------------------------------------------------------------------------------------

    def apply_filters(self) -> Any:
        """lmms-eval's one look at every response before `process_results`: judge them all now, at the
        client's concurrency instead of lmms-eval's thread count (see capjudge.tasks.harness.prejudge)."""
        filtered = super().apply_filters()
        if self.config.process_results is None:  # --predict_only: lmms-eval computes no metric, so no judging
            return filtered
        docs = self.eval_docs
        tags = self._reasoning_tags()
        items = []
        for instance in self.instances:
            for caption in instance.filtered_resps.values():
                caption = caption if isinstance(caption, str) else str(caption)
                # What process_results will be given: lmms-eval strips reasoning blocks (and surrounding
                # whitespace) from each response just before calling it.
                items.append((docs[int(instance.doc_id)], strip_reasoning_tags(caption, tags) if tags else caption))
        self._prejudged = self.judge_all(items)
        return filtered

    def judge_all(
        self,
        items: Sequence[tuple[Mapping[str, Any], str]],
        *,
        client_for: Callable[[Member, Mapping[str, Any]], Any] | None = None,
        description: str | None = None,
        workers: int | None = None,
        bar_position: int = 0,
    ) -> JudgmentsByMember:
        """Judge every (doc, caption) by every member at its client's concurrency, with a progress bar; used
        inside lmms-eval (`apply_filters`) and by `capjudge judge`, so both make the same requests.
        `client_for(member, doc)` gives an item its own client instead of the member's shared one (the Batch API
        stage's recorders); `workers` (default: each member's bound) is this process's share of it when several
        processes judge (capjudge.tasks.runs.judging.processes)."""
        who, settings = self.who_judges(), self.settings()
        # Each member's client is built here, not by the first item's worker: one that cannot start (a budget
        # or cache file that is not one) is refused in one line before any progress bar is drawn.
        clients = {member.name: shared_client(member.config) for member in who.members}
        try:
            return judge_by_members(
                items, who.members, lambda doc, caption, client: type(self).judge_item(doc, caption, settings, client),
                client_for or (lambda member, doc: clients[member.name]), workers=workers,
                description=description or f"capjudge: judging {self.config.task}", bar_position=bar_position)
        finally:
            for client in clients.values():  # every reply on disk before the harness moves on: a crash loses none
                client.flush_cache()

    def _reasoning_tags(self) -> Any:
        """The reasoning tags lmms-eval will strip before process_results: the task's own setting, else the
        command line's (whose default strips <think> and <analysis> blocks)."""
        cli_value = None
        if running_as_lmms_eval():
            from lmms_eval.__main__ import parse_eval_args

            try:
                cli_value = getattr(parse_eval_args()[1], "reasoning_tags", None)
            except SystemExit:  # not parseable as lmms-eval's command line after all
                cli_value = None
        return parse_reasoning_tags_config(cli_value=cli_value, task_value=getattr(self.config, "reasoning_tags", None))

    def identity(self) -> Mapping[str, Any]:
        return self.who_judges().identity

    def process_document(self, doc: dict[str, Any], results: list[str]) -> dict[str, Any]:
        caption = results[0] if results else ""
        taken = self._prejudged.take(item_key(doc, caption)) if self._prejudged is not None else None
        if taken is None:  # not judged ahead (e.g. process_results called directly): judge it now
            settings = self.settings()
            taken = {member.name: type(self).judge_item(doc, caption, settings, shared_client(member.config))
                     for member in self.who_judges().members}
        return self.metrics_for(doc, taken)

    def metrics_for(self, doc: Mapping[str, Any], judgments: Mapping[str, ItemJudgment]) -> dict[str, Any]:
        """The per-item metrics of an item's judgments, keyed by member (what `judge_all`'s store gives)."""
        return self.who_judges().item_metrics(judgments, self.item_hooks(doc))

    def item_hooks(self, doc: Mapping[str, Any]) -> ItemHooks:
        """What this judge's task does with one item's judgments (its combination, unjudged result, metrics)."""
        cls, settings = type(self), self.settings()
        return ItemHooks(cls.combine, lambda caption, failure: cls.unjudged(doc, caption, settings, failure),
                         lambda judgment, identity: cls.item_metrics(doc, judgment, identity))

    # -- what lmms-eval aggregates ----------------------------------------------------------------------

    def aggregation(self) -> dict[str, Any]:
        """The YAML's aggregations; with a panel also each member's, the panel's median grade (ordinal judges)
        and its agreement figures (see capjudge.tasks.harness.who_judges). Each mean is bound to its task and
        metric, so that one left undefined (no judged item) names them in its warning."""
        return named_means(self.config.task, self.who_judges().aggregations(super().aggregation()),
                           self.metric_covers)

    @classmethod
    def metric_covers(cls, metric: str) -> str:
        """Which items a per-item metric covers, when only some items have it ('' for all judged items; a
        judge's task with per-kind metrics says which kind, e.g. AnyCap's per-type means)."""
        return ""

    def higher_is_better(self) -> dict[str, Any]:
        return self.who_judges().higher_is_better(super().higher_is_better())

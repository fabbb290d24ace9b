"""Each judged task's pairwise judge, and one order of one pair judged as the task's own per-item path judges
one caption (capjudge.tasks.harness.judged_task.JudgedTask.judge_item): the same settings (max_tries, mode,
tolerance, constrained output), the same checks before any request (a caption too long to send, a missing
video: an unjudged order, never a request), an `ObservedClient` around the member's client (raw reply, cache
hit, requests, usage), and a typed failure for anything that cannot be judged, never an exception.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capjudge.judges.anycap import pairwise as anycap_pairwise
from capjudge.judges.client.observed import ObservedClient
from capjudge.judges.gveval import pairwise as gveval_pairwise
from capjudge.judges.pairwise.verdicts import PairwiseResult
from capjudge.judges.types import BAD_INPUT, BadInput, ParseFailure, Usage
from capjudge.tasks.runs.arena.sources import ArenaInputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OrderJudgment:
    """One order of one pair, judged by one judge: what the judging store holds until the records are made."""

    result: PairwiseResult
    raw_reply: str | None
    cache_hit: bool
    requests: int
    usage: Usage = Usage()


class PairwiseJudge:
    """A judge's pairwise prompt, bound to the task's settings. Subclasses: one per judged task class."""

    version: str
    dimensions: tuple[str, ...]

    def __init__(self, settings: Any):
        self.settings = settings

    def judge(self, doc: Mapping[str, Any], first: str, second: str, client: Any) -> PairwiseResult:
        raise NotImplementedError

    def length(self, doc: Mapping[str, Any], caption_a: str, caption_b: str) -> dict[str, Any]:
        """What the record keeps of the two captions' lengths (the covariate of a length-controlled fit)."""
        from capjudge.judges.anycap.wordcount import count_words

        return {"words_a": count_words(caption_a), "words_b": count_words(caption_b)}

    def reply_constraint(self) -> dict[str, Any]:
        """The local llama.cpp server's output constraint for the pairwise reply, when the settings ask for one."""
        return {}

    def _outcome(self, outcome: Any) -> PairwiseResult:
        if outcome.ok:
            return outcome.value
        last = outcome.last_reply
        return PairwiseResult.unjudged(self.dimensions, outcome.failure, last.content if last else None)


class GVEvalPairwise(PairwiseJudge):
    """G-VEval's pairwise prompt in the task's mode: the frames, the frames and the references, or (mode
    "references", text only) the references alone, each mode's template its own judge version."""

    dimensions = gveval_pairwise.PAIRWISE_DIMENSIONS

    def __init__(self, settings: Any):
        super().__init__(settings)
        if settings.mode not in gveval_pairwise.PAIRWISE_MODES:
            raise ArenaInputError(f"G-VEval mode {settings.mode!r} (CAPJUDGE_GVEVAL_MODE or the task's metadata) has no "
                             f"pairwise prompt (the arena has {', '.join(gveval_pairwise.PAIRWISE_MODES)})")
        self.version = gveval_pairwise.pairwise_version(settings.mode)

    def judge(self, doc: Mapping[str, Any], first: str, second: str, client: Any) -> PairwiseResult:
        from capjudge.judges.video import VideoError
        from capjudge.tasks.harness.sources import video_path

        references = list(doc.get("references") or ()) if self.settings.mode != "frames" else []
        if self.settings.references is not None:
            references = references[: self.settings.references]
        try:
            video = video_path(doc) if self.settings.needs_video else None
            request = gveval_pairwise.build_pairwise_request(first, second, video=video,
                                                             references=references, mode=self.settings.mode)
        except VideoError as error:
            return PairwiseResult.unjudged(self.dimensions, ParseFailure("video_unreadable", str(error)))
        except BadInput as error:
            return PairwiseResult.unjudged(self.dimensions, ParseFailure(BAD_INPUT, str(error)))
        return self._outcome(client.judge(request, gveval_pairwise.parse_pairwise_reply, judge_version=self.version,
                                          max_tries=self.settings.max_tries))

    def reply_constraint(self) -> dict[str, Any]:
        return gveval_pairwise.local_pairwise_constraint() if self.settings.constrained_output else {}


class AnyCapPairwise(PairwiseJudge):
    dimensions, version = anycap_pairwise.PAIRWISE_DIMENSIONS, anycap_pairwise.PAIRWISE_VERSION

    def judge(self, doc: Mapping[str, Any], first: str, second: str, client: Any) -> PairwiseResult:
        from capjudge.judges.datasets.anycap_video import UnknownCaptionType
        from capjudge.judges.video import VideoError
        from capjudge.tasks.harness.sources import video_path

        try:
            request = anycap_pairwise.build_pairwise_request(doc["caption_type"], first, second, doc["reference"],
                                                             video=video_path(doc), tolerance=self.settings.tolerance,
                                                             item=str(doc["id"]))
        except UnknownCaptionType as error:
            return PairwiseResult.unjudged(self.dimensions, ParseFailure("unknown_caption_type", str(error)))
        except VideoError as error:
            return PairwiseResult.unjudged(self.dimensions, ParseFailure("video_unreadable", str(error)))
        except BadInput as error:
            return PairwiseResult.unjudged(self.dimensions, ParseFailure(BAD_INPUT, str(error)))
        return self._outcome(client.judge(request, anycap_pairwise.parse_pairwise_reply, judge_version=self.version,
                                          max_tries=self.settings.max_tries))

    def length(self, doc: Mapping[str, Any], caption_a: str, caption_b: str) -> dict[str, Any]:
        from capjudge.judges.datasets.anycap_video import UnknownCaptionType

        try:
            a, b = anycap_pairwise.length_checks(doc["caption_type"], caption_a, caption_b, doc["reference"],
                                                 self.settings.tolerance)
        except UnknownCaptionType:
            return super().length(doc, caption_a, caption_b)
        return {"words_a": a.output_words, "words_b": b.output_words, "reference_words": a.reference_words,
                "within_a": a.within, "within_b": b.within, "tolerance_percent": a.tolerance_percent}

    def reply_constraint(self) -> dict[str, Any]:
        return anycap_pairwise.local_pairwise_constraint() if self.settings.constrained_output else {}


def pairwise_judge_for(task: Any) -> PairwiseJudge:
    """The pairwise judge of a judged task's judge, bound to its settings; an ArenaInputError for a judge without one."""
    from capjudge.tasks.harness.anycap_task import AnyCapTask
    from capjudge.tasks.harness.gveval_task import GVEvalTask

    for task_class, judge_class in ((GVEvalTask, GVEvalPairwise), (AnyCapTask, AnyCapPairwise)):
        if isinstance(task, task_class):
            return judge_class(task.settings())
    raise ArenaInputError(f"task {task.config.task!r}: its judge ({task.settings().judge_name}) has no pairwise prompt "
                     "(the arena has G-VEval's and AnyCap's)")


def judge_order(judge: PairwiseJudge, doc: Mapping[str, Any], first: str, second: str, client: Any) -> OrderJudgment:
    """One order (`first` shown as A) through `client`. Never raises for a bad item."""
    from capjudge.tasks.harness.judged_task import CAPTION_TOO_LONG, VIDEO_MISSING, caption_too_long_problem
    from capjudge.tasks.harness.sources import missing_video_problem

    settings = judge.settings
    item_id = str(doc["id"])
    for caption in (first, second):
        too_long = caption_too_long_problem(item_id, caption, settings.max_caption_chars)
        if too_long is not None:  # never a request: its cost would grow with the caption, without bound
            return OrderJudgment(PairwiseResult.unjudged(judge.dimensions, ParseFailure(CAPTION_TOO_LONG, too_long)),
                                 None, False, 0)
    problem = missing_video_problem(doc) if settings.needs_video else None  # a text-only mode shows no video
    if problem is not None:
        return OrderJudgment(PairwiseResult.unjudged(judge.dimensions, ParseFailure(VIDEO_MISSING, problem)), None, False, 0)
    observed = ObservedClient(client, extra_params=judge.reply_constraint(), default_model=settings.published_model)
    result = judge.judge(doc, first, second, observed)
    if not result.ok:
        log.warning("pairwise %s item %s unjudged: %s: %s", settings.judge_name, item_id, result.failure_kind,
                    result.failure_detail[:300])
    return OrderJudgment(result, observed.raw_reply, observed.cache_hit, observed.requests_made, observed.usage)

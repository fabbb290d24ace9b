"""The AnyCapEval video style judge: the published prompt, 8 JPEG frames, the score parser and length rules.

What is reproduced from the published setup (AnyCap, eval/AnyCapEval/anycapeval_video):
- the prompt template verbatim (templates/anycap_style_video.txt), its three placeholders replaced;
- 8 frames at int(linspace(0, n_frames - 1, 8)), each its own JPEG image part AFTER the text, encoded at
  PIL's default JPEG quality (75), which is what the published code's `save(format="JPEG")` used;
- temperature 0.7, max_tokens 4096, model gpt-4o-2024-08-06, up to 5 tries when the reply has no score.

What is ours: the length rules are applied in code (`capjudge.judges.anycap.length_rule`), not trusted to the
judge model, and every result keeps the judge's own score next to the final one, with the rule that capped
it, so a reader can audit each cap.
"""

from __future__ import annotations

import copy
import re
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from capjudge.judges.anycap.parser import MIN_SCORE, AnyCapVerdict, parse_anycap_reply
from capjudge.judges.anycap.length_rule import (
    DEFAULT_TOLERANCE_PERCENT,
    MAX_SCORE,
    RestrictionCheck,
    ToleranceCheck,
    check_instruction_restriction,
    check_length_tolerance,
    parse_tolerance,
)
# The caption types the rubric is written for are AnyCapEval's: its items name them (one definition).
from capjudge.judges.datasets.anycap_video import CAPTION_TYPES, UnknownCaptionType, normalise_caption_type
from capjudge.judges.anycap.reply_view import view_anycap_reply
from capjudge.judges.descriptor import FrameGeometry, JudgeDescriptor
from capjudge.judges.record import ReplyFields
from capjudge.judges.types import ChatRequest, ImagePart, JudgeCaller
from capjudge.judges.anycap.wordcount import count_words

if TYPE_CHECKING:
    from capjudge.judges.video import FrameSource, PathLike

__all__ = [
    "AnyCapJudge",
    "AnyCapResult",
    "CAPTION_TYPES",
    "JUDGE_VERSION",
    "UnknownCaptionType",
    "build_request",
    "load_template",
    "render_prompt",
]

# Bump when anything that changes the judge's verdicts changes (template, frames, encoding, sampling):
# the client keys its reply cache on it.
JUDGE_VERSION = "anycap-style-video/1"
TEMPLATE_NAME = "anycap_style_video.txt"
PUBLISHED_MODEL = "gpt-4o-2024-08-06"
FRAME_POINTS = 8
JPEG_QUALITY = 75  # PIL's default, used by the published code
DEFAULT_TEMPERATURE = 0.7
DEFAULT_MAX_TOKENS = 4096
PUBLISHED_MAX_TRIES = 5

# Each logged reply (capjudge.judges.record.ReplySample) is the whole AnyCapResult. The task's score metrics
# (capjudge.tasks.harness.anycap_task) average the score after the length rules, `final_score`, of the judged
# replies; `judge_score` is what the judge itself said. The caption's word count is the same in every reply
# (no judge noise in it, but still the replies' mean).
DESCRIPTOR = JudgeDescriptor(
    name="anycap",
    version=JUDGE_VERSION,
    published_model=PUBLISHED_MODEL,
    reply_fields=ReplyFields(
        values={"final_score": "final_score", "judge_score": "judge_score", "output_words": "output_words"},
        metrics={"anycap_score": "final_score", "anycap_avg_of_types": "final_score",
                 **{f"anycap_{kind}": "final_score" for kind in CAPTION_TYPES}, "anycap_output_words": "output_words"},
        scores=("final_score", "judge_score"),
        main="final_score",
    ),
    frames=FrameGeometry(sample_points=FRAME_POINTS, image_format="JPEG", jpeg_quality=JPEG_QUALITY),
    reply_grammar='bare JSON {"score": 0-4, "reason": "..."} (a fenced or embedded object is accepted)',
    score_level="ordinal",  # five ranked grades, not a measured distance
    view_reply=view_anycap_reply,
    score_range=(MIN_SCORE, MAX_SCORE),
)

FLAG_INSTRUCTION_MISSING = "instruction_missing"
UNKNOWN_CAPTION_TYPE = "unknown_caption_type"

CapRule = Literal["length_tolerance", "instruction_restriction"]

# One pass over the template: a caption that itself contains "{reference}" is inserted as written.
_PLACEHOLDER = re.compile(r"\{(caption_type|output|reference)\}")


@lru_cache(maxsize=1)
def load_template() -> str:
    """The seed prompt exactly as shipped (bytes decoded as UTF-8; no newline translation). Read once."""
    return (resources.files("capjudge.judges") / "templates" / TEMPLATE_NAME).read_bytes().decode("utf-8")


def render_prompt(caption_type: str, output: str, reference: str, *, item: object = None) -> str:
    """The prompt text for one caption. `caption_type` may be the dataset's name ("theme" -> "style")."""
    values = {"caption_type": normalise_caption_type(caption_type, item=item), "output": output, "reference": reference}
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], load_template())


def build_request(
    caption_type: str,
    output: str,
    reference: str,
    *,
    video: "PathLike | None" = None,
    frames: "Sequence[FrameSource] | None" = None,
    points: int = FRAME_POINTS,
    temperature: float = DEFAULT_TEMPERATURE,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    model: str | None = PUBLISHED_MODEL,
    item: object = None,
) -> ChatRequest:
    """The chat request for one caption: the prompt, then one JPEG part per sampled frame.

    `video` is sampled by seeking; `frames` are pre-extracted frames in video order (paths or PIL images),
    picked by the same indices. With neither, the request is text-only (the rubric's hallucination check
    then has nothing to look at; callers decide whether that is acceptable). `model` is the request's
    default judge model (the published one); a model configured on the client takes precedence.
    Raises `VideoError` for an unreadable video, `UnknownCaptionType` for a type outside the rubric.
    """
    text = render_prompt(caption_type, output, reference, item=item)
    if video is not None and frames is not None:
        raise ValueError(f"{_where(item)}give either video or frames, not both")
    image_parts: tuple[ImagePart, ...] = ()
    if video is not None or frames is not None:
        geometry = replace(DESCRIPTOR.frames, sample_points=points)  # type: ignore[type-var]
        image_parts = geometry.render(video=video, frames=frames)
    parts: tuple[str | ImagePart, ...] = (text, *image_parts)
    return ChatRequest(parts=parts, params={"temperature": temperature, "max_tokens": max_tokens}, model=model)


@dataclass(frozen=True)
class AnyCapResult:
    """One judged (or unjudged) caption.

    `judge_score` is what the judge said; `final_score` is after the length rules. `capped_by` names the
    rule that LOWERED the score (None when the judge's score was already at or under the cap); whether each
    rule was violated at all is in `within_tolerance` / `restriction_satisfied`. When the judge gave no
    usable score, both scores are None and `failure` holds the kind ("request_failed", "no_json", ...):
    never a silent 0.
    """

    caption_type: str
    judge_score: int | None
    final_score: int | None
    capped_by: CapRule | None
    output_words: int
    reference_words: int
    length_rule_applied: bool
    within_tolerance: bool | None
    tolerance_percent: int
    restriction: str | None = None
    restriction_satisfied: bool | None = None
    flags: tuple[str, ...] = ()
    reason: str | None = None
    failure: str | None = None
    failure_detail: str = ""

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def failure_kind(self) -> str | None:
        return self.failure

    @property
    def explanation(self) -> str | None:
        return self.reason

    def scores(self) -> dict[str, float | None]:
        """The final score (after the length rules) and the judge's own."""
        return {"score": self.final_score, "judge_score": self.judge_score}

    def log_fields(self) -> dict[str, Any]:
        """The sample log's `judgment` fields: every field of the result."""
        return asdict(self)

    @classmethod
    def from_checks(
        cls,
        verdict: AnyCapVerdict | None,
        tolerance: ToleranceCheck,
        restriction: RestrictionCheck | None,
        *,
        failure: str | None = None,
        failure_detail: str = "",
    ) -> "AnyCapResult":
        """Combine the judge's verdict (None when unjudged) with the two rule checks."""
        caps: list[tuple[CapRule, int]] = [("length_tolerance", tolerance.max_score)]
        if restriction is not None:
            caps.append(("instruction_restriction", restriction.max_score))
        judge_score = verdict.score if verdict is not None else None
        final_score = capped_by = None
        if judge_score is not None:
            final_score = min([judge_score, *(limit for _, limit in caps)])
            capped_by = next((rule for rule, limit in caps if limit < judge_score), None)
        return cls(
            caption_type=tolerance.caption_type,
            judge_score=judge_score,
            final_score=final_score,
            capped_by=capped_by,
            output_words=tolerance.output_words,
            reference_words=tolerance.reference_words,
            length_rule_applied=tolerance.applies,
            within_tolerance=tolerance.within,
            tolerance_percent=tolerance.tolerance_percent,
            restriction=restriction.restriction.text if restriction and restriction.restriction else None,
            restriction_satisfied=restriction.satisfied if restriction else None,
            flags=tolerance.flags + (restriction.flags if restriction else ()),
            reason=verdict.reason if verdict is not None else None,
            failure=failure,
            failure_detail=failure_detail,
        )


class AnyCapJudge:
    """Judge captions with the AnyCapEval style rubric through a `JudgeClient`.

    `tolerance` is the ±percent of rule 1 (10 as in the prompt; 30 as in the paper's later version);
    `instruction_rule=True` also applies the instruction's own length restriction, as the published code
    does. `max_tries` is how many replies are asked for while the reply has no usable score (published: 5).
    """

    def __init__(
        self,
        client: JudgeCaller,
        tolerance: int = DEFAULT_TOLERANCE_PERCENT,
        instruction_rule: bool = False,
        max_tries: int = PUBLISHED_MAX_TRIES,
        *,
        temperature: float = DEFAULT_TEMPERATURE,
        max_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        if max_tries < 1:
            raise ValueError(f"max_tries must be at least 1, got {max_tries}")
        self.client = client
        self.tolerance = parse_tolerance(tolerance)
        self.instruction_rule = instruction_rule
        self.max_tries = max_tries
        self.temperature = temperature
        self.max_tokens = max_tokens

    def judge(
        self,
        caption_type: str,
        output: str,
        reference: str,
        *,
        video: "PathLike | None" = None,
        frames: "Sequence[FrameSource] | None" = None,
        instruction: str | None = None,
        item: object = None,
    ) -> AnyCapResult:
        """Score one caption. `instruction` (the item's instruction or its length sentence) is needed when
        `instruction_rule` is on; without it the rule cannot apply and the result is flagged."""
        from capjudge.judges.video import VideoError

        try:
            tolerance = check_length_tolerance(caption_type, output, reference, self.tolerance, item=item)
        except UnknownCaptionType as error:
            # A bad row, not a bad run: unjudged, with the message naming the item and the type.
            return AnyCapResult.from_checks(
                None, _unchecked(caption_type, output, reference, self.tolerance), None,
                failure=UNKNOWN_CAPTION_TYPE, failure_detail=str(error),
            )
        restriction = self._restriction_check(instruction, output)
        try:
            request = build_request(
                tolerance.caption_type,
                output,
                reference,
                video=video,
                frames=frames,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                item=item,
            )
        except VideoError as error:
            return AnyCapResult.from_checks(
                None, tolerance, restriction, failure="video_unreadable", failure_detail=str(error)
            )
        outcome = self.client.judge(request, parse_anycap_reply, judge_version=JUDGE_VERSION, max_tries=self.max_tries)
        if outcome.failure is not None:
            return AnyCapResult.from_checks(
                None, tolerance, restriction, failure=outcome.failure.kind, failure_detail=outcome.failure.detail
            )
        return AnyCapResult.from_checks(outcome.value, tolerance, restriction)

    def _restriction_check(self, instruction: str | None, output: str) -> RestrictionCheck | None:
        if not self.instruction_rule:
            return None
        if instruction is None:
            return RestrictionCheck("", None, None, None, MAX_SCORE, (FLAG_INSTRUCTION_MISSING,))
        return check_instruction_restriction(instruction, output)


def _unchecked(caption_type: object, output: str, reference: str, tolerance: int) -> ToleranceCheck:
    """The length record of an item whose caption type is unknown: counted, but no rule applied."""
    output_words, reference_words = count_words(output), count_words(reference)
    return ToleranceCheck(str(caption_type), False, output_words, reference_words, tolerance, None, MAX_SCORE)


def _where(item: object) -> str:
    return f"item {item}: " if item is not None else ""


# ----------------------------------------------------------------------------------------------------------
# The embedded local judge (llama.cpp) only: a tiny model cannot follow the reply format on its own, so the
# format is forced on that server instead of loosening the parser.

LOCAL_REPLY_SCHEMA: Mapping[str, Any] = {

    "type": "object",
    "properties": {
        # llama-cpp-python's schema converter ignores minimum/maximum on integers; an enum is enforced.
        "score": {"type": "integer", "enum": [0, 1, 2, 3, 4]},
        "reason": {"type": "string", "minLength": 10, "maxLength": 160},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}


def local_reply_constraint() -> dict[str, Any]:
    """Request params that force the reply's JSON shape on a llama.cpp server. Never for OpenAI or any other
    backend: OpenAI rejects a `schema` inside `response_format`."""
    return {"response_format": {"type": "json_object", "schema": copy.deepcopy(dict(LOCAL_REPLY_SCHEMA))}}

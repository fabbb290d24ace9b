"""The pairwise AnyCapEval style judge (capjudge's own prompt: templates/anycap_pairwise_v1.txt says why): two
outputs for one instruction, A, B or tie on quality (the caption type's criteria against the reference), on
hallucination (against the frames) and overall.

The judge sees exactly what the pointwise AnyCap judge sees of the video: 8 JPEG frames after the text, sampled
and encoded by the same frame geometry (`capjudge.judges.anycap.judge.DESCRIPTOR.frames`), at the published
sampling (temperature 0.7, max_tokens 4096). The length rule is considered, not left to the judge's counting:
both outputs' and the reference's word counts are counted here (capjudge.judges.anycap.wordcount, as the
pointwise rule counts them) and stated in the prompt with the rule. Unlike the pointwise judge, no verdict is
changed in code: a pointwise cap (score at most 1) does not decide an order between two captions (a capped
caption may still be as good as, or better than, another scored 1), so the rule is the judge's to apply, and
each side's check is recorded beside the verdicts (`length_checks`) for a reader to audit.

Reply format: JSON {"quality": .., "hallucination": .., "overall": .., "reason": ..} (fenced or embedded
accepted, read as the pointwise parser reads objects; the LAST object with an "overall" key wins).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from capjudge.judges.anycap.judge import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE, DESCRIPTOR
from capjudge.judges.anycap.length_rule import ToleranceCheck, check_length_tolerance
from capjudge.judges.anycap.parser import decoded_objects
from capjudge.judges.pairwise.templates import load_pairwise_template
from capjudge.judges.pairwise.verdicts import OVERALL, PairwiseResult, read_verdict, verdict_failure
from capjudge.judges.types import BadInput, ChatRequest, ImagePart, JudgeReply, ParseFailure

PAIRWISE_VERSION = "anycap-pairwise/1"
TEMPLATE_NAME = "anycap_pairwise_v1.txt"
PAIRWISE_DIMENSIONS: tuple[str, ...] = ("quality", "hallucination", OVERALL)
NO_JSON = "no_json"

_PLACEHOLDER = re.compile(r"\{(caption_type|output_a|output_b|reference|words_a|words_b|reference_words|tolerance)\}")


def length_checks(caption_type: str, first: str, second: str, reference: str, tolerance: int,
                  item: object = None) -> tuple[ToleranceCheck, ToleranceCheck]:
    """Both outputs' length-rule checks, as the pointwise judge checks one. Raises UnknownCaptionType."""
    return (check_length_tolerance(caption_type, first, reference, tolerance, item=item),
            check_length_tolerance(caption_type, second, reference, tolerance, item=item))


def render_pairwise_prompt(caption_type: str, first: str, second: str, reference: str, checks: Sequence[ToleranceCheck],
                           tolerance: int) -> str:
    values = {"caption_type": checks[0].caption_type, "output_a": first, "output_b": second, "reference": reference,
              "words_a": str(checks[0].output_words), "words_b": str(checks[1].output_words),
              "reference_words": str(checks[0].reference_words), "tolerance": str(tolerance)}
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], load_pairwise_template(TEMPLATE_NAME).prompt)


def build_pairwise_request(caption_type: str, first: str, second: str, reference: str, *, video: Any,
                           tolerance: int, item: object = None) -> ChatRequest:
    """The request: the prompt, then the pointwise judge's 8 JPEG frames of `video`. Raises VideoError for an
    unusable video, UnknownCaptionType for a type outside the rubric, BadInput for a caption that is not text."""
    for label, caption in (("first", first), ("second", second)):
        if not isinstance(caption, str):
            raise BadInput(f"the {label} output must be a string, got {type(caption).__name__}")
    checks = length_checks(caption_type, first, second, reference, tolerance, item)
    frames: tuple[ImagePart, ...] = DESCRIPTOR.frames.render(video=video)  # type: ignore[union-attr]
    return ChatRequest(parts=(render_pairwise_prompt(caption_type, first, second, reference, checks, tolerance), *frames),
                       params={"temperature": DEFAULT_TEMPERATURE, "max_tokens": DEFAULT_MAX_TOKENS},
                       model=DESCRIPTOR.published_model)


def parse_pairwise_reply(reply: JudgeReply) -> PairwiseResult | ParseFailure:
    """The three verdicts (positional: "A" is the output shown first), or the ParseFailure that re-asks."""
    text = reply.content or ""
    if not text.strip():
        return ParseFailure(NO_JSON, "the reply is empty")
    objects = [obj for obj in decoded_objects(text) if OVERALL in obj]
    if not objects:
        return ParseFailure(NO_JSON, "no JSON object with an 'overall' key in the reply"
                            + (" (reply cut off at max_tokens)" if reply.finish_reason == "length" else ""))
    chosen = objects[-1]
    found = {name: value if isinstance(value, str) else repr(value) for name, value in chosen.items()
             if name in PAIRWISE_DIMENSIONS}
    failure = verdict_failure(PAIRWISE_DIMENSIONS, found, reply.finish_reason == "length")
    if failure is not None:
        return failure
    reason = chosen.get("reason")
    return PairwiseResult(PAIRWISE_DIMENSIONS, {name: read_verdict(found[name]) for name in PAIRWISE_DIMENSIONS},  # type: ignore[misc]
                          reason if isinstance(reason, str) else "", reply.content)


LOCAL_PAIRWISE_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {**{name: {"type": "string", "enum": ["A", "B", "tie"]} for name in PAIRWISE_DIMENSIONS},
                   "reason": {"type": "string", "minLength": 10, "maxLength": 160}},
    "required": [*PAIRWISE_DIMENSIONS, "reason"],
    "additionalProperties": False,
}


def local_pairwise_constraint() -> dict[str, Any]:
    """Request params that force the reply's JSON shape on a llama.cpp server (never sent to another backend)."""
    return {"response_format": {"type": "json_object", "schema": copy.deepcopy(dict(LOCAL_PAIRWISE_SCHEMA))}}

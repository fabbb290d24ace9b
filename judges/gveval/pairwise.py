"""The pairwise G-VEval ACCR judge (capjudge's own prompt: templates/gveval_pairwise_v1.txt says why): two
captions of one video, A, B or tie on accuracy, completeness, conciseness and relevance, plus overall.

The judge sees exactly what the pointwise G-VEval judge sees of the video: one PNG strip of three labelled
frames, sampled and rendered by the same frame geometry (`capjudge.judges.gveval.judge.DESCRIPTOR.frames`),
and in mode "frames+references" the same references block. Mode "references" (text only, as capjudge judges
VATEX-EVAL without its clips) has a template of its own (templates/gveval_pairwise_references_v1.txt: the
clip's references instead of the frames, worded as the pointwise text-only prompt) and its own judge version,
so its replies are never mistaken for a frames prompt's in the cache; its request has no image.

Sampling is the published G-VEval's (temperature 1, top_p 1) without logprobs: a verdict is read from its
text, there is no expected value to weigh. Reply format (the template's last lines): `Accuracy: [[A]]`, one
line per dimension and `Overall: [[tie]]`; the rules are capjudge.judges.pairwise.verdicts'.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from os import PathLike
from typing import Any

from capjudge.judges.gveval.judge import DESCRIPTOR, REFERENCES_BLOCK, format_references, load_template
from capjudge.judges.gveval.parser import DIMENSION_NAMES
from capjudge.judges.pairwise.templates import load_pairwise_template
from capjudge.judges.pairwise.verdicts import OVERALL, PairwiseResult, read_verdict, verdict_failure
from capjudge.judges.types import BadInput, ChatRequest, JudgeReply, ParseFailure

# Part of every cache key: bump (with a new template file) when the prompt, the image or the parsing changes.
PAIRWISE_VERSION = "gveval-pairwise/1"
TEMPLATE_NAME = "gveval_pairwise_v1.txt"
REFERENCES_PAIRWISE_VERSION = "gveval-pairwise-references/1"
REFERENCES_TEMPLATE_NAME = "gveval_pairwise_references_v1.txt"
PAIRWISE_DIMENSIONS: tuple[str, ...] = (*DIMENSION_NAMES, OVERALL)
PAIRWISE_MODES = ("frames", "frames+references", "references")
SAMPLING: Mapping[str, Any] = {"temperature": 1, "top_p": 1}

_PLACEHOLDER = re.compile(r"\{\{(ReferencesBlock|References|CaptionA|CaptionB)\}\}")
# "Accuracy: [[A]]": the dimension's name, a colon, the verdict in double brackets; emphasis may sit around
# them. A lookahead makes the matches overlap, so the last statement really is the last one.
_STATEMENT = re.compile(r"(?i)(?=\b(?P<name>accuracy|completeness|conciseness|relevance|overall)\b[ \t*_]*:[ \t*_]*"
                        r"\[\[(?P<verdict>[^\[\]\n]{0,60})\]\])")


def pairwise_version(mode: str) -> str:
    """The judge version of `mode`'s pairwise prompt (part of every cache key)."""
    return REFERENCES_PAIRWISE_VERSION if mode == "references" else PAIRWISE_VERSION


def render_pairwise_prompt(first: str, second: str, references: Sequence[str] = (), mode: str = "frames") -> str:
    """The prompt with Caption A = `first`, Caption B = `second` (one pass: a caption's own "{{...}}" stays)."""
    if mode not in PAIRWISE_MODES:
        raise BadInput(f"G-VEval mode {mode!r} has no pairwise prompt (it has for {', '.join(PAIRWISE_MODES)})")
    if mode == "references":
        values = {"References": format_references(references), "CaptionA": first, "CaptionB": second}
        template = load_pairwise_template(REFERENCES_TEMPLATE_NAME).prompt
    else:
        block = ""
        if mode == "frames+references":
            block = load_template(REFERENCES_BLOCK).replace("{{References}}", format_references(references))
        values = {"ReferencesBlock": block, "CaptionA": first, "CaptionB": second}
        template = load_pairwise_template(TEMPLATE_NAME).prompt
    return _PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), template)


def build_pairwise_request(first: str, second: str, *, video: str | PathLike[str] | None,
                           references: Sequence[str] = (), mode: str = "frames") -> ChatRequest:
    """The request: the prompt, then (frame modes) the pointwise judge's three-frame strip of `video`; in mode
    "references" the prompt alone. Raises VideoError for an unusable video, BadInput for inputs that cannot
    make a request."""
    for label, caption in (("first", first), ("second", second)):
        if not isinstance(caption, str):
            raise BadInput(f"the {label} caption must be a string, got {type(caption).__name__}")
    prompt = render_pairwise_prompt(first, second, references, mode)
    if mode == "references":
        return ChatRequest(parts=(prompt,), params=dict(SAMPLING), model=DESCRIPTOR.published_model)
    if video is None:
        raise BadInput(f"G-VEval mode {mode!r} shows the frames: the item names no video")
    (strip,) = DESCRIPTOR.frames.render(video=video)  # type: ignore[union-attr]
    return ChatRequest(parts=(prompt, strip), params=dict(SAMPLING), model=DESCRIPTOR.published_model)


def parse_pairwise_reply(reply: JudgeReply) -> PairwiseResult | ParseFailure:
    """The five verdicts (positional: "A" is the caption shown first), or the ParseFailure that re-asks."""
    text = reply.content or ""
    found: dict[str, str] = {}
    first_statement = None
    for match in _STATEMENT.finditer(text):
        found[match.group("name").lower()] = match.group("verdict")
        first_statement = match.start() if first_statement is None else first_statement
    failure = verdict_failure(PAIRWISE_DIMENSIONS, found, reply.finish_reason == "length")
    if failure is not None:
        return failure if text.strip() else ParseFailure(failure.kind, failure.detail + " (reply is empty)", failure.data)
    verdicts = {name: read_verdict(found[name]) for name in PAIRWISE_DIMENSIONS}
    return PairwiseResult(PAIRWISE_DIMENSIONS, verdicts, text[:first_statement].strip(), reply.content)  # type: ignore[arg-type]


# The embedded local judge (llama.cpp) only, as the pointwise judge's grammar: a short reason, then the five lines.
LOCAL_PAIRWISE_GRAMMAR = r"""
root      ::= reason "\n" "Accuracy: [[" v "]]\n" "Completeness: [[" v "]]\n" "Conciseness: [[" v "]]\n" "Relevance: [[" v "]]\n" "Overall: [[" v "]]"
reason    ::= [A-Za-z] [ -~]{19,139}
v         ::= "A" | "B" | "tie"
""".strip()


def local_pairwise_constraint() -> dict[str, Any]:
    """Request params that force the five verdict lines on a llama.cpp server (never sent to another backend)."""
    return {"extra_body": {"grammar": LOCAL_PAIRWISE_GRAMMAR}}

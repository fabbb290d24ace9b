"""The G-VEval ACCR video judge: build the request, ask the judge client, return four scores.

Modes (which evidence the judge gets):
- "frames" (default, the published reference-free setting): the seed prompt
  (templates/gveval_accr_video.txt, byte for byte; only `{{Caption}}` is substituted) plus one image of three
  frames (see judges/frame_strip.py), sampled as published: indices int(linspace(0, n_frames - 1, 4)), first three.
- "frames+references" (OUR variant): the seed prompt with a reference-caption block
  (templates/gveval_references_block.txt) inserted just before "Generated Caption:". The seed's step 3
  already asks to compare with "the reference captions"; this block supplies them.
- "references" (OUR variant, text only): templates/gveval_accr_references.txt, the seed with its frame
  sentences (opening paragraph, criterion, steps 1 and 4) reworded for references and a "Reference
  Captions:" slot. The dimensions, the scale and the closing α/β/ψ/δ format are unchanged, so the same
  parser applies. (The published code sent its text-only prompt as a system message; we send every prompt
  as the user turn.)
References are listed one per line as "- caption" (line breaks inside a caption become spaces).

Sampling as published: temperature 1, top_p 1, logprobs with top_logprobs 5. Requests default to the
published model (gpt-4o-2024-05-13); a model configured on the judge client takes precedence.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from os import PathLike
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Mapping, Sequence

from capjudge.judges.gveval.parser import MAX_SCORE, MIN_SCORE, SCORE_NAMES, GVEvalResult, Scoring, make_reply_parser
from capjudge.judges.descriptor import FrameGeometry, JudgeDescriptor
from capjudge.judges.gveval.reply_view import view_gveval_reply
from capjudge.judges.record import ReplyFields
from capjudge.judges.types import BAD_INPUT, BadInput, ChatRequest, ImagePart, JudgeCaller, ParseFailure
from capjudge.judges.video import FrameSource, VideoError

__all__ = [
    "DEFAULT_SAMPLING",
    "GVEvalJudge",
    "GVEvalResult",
    "JUDGE_VERSION",
    "MODES",
    "PUBLISHED_MODEL",
    "build_request",
    "render_prompt",
]


# Part of every cache key: bump when the prompt, the image or the parsing changes what a reply means.
JUDGE_VERSION = "gveval-accr-video/1"
PUBLISHED_MODEL = "gpt-4o-2024-05-13"

Mode = Literal["frames", "frames+references", "references"]
MODES: tuple[str, ...] = ("frames", "frames+references", "references")
SAMPLE_POINTS = 4  # published: linspace over 4 points ...
FRAMES_SHOWN = 3  # ... of which the first three are shown
DEFAULT_SAMPLING: Mapping[str, Any] = MappingProxyType(
    {"temperature": 1, "top_p": 1, "logprobs": True, "top_logprobs": 5}
)

DESCRIPTOR = JudgeDescriptor(
    name="gveval",
    version=JUDGE_VERSION,
    published_model=PUBLISHED_MODEL,
    # Each logged reply (capjudge.judges.record.ReplySample) keeps its scores in `scores`; the task's per-item
    # metric `gveval_<score>` (capjudge.tasks.harness.gveval_task) is the mean of the judged replies' score.
    reply_fields=ReplyFields(
        values={name: f"scores.{name}" for name in SCORE_NAMES},
        metrics={f"gveval_{name}": name for name in SCORE_NAMES},
        scores=SCORE_NAMES,
        main="mean",
    ),
    # Published: linspace over SAMPLE_POINTS points, the first FRAMES_SHOWN shown in one labelled PNG strip.
    frames=FrameGeometry(sample_points=SAMPLE_POINTS, shown=FRAMES_SHOWN, layout="strip", image_format="PNG"),
    reply_grammar="free text ending in one statement per dimension, the 0-100 score wrapped in its marker: "
                  "\u03b1N\u03b1 accuracy, \u03b2N\u03b2 completeness, \u03c8N\u03c8 conciseness, \u03b4N\u03b4 relevance",
    view_reply=view_gveval_reply,
    score_range=(MIN_SCORE, MAX_SCORE),
)

SEED_TEMPLATE = "gveval_accr_video.txt"
REFERENCES_TEMPLATE = "gveval_accr_references.txt"
REFERENCES_BLOCK = "gveval_references_block.txt"
_BLOCK_ANCHOR = "Generated Caption:\n{{Caption}}"
_PLACEHOLDER = re.compile(r"\{\{(Caption|References)\}\}")


@functools.lru_cache(maxsize=None)  # package data, read once: every item renders from it
def load_template(name: str) -> str:
    """A template exactly as stored (bytes decoded as UTF-8; no newline translation)."""
    return resources.files("capjudge.judges").joinpath("templates", name).read_bytes().decode("utf-8")


def render_prompt(caption: str, references: Sequence[str] = (), mode: Mode = "frames") -> str:
    """The prompt text for `mode`. In "frames" mode this is the seed with `{{Caption}}` replaced, nothing else."""
    _check_mode(mode)
    if mode == "frames":
        if references:
            raise BadInput("mode 'frames' takes no references; use 'frames+references' or 'references'")
        return _fill(load_template(SEED_TEMPLATE), {"Caption": caption})
    listed = format_references(references)
    if mode == "references":
        return _fill(load_template(REFERENCES_TEMPLATE), {"Caption": caption, "References": listed})
    seed = load_template(SEED_TEMPLATE)
    if seed.count(_BLOCK_ANCHOR) != 1:
        raise RuntimeError(f"{SEED_TEMPLATE}: expected exactly one {_BLOCK_ANCHOR!r} to insert references before")
    with_block = seed.replace(_BLOCK_ANCHOR, load_template(REFERENCES_BLOCK) + _BLOCK_ANCHOR)
    return _fill(with_block, {"Caption": caption, "References": listed})


def format_references(references: Sequence[str]) -> str:
    if isinstance(references, str):
        raise BadInput("references must be a sequence of captions, not one string")
    if not references:
        raise BadInput("this mode needs at least one reference caption")
    lines = []
    for position, reference in enumerate(references):
        one_line = re.sub(r"\s*\n\s*", " ", reference.strip())
        if not one_line:
            raise BadInput(f"reference caption {position} is empty")
        lines.append(f"- {one_line}")
    return "\n".join(lines)


def _fill(template: str, values: Mapping[str, str]) -> str:
    # One pass: text inserted for one placeholder is never scanned again, so a caption that happens to
    # contain "{{References}}" stays as written. Other {{...}} (the α{{accuracy_score}}α examples) stay too.
    return _PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), template)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")


def build_request(
    caption: str,
    *,
    video: str | PathLike[str] | None = None,
    frames: Sequence[FrameSource] | None = None,
    image: str | PathLike[str] | None = None,
    references: Sequence[str] = (),
    mode: Mode = "frames",
    sampling: Mapping[str, Any] | None = None,
) -> ChatRequest:
    """The judge request: prompt text, then (unless mode is "references") the frame image.

    Visual input, exactly one for the frame modes: `video` (a file; three frames are sampled), `frames`
    (a video's pre-extracted frames in order, image paths or PIL images; sampled by the same indices) or
    `image` (a ready-made strip, sent as is). `sampling` overrides DEFAULT_SAMPLING key by key.
    Raises VideoError for unusable visual input, BadInput for inputs that cannot make a request.
    """
    _check_mode(mode)
    if not isinstance(caption, str):
        raise BadInput(f"caption must be a string, got {type(caption).__name__}")
    given = [name for name, value in (("video", video), ("frames", frames), ("image", image)) if value is not None]
    if mode == "references":
        if given:
            raise BadInput(f"mode 'references' is text only; do not pass {' or '.join(given)}")
        parts: tuple[str | ImagePart, ...] = (render_prompt(caption, references, mode),)
    else:
        if len(given) != 1:
            raise BadInput(f"mode {mode!r} needs exactly one of video, frames or image; got {given or 'none'}")
        prompt = render_prompt(caption, references, mode)
        parts = (prompt, _visual_part(video=video, frames=frames, image=image))
    return ChatRequest(parts=parts, params={**DEFAULT_SAMPLING, **(sampling or {})}, model=PUBLISHED_MODEL)


def _visual_part(*, video, frames, image) -> ImagePart:
    if video is not None or frames is not None:
        (strip,) = DESCRIPTOR.frames.render(video=video, frames=frames)  # type: ignore[union-attr]
        return strip
    return image_file_part(image)


def image_file_part(path: str | PathLike[str]) -> ImagePart:
    """A ready-made frame image sent as its own bytes when PNG or JPEG (re-encoded as PNG otherwise)."""
    from PIL import Image, UnidentifiedImageError

    file = Path(path)
    if not file.is_file():
        raise VideoError(path, "image file does not exist" if not file.exists() else "not a regular file")
    try:
        with Image.open(file) as opened:
            image_format = opened.format
            opened.load()
            if image_format not in ("PNG", "JPEG"):
                return ImagePart.from_pil(opened.convert("RGB"), "PNG", detail="high")
    except (UnidentifiedImageError, OSError) as error:
        raise VideoError(path, f"not a readable image ({error})") from error
    media_type = "image/png" if image_format == "PNG" else "image/jpeg"
    return ImagePart(file.read_bytes(), media_type, detail="high")


class GVEvalJudge:
    """G-VEval ACCR judgments through a judge client (`capjudge.judges.client.judge_client`).

    `judge` never raises for a bad item: an unusable video, replies that never parse and transport failures
    all come back as an unjudged GVEvalResult whose `failure.kind` says which ("video_unreadable", "missing",
    "out_of_range", "request_failed", ...). References are used only by the modes that include them.
    """

    def __init__(
        self,
        client: JudgeCaller,  # `ajudge` needs a JudgeClient's `ajudge` too
        *,
        scoring: Scoring = "expected",
        mode: Mode = "frames",
        max_tries: int = 3,
        sampling: Mapping[str, Any] | None = None,
    ) -> None:
        _check_mode(mode)
        self.client = client
        self.scoring: Scoring = scoring
        self.mode: Mode = mode
        self.max_tries = max_tries
        self.sampling = dict(sampling or {})
        self._parse = make_reply_parser(scoring)

    def request_for(
        self,
        caption: str,
        *,
        video: str | PathLike[str] | None = None,
        frames: Sequence[FrameSource] | None = None,
        image: str | PathLike[str] | None = None,
        references: Sequence[str] = (),
    ) -> ChatRequest:
        uses_frames = self.mode != "references"
        return build_request(
            caption,
            video=video if uses_frames else None,
            frames=frames if uses_frames else None,
            image=image if uses_frames else None,
            references=references if self.mode != "frames" else (),
            mode=self.mode,
            sampling=self.sampling,
        )

    def judge(self, caption: str, **inputs: Any) -> GVEvalResult:
        request = self._request_or_unjudged(caption, inputs)
        if isinstance(request, GVEvalResult):
            return request
        outcome = self.client.judge(request, self._parse, judge_version=JUDGE_VERSION, max_tries=self.max_tries)
        return self._result(outcome)

    async def ajudge(self, caption: str, **inputs: Any) -> GVEvalResult:
        request = self._request_or_unjudged(caption, inputs)
        if isinstance(request, GVEvalResult):
            return request
        outcome = await self.client.ajudge(
            request, self._parse, judge_version=JUDGE_VERSION, max_tries=self.max_tries
        )
        return self._result(outcome)

    def _request_or_unjudged(self, caption: str, inputs: dict[str, Any]) -> ChatRequest | GVEvalResult:
        try:
            return self.request_for(caption, **inputs)
        except VideoError as error:
            return GVEvalResult.unjudged(ParseFailure("video_unreadable", str(error)), self.scoring)
        except BadInput as error:
            # This item's inputs cannot make a request (no references, an empty reference, no visual input,
            # a caption that is not text): unjudged, so one bad row never ends a run. Any other exception
            # is a bug in building the request and propagates: it must not pass for a run of bad items.
            return GVEvalResult.unjudged(ParseFailure(BAD_INPUT, str(error)), self.scoring)

    def _result(self, outcome: Any) -> GVEvalResult:
        if outcome.ok:
            return outcome.value
        last = outcome.last_reply
        return GVEvalResult.unjudged(outcome.failure, self.scoring, raw_reply=last.content if last else None)


# ----------------------------------------------------------------------------------------------------------
# The embedded local judge (llama.cpp) only: a tiny model cannot follow the reply format on its own, so the
# format is forced on that server (a GBNF grammar) instead of loosening the parser.

# Prose, then the four statements the G-VEval prompt asks for. The prose is printable ASCII (at most one token
# per character) and bounded, so the statements always fit in a short max_tokens budget (~200).
LOCAL_REPLY_GRAMMAR = r"""
root      ::= reason "\n" accuracy "\n" complete "\n" concise "\n" relevance
reason    ::= [A-Za-z] [ -~]{19,139}
accuracy  ::= "The Accuracy score is α" score "α."
complete  ::= "The Completeness score is β" score "β."
concise   ::= "The Conciseness score is ψ" score "ψ."
relevance ::= "The Relevance score is δ" score "δ."
score     ::= "100" | [1-9] [0-9]? | "0"
""".strip()


def local_reply_constraint() -> dict[str, Any]:
    """Request params that force the four statements on a llama.cpp server. `extra_body` is the openai SDK's
    way to send a field it does not model (`grammar`); never sent to OpenAI or any other backend."""
    return {"extra_body": {"grammar": LOCAL_REPLY_GRAMMAR}}

"""Turn an AnyCapEval judge reply into a score 0..4 (and its reason), or a typed ParseFailure.

The prompt asks for bare JSON, `{"score": 3, "reason": "..."}`, but models wrap it in ```json fences, add
prose, use typographic quotes or answer with a Python dict. The parser therefore:

1. finds every balanced `{...}` span in the reply (a small scanner; quotes are tracked inside a span so a
   brace in a string does not end it, and a quote-blind pass catches spans an unmatched apostrophe hides);
2. decodes each with `json.loads`, then `ast.literal_eval` (Python dicts), each on the text as written and
   with typographic quotes made straight;
3. takes the LAST decoded object that has a "score" key (by where it ends, so an object nested in a reply
   object never wins over the object around it) — a reply that restates an example first and answers last
   is read by its answer.

Kinds of failure: `no_json` (no object at all, or an empty reply), `missing` (objects, but none with a
score, or a null score), `non_integer` (2.5, "three", [3, 4], true), `out_of_range` (outside 0..4).
Accepted scores: 3, "3", 3.0, "3.0", [3].
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Iterator

from capjudge.judges.types import JudgeReply, ParseFailure

MIN_SCORE, MAX_SCORE = 0, 4

_TYPOGRAPHIC_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'"})
_INTEGER_TEXT = re.compile(r"[+-]?\d+(?:\.0*)?")


@dataclass(frozen=True)
class AnyCapVerdict:
    """What the judge said: an integer score 0..4 and its reason, when it gave one."""

    score: int
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"score": self.score, "reason": self.reason}


def parse_anycap_reply(reply: JudgeReply | str | None) -> AnyCapVerdict | ParseFailure:
    """The judge's verdict, or why there is none. Accepts a JudgeReply or its text."""
    text = reply.content if isinstance(reply, JudgeReply) else reply
    if text is None or not text.strip():
        return ParseFailure("no_json", "the reply is empty")
    objects = list(_decoded_objects(text))
    if not objects:
        return ParseFailure("no_json", f"no JSON or Python object in the reply: {_excerpt(text)}")
    scored = [obj for obj in objects if "score" in obj]
    if not scored:
        return ParseFailure("missing", f"no object has a 'score' key (found keys {sorted(objects[-1])})")
    chosen = scored[-1]
    score = _integer_score(chosen["score"])
    if isinstance(score, ParseFailure):
        return score
    return AnyCapVerdict(score, _reason_text(chosen.get("reason")))


def _integer_score(value: Any) -> int | ParseFailure:
    raw = value
    if isinstance(value, list) and len(value) == 1:  # "[0-4]" in the prompt invites "[3]"
        value = value[0]
    if value is None:
        return ParseFailure("missing", "the score is null")
    if isinstance(value, bool):
        return ParseFailure("non_integer", f"score is a boolean: {raw!r}")
    if isinstance(value, str):
        stripped = value.strip()
        if not _INTEGER_TEXT.fullmatch(stripped):
            return ParseFailure("non_integer", f"score is not an integer: {raw!r}")
        value = int(float(stripped)) if "." in stripped else int(stripped)
    elif isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return ParseFailure("non_integer", f"score is not an integer: {raw!r}")
        value = int(value)
    elif not isinstance(value, int):
        return ParseFailure("non_integer", f"score is not a number: {raw!r}")
    if not MIN_SCORE <= value <= MAX_SCORE:
        return ParseFailure("out_of_range", f"score {value} is outside {MIN_SCORE}..{MAX_SCORE}")
    return value


def _reason_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _decoded_objects(text: str) -> list[dict[str, Any]]:
    """Every `{...}` span of `text` that decodes to a dict, ordered by where the span ends."""
    straight = text.translate(_TYPOGRAPHIC_QUOTES)  # same length: spans carry over
    decoded: dict[tuple[int, int], dict[str, Any]] = {}
    for start, end in sorted(set(_brace_spans(text)) | set(_brace_spans(straight))):
        for candidate in (text[start:end], straight[start:end]):
            obj = _decode(candidate)
            if obj is not None:
                decoded[(start, end)] = obj
                break
    return [decoded[span] for span in sorted(decoded, key=lambda span: (span[1], -span[0]))]


def _decode(candidate: str) -> dict[str, Any] | None:
    try:
        value = json.loads(candidate)
    except ValueError:
        try:
            value = ast.literal_eval(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


def _brace_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of balanced braces opening at each "{": quote-aware and quote-blind."""
    for start, char in enumerate(text):
        if char != "{":
            continue
        for aware in (True, False):
            end = _matching_brace(text, start, quote_aware=aware)
            if end is not None:
                yield start, end


def _matching_brace(text: str, start: int, *, quote_aware: bool) -> int | None:
    depth = 0
    quote: str | None = None
    escaped = False
    for index in range(start, len(text)):
        char = text[index]
        if quote is not None:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
            continue
        if quote_aware and char in "\"'":
            quote = char
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def _excerpt(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")

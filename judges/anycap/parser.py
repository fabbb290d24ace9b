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
    objects = list(decoded_objects(text))
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


def decoded_objects(text: str) -> list[dict[str, Any]]:
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
    except (ValueError, RecursionError):  # RecursionError: objects nested deeper than Python's stack
        try:
            value = ast.literal_eval(candidate)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    return value if isinstance(value, dict) else None


# A "{" that can open an object with a "score" key: the first key follows it, and keys are quoted (JSON,
# Python, typographic). Scanning from every "{" instead made a reply full of braces (a looping model, or
# one quoting a caption) cost time quadratic in its length: 20,000 braces took a minute to parse.
_OBJECT_START = re.compile("\\{(?=\\s*[\"'\u201c\u201d\u2018\u2019])")


def _brace_spans(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of balanced braces opening at each object start: quote-aware and quote-blind."""
    blind = _blind_matches(text)
    aware: dict[int, int | None] = {}
    for start in reversed([found.start() for found in _OBJECT_START.finditer(text)]):
        aware[start] = _matching_brace(text, start, aware)
    for start, end in aware.items():
        if end is not None:
            yield start, end
        if start in blind:
            yield start, blind[start]


def _blind_matches(text: str) -> dict[int, int]:
    """{start: end} of every balanced "{...}" ignoring quotes, in one pass with a stack."""
    matches: dict[int, int] = {}
    open_at: list[int] = []
    for index, char in enumerate(text):
        if char == "{":
            open_at.append(index)
        elif char == "}" and open_at:
            matches[open_at.pop()] = index + 1
    return matches


def _matching_brace(text: str, start: int, known: dict[int, int | None]) -> int | None:
    """End of the quote-aware balanced span opening at `start`, or None.

    `known` holds the results for object starts after this one. A scan that reaches one of them outside
    quotes is from there on the same scan (only deeper), so it jumps to that span's end, or gives up when
    that span never closes: every character is then scanned about once, not once per "{".
    """
    depth = 0
    quote: str | None = None
    escaped = False
    index = start
    while index < len(text):
        char = text[index]
        if quote is not None:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
        elif char in "\"'":
            quote = char
        elif char == "{":
            if index != start and index in known:
                inner_end = known[index]
                if inner_end is None:
                    return None
                index = inner_end
                continue
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None


def _excerpt(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[:limit] + "…")

"""Turn a G-VEval ACCR judge reply into four scores, or a typed failure.

The prompt asks the model to end with one statement per dimension, the score wrapped in a Greek letter:
`α85α` accuracy, `β70β` completeness, `ψ90ψ` conciseness, `δ80δ` relevance.

Text rules, per dimension: the LAST marker-number-marker in the reply wins (replies restate scores, quote the
prompt's example lines, or revise themselves); spaces and markdown emphasis (`*`, `_`) may sit between the
markers and the number; a decimal point is accepted. No such statement (including a template echo such as
`α{{accuracy_score}}α`) is `missing`; a number outside 0..100 is `out_of_range`. A judgment needs all four.

Expected-value scoring (the published G-VEval/G-Eval trick): the score is the probability-weighted mean of
the integers 0..100 among the top-5 alternatives of the token that carries the number in that final
statement, probabilities renormalised over those integers. When that cannot be computed honestly (no
logprobs, or the tokenizer split the number so the token is only part of it, e.g. "8" of "85"), the text
value is used and the reason is recorded.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

from capjudge.judges.types import JudgeReply, ParseFailure, ParseOutcome, TokenLogprob, Usage

Scoring = Literal["expected", "text"]

# Dimension name -> marker, in the order the prompt lists them.
DIMENSION_MARKERS: tuple[tuple[str, str], ...] = (
    ("accuracy", "α"),
    ("completeness", "β"),
    ("conciseness", "ψ"),
    ("relevance", "δ"),
)
DIMENSION_NAMES = tuple(name for name, _ in DIMENSION_MARKERS)
# Every score a G-VEval result has: the four dimensions, then their mean (the task's metric names and the
# CLI's output keys, in this order; MSVD-Eval's human-score columns, which capjudge.judges.datasets.msvd_eval
# spells itself, are these names in this order too: tests/judges/datasets/test_datasets.py checks).
SCORE_NAMES: tuple[str, ...] = (*DIMENSION_NAMES, "mean")
MIN_SCORE, MAX_SCORE = 0, 100  # every score, the mean of the four included

MISSING = "missing"
OUT_OF_RANGE = "out_of_range"

# Why expected-value scoring fell back to the text value for a dimension.
NO_LOGPROBS = "no_logprobs"
NUMBER_SPLIT = "number_split"  # the token after the marker is only part of the number ("8" of "85")
MARKER_IN_NUMBER_TOKEN = "marker_in_number_token"  # the tokenizer merged marker and number ("α85")
TOKENS_DO_NOT_MATCH_TEXT = "tokens_do_not_match_text"
NO_TOP_LOGPROBS = "no_top_logprobs"
NO_INTEGER_ALTERNATIVES = "no_integer_alternatives"

_FILLER_CHARS = " \t\u00a0*_"
_FILLER = "[ \t\u00a0*_]*"
_NUMBER = r"[-+]?\d+(?:\.\d+)?"
# A lookahead makes the matches overlap, so in "α85α90α" the last statement really is the last one.
_STATEMENT_PATTERNS = {
    name: re.compile(f"(?=({marker}{_FILLER}(?P<number>{_NUMBER}){_FILLER}{marker}))") for name, marker in DIMENSION_MARKERS
}
_INTEGER_TOKENS = {str(value): value for value in range(MIN_SCORE, MAX_SCORE + 1)}
_SENTENCE_BOUNDARY = re.compile(r"\n|[.!?](?=\s)")
_PUNCTUATION_ONLY_LINE = re.compile(r"^[\s.*_\-:]*$")


@dataclass(frozen=True)
class ScoreStatement:
    """The final `<marker><number><marker>` statement of one dimension, with its character offsets."""

    dimension: str
    value: float
    span: tuple[int, int]  # marker to marker, in the reply text
    number_span: tuple[int, int]


@dataclass(frozen=True)
class DimensionScore:
    """Both readings of one dimension; `expected` is None when it could not be computed (`fallback_reason`)."""

    text: float
    expected: float | None
    fallback_reason: str | None = None

    def value(self, scoring: Scoring) -> float:
        if scoring == "expected" and self.expected is not None:
            return self.expected
        return self.text


@dataclass(frozen=True)
class GVEvalResult(ParseOutcome):
    """One G-VEval judgment, or an unjudged item carrying its failure (`failure` set, scores None).

    `scoring` says which reading the four scores use; in "expected" mode a dimension whose expected value
    could not be computed uses its text value, and `fallback_reason` says which and why.
    """

    accuracy: float | None
    completeness: float | None
    conciseness: float | None
    relevance: float | None
    mean: float | None
    scoring: Scoring
    dimensions: Mapping[str, DimensionScore] = field(default_factory=dict)
    fallback_reason: str | None = None
    reasoning: str = ""
    raw_reply: str | None = None
    failure: ParseFailure | None = None

    @property
    def judged(self) -> bool:
        return self.failure is None

    @property
    def explanation(self) -> str | None:
        return self.reasoning or None

    def log_fields(self) -> dict[str, Any]:
        """The sample log's `judgment` fields: scores, how they were read, the failure."""
        return {
            "scores": self.scores(),
            "scoring": self.scoring,
            "fallback_reason": self.fallback_reason,
            "failure": self.failure_kind,
            "failure_detail": self.failure.detail if self.failure is not None else None,
        }

    @classmethod
    def unjudged(cls, failure: ParseFailure, scoring: Scoring, raw_reply: str | None = None) -> "GVEvalResult":
        return cls(None, None, None, None, None, scoring, raw_reply=raw_reply, failure=failure)

    def scores(self) -> dict[str, float | None]:
        """The four dimension scores and their mean, keyed like the CLI output."""
        return {name: getattr(self, name) for name in SCORE_NAMES}


def parse_statements(text: str | None) -> dict[str, ScoreStatement] | ParseFailure:
    """The final statement of every dimension, or a ParseFailure naming each dimension that failed."""
    text = text or ""
    statements: dict[str, ScoreStatement] = {}
    problems: dict[str, str] = {}
    notes: list[str] = []
    for name, pattern in _STATEMENT_PATTERNS.items():
        last = None
        for last in pattern.finditer(text):
            pass
        if last is None:
            problems[name] = MISSING
            notes.append(f"{name}: no statement")
            continue
        value = float(last.group("number"))
        if not MIN_SCORE <= value <= MAX_SCORE:
            problems[name] = OUT_OF_RANGE
            notes.append(f"{name}: {last.group('number')} is outside {MIN_SCORE}..{MAX_SCORE}")
            continue
        statements[name] = ScoreStatement(name, value, last.span(1), last.span("number"))
    if problems:
        kind = MISSING if MISSING in problems.values() else OUT_OF_RANGE
        detail = "; ".join(notes) + ("" if text.strip() else " (reply is empty)")
        return ParseFailure(kind, detail, {"dimensions": problems})
    return statements


def expected_value(
    statement: ScoreStatement, text: str, logprobs: Sequence[TokenLogprob] | None
) -> tuple[float | None, str | None]:
    """(expected score, None), or (None, fallback reason) when the logprobs cannot give it."""
    if not logprobs:
        return None, NO_LOGPROBS
    number_start, number_end = statement.number_span
    # Character offsets map to tokens only if the tokens spell the reply up to the number.
    if "".join(token.token for token in logprobs)[:number_end] != text[:number_end]:
        return None, TOKENS_DO_NOT_MATCH_TEXT
    offset = 0
    for token in logprobs:
        token_start, offset = offset, offset + len(token.token)
        if offset <= number_start:
            continue
        # `token` is the one holding the number's first character.
        if text[token_start:number_start].strip(_FILLER_CHARS):
            return None, MARKER_IN_NUMBER_TOKEN
        if offset < number_end:
            return None, NUMBER_SPLIT
        if not token.top:
            return None, NO_TOP_LOGPROBS
        return _weighted_integer_mean(token.top)
    return None, TOKENS_DO_NOT_MATCH_TEXT


def _weighted_integer_mean(alternatives: Sequence[tuple[str, float]]) -> tuple[float | None, str | None]:
    # Alternatives that spell the same integer (" 85" and "85") pool their probability.
    weights: dict[int, float] = {}
    for token, logprob in alternatives:
        value = _INTEGER_TOKENS.get(token.strip(_FILLER_CHARS))
        if value is not None:
            weights[value] = weights.get(value, 0.0) + math.exp(logprob)
    total = sum(weights.values())
    if total <= 0:
        return None, NO_INTEGER_ALTERNATIVES
    return sum(value * weight for value, weight in weights.items()) / total, None


def score_reply(reply: JudgeReply, scoring: Scoring = "expected") -> GVEvalResult | ParseFailure:
    """A judged GVEvalResult, or the ParseFailure that makes the client re-ask."""
    if scoring not in ("expected", "text"):
        raise ValueError(f"scoring must be 'expected' or 'text', got {scoring!r}")
    text = reply.content or ""
    statements = parse_statements(text)
    if isinstance(statements, ParseFailure):
        if reply.finish_reason == "length":
            return ParseFailure(
                statements.kind, statements.detail + " (reply cut off at max_tokens)", statements.data
            )
        return statements
    dimensions: dict[str, DimensionScore] = {}
    for name in DIMENSION_NAMES:
        statement = statements[name]
        expected, reason = expected_value(statement, text, reply.logprobs)
        dimensions[name] = DimensionScore(statement.value, expected, reason)
    used = {name: score.value(scoring) for name, score in dimensions.items()}
    fallbacks = {name: score.fallback_reason for name, score in dimensions.items() if score.fallback_reason}
    return GVEvalResult(
        accuracy=used["accuracy"],
        completeness=used["completeness"],
        conciseness=used["conciseness"],
        relevance=used["relevance"],
        mean=sum(used.values()) / len(used),
        scoring=scoring,
        dimensions=dimensions,
        fallback_reason=_summarise_fallbacks(fallbacks) if scoring == "expected" else None,
        reasoning=reasoning_text(text, statements.values()),
        raw_reply=reply.content,
    )


def score_text(text: str | None) -> GVEvalResult | ParseFailure:
    """Text-value scoring of a bare reply string (no logprobs), e.g. for `capjudge parse gveval`."""
    reply = JudgeReply(content=text, logprobs=None, finish_reason=None, model=None, usage=Usage())
    return score_reply(reply, scoring="text")


def make_reply_parser(scoring: Scoring = "expected") -> Callable[[JudgeReply], GVEvalResult | ParseFailure]:
    """The `parse` callable for `JudgeClient.judge`."""
    if scoring not in ("expected", "text"):
        raise ValueError(f"scoring must be 'expected' or 'text', got {scoring!r}")

    def parse(reply: JudgeReply) -> GVEvalResult | ParseFailure:
        return score_reply(reply, scoring)

    return parse


def _summarise_fallbacks(fallbacks: Mapping[str, str]) -> str | None:
    if not fallbacks:
        return None
    reasons = set(fallbacks.values())
    if len(fallbacks) == len(DIMENSION_NAMES) and len(reasons) == 1:
        return reasons.pop()
    return ", ".join(f"{name}={reason}" for name, reason in fallbacks.items())


def reasoning_text(text: str, statements: Iterable[ScoreStatement]) -> str:
    """The reply without the sentences that state the final scores: the judge's explanation."""
    cuts: list[tuple[int, int]] = []
    for statement in statements:
        start, end = statement.span
        sentence_start = 0
        for boundary in _SENTENCE_BOUNDARY.finditer(text, 0, start):
            sentence_start = boundary.end()
        trailing = re.match(r"[ \t*_]*[.!]?", text[end:])
        cuts.append((sentence_start, end + (trailing.end() if trailing else 0)))
    kept: list[str] = []
    position = 0
    for start, end in sorted(cuts):
        if start > position:
            kept.append(text[position:start])
        position = max(position, end)
    kept.append(text[position:])
    lines = [line.rstrip() for line in "".join(kept).splitlines()]
    cleaned = [line for line in lines if not _PUNCTUATION_ONLY_LINE.match(line) or not line]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(cleaned)).strip()

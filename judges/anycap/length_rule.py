"""The AnyCapEval length rules, enforced in code rather than left to the judge model.

Two rules, both capping the judge's score at 1 when violated:

1. Length tolerance (the seed prompt's "Mandatory Rule"): for brief and detail captions, the output's word
   count must be within ±tolerance of the reference's. The prompt says 10%; the paper's later version says
   30%, so the tolerance is a parameter. The comparison is done in integers, inclusive:
   within iff 100 * |w_out - w_ref| <= tolerance_percent * w_ref — no float can put 10.000000001% outside.
   A reference with no words gives the rule nothing to compare against: it is flagged, never capped.

2. Instruction restriction (what the published code does instead): the length restriction written in the
   instruction ("needs to be 20 to 30 words", "exactly two sentences", "cannot exceed three sentences")
   caps any caption type. Text that does not state a restriction in a recognised form is reported as
   unrecognised and never capped: guessing would silently change scores.

Words and sentences are counted by `capjudge.judges.anycap.wordcount` (its docstring states the rules). Two
deliberate differences from the published checker, which counted only ASCII letter runs as words and split
sentences on every [.!?]: numbers and non-Latin scripts count as words, and decimal points do not end
sentences.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from capjudge.judges.anycap.wordcount import count_sentences, count_words
# The five caption types are AnyCapEval's: its items name them, the rubric follows them (one definition).
from capjudge.judges.datasets.anycap_video import normalise_caption_type

MAX_SCORE = 4
CAPPED_SCORE = 1
DEFAULT_TOLERANCE_PERCENT = 10

LENGTH_CHECKED_TYPES = frozenset({"brief", "detail"})

FLAG_REFERENCE_HAS_NO_WORDS = "reference_has_no_words"
FLAG_RESTRICTION_UNRECOGNISED = "instruction_restriction_unrecognised"

Unit = Literal["words", "sentences"]


class InvalidTolerance(ValueError):
    """A tolerance that is not a non-negative integer percent."""


def parse_tolerance(value: object) -> int:
    """A tolerance as an integer percent. Accepts 10, "10" and 10.0; rejects 2.5, -1, True and text."""
    if isinstance(value, bool):
        raise InvalidTolerance(f"tolerance must be an integer percent, got {value!r}")
    if isinstance(value, int):
        percent = value
    elif isinstance(value, float) and value.is_integer():
        percent = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        percent = int(value)
    else:
        raise InvalidTolerance(f"tolerance must be an integer percent (e.g. 10 or 30), got {value!r}")
    if percent < 0:
        raise InvalidTolerance(f"tolerance must not be negative, got {percent}")
    return percent


def within_tolerance(output_words: int, reference_words: int, tolerance_percent: int) -> bool:
    """Inclusive integer comparison: |w_out - w_ref| <= tolerance_percent% of w_ref."""
    return 100 * abs(output_words - reference_words) <= tolerance_percent * reference_words


@dataclass(frozen=True)
class ToleranceCheck:
    """Rule 1 for one caption. `within` is None when the rule does not apply."""

    caption_type: str
    applies: bool
    output_words: int
    reference_words: int
    tolerance_percent: int
    within: bool | None
    max_score: int
    flags: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The `capjudge length-rule` result (exactly these keys: the CLI contract)."""
        return {
            "applies": self.applies,
            "output_words": self.output_words,
            "reference_words": self.reference_words,
            "within": self.within,
            "max_score": self.max_score,
        }


def check_length_tolerance(
    caption_type: str,
    output: str,
    reference: str,
    tolerance_percent: object = DEFAULT_TOLERANCE_PERCENT,
    *,
    item: object = None,
) -> ToleranceCheck:
    """Rule 1: brief/detail outputs outside ±tolerance of the reference's word count are capped at 1."""
    name = normalise_caption_type(caption_type, item=item)
    tolerance = parse_tolerance(tolerance_percent)
    output_words, reference_words = count_words(output), count_words(reference)
    flags: tuple[str, ...] = ()
    if name not in LENGTH_CHECKED_TYPES:
        applies, within = False, None
    elif reference_words == 0:
        applies, within, flags = False, None, (FLAG_REFERENCE_HAS_NO_WORDS,)
    else:
        applies, within = True, within_tolerance(output_words, reference_words, tolerance)
    return ToleranceCheck(
        caption_type=name,
        applies=applies,
        output_words=output_words,
        reference_words=reference_words,
        tolerance_percent=tolerance,
        within=within,
        max_score=CAPPED_SCORE if within is False else MAX_SCORE,
        flags=flags,
    )


# ------------------------------------------------------------------------------------------------------
# Rule 2: the length restriction written in the instruction.

_SMALL_NUMBERS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
NUMBER_WORDS = {word: value for value, word in enumerate(_SMALL_NUMBERS)} | _TENS

_NUMBER = (
    r"(?:\d+|(?:" + "|".join(_TENS) + r")(?:[- ](?:" + "|".join(_SMALL_NUMBERS[1:10]) + r"))?"
    r"|" + "|".join(sorted(_SMALL_NUMBERS, key=len, reverse=True)) + r")"
)
_UNIT = r"(?P<unit>words?|sentences?)\b"

# Each form names its bounds; a form is only recognised with the words that fix its meaning ("exactly",
# "be N", "cannot exceed"), so a bare "in two sentences" inside a task description is not read as a rule.
_RESTRICTION_FORMS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern, re.IGNORECASE))
    for kind, pattern in (
        # "20 to 30", "between 20 and 30"; a dash only between digits, so "twenty-five" stays one number.
        ("range", rf"\b(?:between\s+)?(?P<low>{_NUMBER})\s+(?:to|and)\s+(?P<high>{_NUMBER})\s+{_UNIT}"),
        ("range", rf"\b(?P<low>\d+)\s*[-–]\s*(?P<high>\d+)\s+{_UNIT}"),
        (
            "at_most",
            rf"\b(?:(?:not|never|cannot|can't)\s+exceed|(?:no|not) more than|at most|a maximum of|up to)"
            rf"\s+(?P<high>{_NUMBER})\s+{_UNIT}",
        ),
        ("at_least", rf"\b(?:at least|no fewer than|no less than|a minimum of)\s+(?P<low>{_NUMBER})\s+{_UNIT}"),
        ("exactly", rf"\b(?:exactly|be)\s+(?P<count>{_NUMBER})\s+{_UNIT}"),
    )
)


def parse_number(text: str) -> int:
    """ "12" -> 12, "two" -> 2, "twenty-five" -> 25."""
    text = text.strip().lower()
    if text.isdigit():
        return int(text)
    parts = re.split(r"[- ]", text)
    return sum(NUMBER_WORDS[part] for part in parts)


@dataclass(frozen=True)
class LengthRestriction:
    """An inclusive bound on a caption's length in words or sentences; `maximum` None means unbounded."""

    unit: Unit
    minimum: int
    maximum: int | None
    text: str

    def allows(self, count: int) -> bool:
        return self.minimum <= count and (self.maximum is None or count <= self.maximum)

    def measure(self, caption: str) -> int:
        return count_words(caption) if self.unit == "words" else count_sentences(caption)


def parse_length_restriction(text: str) -> LengthRestriction | None:
    """The one length restriction stated in `text` (a restriction sentence or a whole instruction).

    None when no recognised form is present, or when the text states two different restrictions (which
    one the author meant is not ours to guess).
    """
    found: dict[tuple[str, int, int | None], LengthRestriction] = {}
    claimed: list[range] = []
    for kind, pattern in _RESTRICTION_FORMS:  # most specific first; later forms skip claimed spans
        for match in pattern.finditer(text):
            span = range(match.start(), match.end())
            if any(span.start < taken.stop and taken.start < span.stop for taken in claimed):
                continue
            claimed.append(span)
            groups = match.groupdict()
            unit: Unit = "words" if groups["unit"].lower().startswith("word") else "sentences"
            if kind == "range":
                low, high = parse_number(groups["low"]), parse_number(groups["high"])
                minimum, maximum = min(low, high), max(low, high)
            elif kind == "at_most":
                minimum, maximum = 0, parse_number(groups["high"])
            elif kind == "at_least":
                minimum, maximum = parse_number(groups["low"]), None
            else:
                minimum = maximum = parse_number(groups["count"])
            found[(unit, minimum, maximum)] = LengthRestriction(unit, minimum, maximum, match.group(0))
    if len(found) != 1:
        return None
    return next(iter(found.values()))


@dataclass(frozen=True)
class RestrictionCheck:
    """Rule 2 for one caption. `satisfied` is None when the instruction's restriction was not recognised."""

    instruction: str
    restriction: LengthRestriction | None
    measured: int | None
    satisfied: bool | None
    max_score: int
    flags: tuple[str, ...] = ()


def check_instruction_restriction(instruction: str, output: str) -> RestrictionCheck:
    """Rule 2: an output that breaks the instruction's stated length restriction is capped at 1."""
    restriction = parse_length_restriction(instruction)
    if restriction is None:
        return RestrictionCheck(instruction, None, None, None, MAX_SCORE, (FLAG_RESTRICTION_UNRECOGNISED,))
    measured = restriction.measure(output)
    satisfied = restriction.allows(measured)
    return RestrictionCheck(instruction, restriction, measured, satisfied, MAX_SCORE if satisfied else CAPPED_SCORE)

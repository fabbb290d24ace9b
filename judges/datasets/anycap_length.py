"""The length restriction an AnyCapEval instruction states ("The generated caption's length needs to be 20 to
30 words", "exactly two sentences", "cannot exceed three sentences"), read from its text.

AnyCapEval's own wording, so it is the dataset's (as its caption types are, `anycap_video`), read in two places
with one reading: the item loader refuses an item whose length instruction states none, and the judge's
second length rule (`capjudge.judges.anycap.length_rule`) caps a caption that breaks it. Text that does not
state a restriction in a recognised form reads as None: guessing would silently change scores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Unit = Literal["words", "sentences"]

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

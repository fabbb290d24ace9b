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
from typing import Any

from capjudge.judges.anycap.wordcount import count_sentences, count_words
# How an instruction states its length is AnyCapEval's wording, read where its loader reads it too (one
# reading); imported here by name, as this module's readers always have.
from capjudge.judges.datasets.anycap_length import LengthRestriction, parse_length_restriction
# The five caption types are AnyCapEval's: its items name them, the rubric follows them (one definition).
from capjudge.judges.datasets.anycap_video import normalise_caption_type

MAX_SCORE = 4
CAPPED_SCORE = 1
DEFAULT_TOLERANCE_PERCENT = 10

LENGTH_CHECKED_TYPES = frozenset({"brief", "detail"})

FLAG_REFERENCE_HAS_NO_WORDS = "reference_has_no_words"
FLAG_RESTRICTION_UNRECOGNISED = "instruction_restriction_unrecognised"


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
    measured = count_words(output) if restriction.unit == "words" else count_sentences(output)
    satisfied = restriction.allows(measured)
    return RestrictionCheck(instruction, restriction, measured, satisfied, MAX_SCORE if satisfied else CAPPED_SCORE)

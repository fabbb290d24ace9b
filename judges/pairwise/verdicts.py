"""One pairwise judgment: A, B or tie per rubric dimension plus overall, or a typed failure (never a silent tie).

The judge is shown two captions, the first labelled A and the second B, so a `PairwiseResult`'s verdicts are
POSITIONAL: "A" is the caption shown first. The arena record (capjudge.judges.pairwise.record) turns them into
verdicts about the two models with `for_models`.

The reply rules the judges' parsers share: a verdict is "A", "B" or "tie" (any letter case, spaces and markdown
emphasis around it ignored); the LAST statement of a dimension wins (a reply that quotes the format first and
answers last is read by its answer, as the pointwise parsers read scores). Failure kinds: `missing` (a dimension
has no statement), `invalid_verdict` (a statement whose verdict is none of the three, e.g. the template's own
"[[verdict]]" echoed), and each judge's own (AnyCap's `no_json`). A failure makes the client re-ask, up to the
judge's max_tries, as a pointwise reply without a score does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from capjudge.judges.types import ParseFailure, ParseOutcome

Verdict = Literal["A", "B", "tie"]
VERDICTS: tuple[str, ...] = ("A", "B", "tie")
OVERALL = "overall"
MISSING = "missing"
INVALID_VERDICT = "invalid_verdict"
_SWAPPED = {"A": "B", "B": "A", "tie": "tie"}


def read_verdict(text: str) -> str | None:
    """"A", "B" or "tie" as a reply spells it (case, spaces, quotes and `*`/`_` emphasis aside), else None."""
    word = text.strip().strip("*_'\" \t").strip()
    if word.upper() in ("A", "B"):
        return word.upper()
    return "tie" if word.lower() == "tie" else None


def for_models(verdict: str, a_shown_first: bool) -> str:
    """A positional verdict ("A": the caption shown first) as a verdict about models A and B."""
    return verdict if a_shown_first else _SWAPPED[verdict]


def verdict_failure(dimensions: tuple[str, ...], found: Mapping[str, str], cut_off: bool) -> ParseFailure | None:
    """The failure of a reply whose last statements per dimension are `found` (dimension -> the verdict as
    written), or None when every dimension has a valid verdict."""
    problems = {name: MISSING for name in dimensions if name not in found}
    problems |= {name: INVALID_VERDICT for name, written in found.items() if read_verdict(written) is None}
    if not problems:
        return None
    notes = [f"{name}: no verdict" if kind == MISSING else f"{name}: {found[name][:40]!r} is not A, B or tie"
             for name, kind in problems.items()]
    kind = MISSING if MISSING in problems.values() else INVALID_VERDICT
    return ParseFailure(kind, "; ".join(notes) + (" (reply cut off at max_tokens)" if cut_off else ""),
                        {"dimensions": problems})


@dataclass(frozen=True)
class PairwiseResult(ParseOutcome):
    """One order's judgment: `verdicts` (dimension -> "A" | "B" | "tie", positional, "overall" last), or None
    with `failure` set. `reason` is the judge's own explanation."""

    dimensions: tuple[str, ...]
    verdicts: Mapping[str, str] | None
    reason: str = ""
    raw_reply: str | None = None
    failure: ParseFailure | None = None

    @property
    def explanation(self) -> str | None:
        return self.reason or None

    @classmethod
    def unjudged(cls, dimensions: tuple[str, ...], failure: ParseFailure, raw_reply: str | None = None) -> PairwiseResult:
        return cls(dimensions, None, raw_reply=raw_reply, failure=failure)

    def log_fields(self) -> dict[str, Any]:
        return {"verdicts": dict(self.verdicts) if self.verdicts is not None else None, "failure": self.failure_kind,
                "failure_detail": self.failure.detail if self.failure is not None else None}

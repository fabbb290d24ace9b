"""Controlled perturbations of a caption, as data: what each one does, and which way a sound judge's scores
should move.

A `Perturbation` is a name, a function (caption, context) -> perturbed text, and the expected direction per
score dimension ("*" stands for every dimension not named; a dimension with no expectation is not judged).
Adding one is one function and its expectations, appended to `PERTURBATIONS`.

Everything is deterministic: the randomness of a variant comes from random.Random(f"{seed}:{item_id}:{name}")
(string seeds are hashed with SHA-512 by `random`, so neither PYTHONHASHSEED nor the platform changes them),
and the donor pool ("another clip's caption") is kept in sorted order. Words here are whitespace tokens: the
perturbations move whole tokens, punctuation and all, so the text stays readable.

Standard library only: this module says what the judge saw, nothing more.
"""

from __future__ import annotations

import difflib
import random
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

# "down": the score should fall (a judge that does not lower it fails); "not_up": it must not rise (staying put
# is fine). "up" and "not_down" are their mirror images, for perturbations that repair a caption.
Direction = Literal["down", "not_up", "up", "not_down"]
EVERY_DIMENSION = "*"


class PerturbationError(ValueError):
    """A caption or context a perturbation cannot use."""


# Donor draws that land on the item itself (or on the same text) are redrawn this many times before the pool
# is filtered: the filter is O(pool), the draw O(1), and a pool is mostly other clips.
_DONOR_DRAWS = 32


@dataclass(frozen=True)
class PerturbationContext:
    """What a perturbation may use besides the caption: which item it is, the seed, and the pool of every
    item's captions as sorted (item id, caption) pairs (one tuple shared by all contexts of a set)."""

    item_id: str
    seed: int
    pool: tuple[tuple[str, str], ...]

    def rng(self, name: str) -> random.Random:
        return random.Random(f"{self.seed}:{self.item_id}:{name}")

    def donor(self, name: str, caption: str) -> str:
        """Another clip's caption, chosen by the seeded rng: never this item's, never one reading as `caption`."""

        def usable(entry: tuple[str, str]) -> bool:
            return entry[0] != self.item_id and entry[1].strip() != caption.strip()

        rng = self.rng(f"{name}:donor")
        for _ in range(_DONOR_DRAWS if self.pool else 0):
            entry = self.pool[rng.randrange(len(self.pool))]
            if usable(entry):
                return entry[1]
        usable_pool = [entry for entry in self.pool if usable(entry)]
        if not usable_pool:
            raise PerturbationError(f"item {self.item_id!r}: no other clip's caption to borrow for {name!r}")
        return rng.choice(usable_pool)[1]


@dataclass(frozen=True)
class Perturbation:
    name: str
    describe: str  # what it does, in a sentence, for the reader of a report
    apply: Callable[[str, PerturbationContext], str]
    expectations: tuple[tuple[str, Direction], ...]  # (dimension or "*", direction)

    def expected(self, dimension: str) -> Direction | None:
        """The direction a sound judge's `dimension` moves in, or None when this perturbation says nothing."""
        named = dict(self.expectations)
        return named.get(dimension, named.get(EVERY_DIMENSION))


@dataclass(frozen=True)
class PerturbedCaption:
    """One variant, as the judge will see it, with what changed and what a sound judge should do."""

    item_id: str
    perturbation: str
    original: str
    text: str
    change: str
    expectations: tuple[tuple[str, Direction], ...]


# ---------------------------------------------------------------------------------------------------------
# The perturbations
# ---------------------------------------------------------------------------------------------------------

# Lead-ins for a restatement: they add words and say nothing new.
_RESTATEMENT_LEADS = ("In other words,", "To put it another way,", "That is to say,", "Put differently,")


def _sentence_end(text: str) -> str:
    text = text.rstrip()
    return text if not text or text[-1] in ".!?" else text + "."


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def pad(caption: str, context: PerturbationContext) -> str:
    """The caption, then itself again behind a lead-in: about twice as long, no new content."""
    lead = context.rng("padding").choice(_RESTATEMENT_LEADS)
    return f"{_sentence_end(caption)} {lead} {_lower_first(_sentence_end(caption.strip()))}"


# A clause ends at the first clause punctuation; kept short so the addition is one claim, not a second caption.
_CLAUSE_END = re.compile(r"[,;:.!?]")
_MAX_CLAUSE_WORDS = 12


def hallucinate(caption: str, context: PerturbationContext) -> str:
    """The caption plus one clause from another clip's caption (its objects and actions are not in this clip)."""
    donor = context.donor("hallucination", caption)
    clause = _CLAUSE_END.split(donor.strip(), 1)[0].split()[:_MAX_CLAUSE_WORDS]
    if not clause:
        raise PerturbationError(f"item {context.item_id!r}: the borrowed caption {donor!r} has no words")
    return f"{_sentence_end(caption)} Also, {_lower_first(' '.join(clause))}."


def truncate(caption: str, context: PerturbationContext) -> str:
    """The first half of the words (rounded down, at least one)."""
    words = caption.split()
    return " ".join(words[: max(1, len(words) // 2)])


# A shuffle that happens to restore the order is drawn again, at most this many times.
_SHUFFLE_TRIES = 20


def shuffle(caption: str, context: PerturbationContext) -> str:
    """The same words in a seeded random order."""
    words = caption.split()
    rng = context.rng("shuffle")
    shuffled = list(words)
    for _ in range(_SHUFFLE_TRIES):
        rng.shuffle(shuffled)
        if shuffled != words:
            break
    return " ".join(shuffled)


def mismatch(caption: str, context: PerturbationContext) -> str:
    """Another clip's caption instead: fluent, and about a different video."""
    return context.donor("mismatch", caption)


PERTURBATIONS: tuple[Perturbation, ...] = (
    Perturbation("padding", "adds a restatement of the caption (about the same length again), nothing new",
                 pad, (("conciseness", "down"), (EVERY_DIMENSION, "not_up"))),
    Perturbation("hallucination", "adds one clause naming objects/actions from another clip's caption",
                 hallucinate, (("accuracy", "down"), (EVERY_DIMENSION, "not_up"))),
    # Only completeness: half a caption can be more precise and more concise, legitimately.
    Perturbation("truncation", "keeps the first half of the words", truncate, (("completeness", "down"),)),
    Perturbation("shuffle", "shuffles the words", shuffle, ((EVERY_DIMENSION, "down"),)),
    Perturbation("mismatch", "replaces the caption with another clip's caption", mismatch,
                 ((EVERY_DIMENSION, "down"),)),
)


def perturbation_named(name: str, registry: Iterable[Perturbation] = PERTURBATIONS) -> Perturbation:
    known = {each.name: each for each in registry}
    if name not in known:
        raise PerturbationError(f"no perturbation {name!r}; known: {', '.join(known)}")
    return known[name]


# ---------------------------------------------------------------------------------------------------------
# Applying them
# ---------------------------------------------------------------------------------------------------------

# A change summary names at most this many edited spans (a shuffle edits nearly everything).
_MAX_SPANS_SHOWN = 3
# ... and quotes at most this many words of each span: a runaway caption's change stays a line, not the caption.
_MAX_WORDS_QUOTED = 40
# The word-level diff (difflib) runs only on the part of the two texts between their common first and last
# words, and only while that part's |before| x |after| is at most this: its time grows with that product, so a
# 20,000-word caption replaced by another (mismatch) would take minutes. Past it the part is described as one
# replacement. Every perturbation here edits one end or the whole text, so a real caption is never near it.
MAX_DIFF_CELLS = 100_000
UNCHANGED = "unchanged"


def changes_nothing(original: str, text: str) -> bool:
    """The variant reads as the original, word for word: it is no test of a judge (a one-word caption's
    truncation or shuffle); whitespace aside, the judge would see the same caption."""
    return original.split() == text.split()


def _quoted(words: list[str]) -> str:
    if len(words) <= _MAX_WORDS_QUOTED:
        return repr(" ".join(words))
    return f"{' '.join(words[:_MAX_WORDS_QUOTED]) + ' …'!r} ({len(words):,} words)"


def _common_ends(before: list[str], after: list[str]) -> tuple[int, int]:
    """(words the two share at the start, words they share at the end after those), in linear time."""
    limit = min(len(before), len(after))
    start = 0
    while start < limit and before[start] == after[start]:
        start += 1
    end = 0
    while end < limit - start and before[-1 - end] == after[-1 - end]:
        end += 1
    return start, end


def _edits(before: list[str], after: list[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes (tag, i1, i2, j1, j2) without the equal ones, in time linear in the words (plus at
    most MAX_DIFF_CELLS for the part that differs)."""
    start, end = _common_ends(before, after)
    middle_before, middle_after = before[start:len(before) - end], after[start:len(after) - end]
    if not middle_before or not middle_after:  # a pure insertion or deletion: nothing to align
        tag = "insert" if middle_after else "delete"
        return [(tag, start, start + len(middle_before), start, start + len(middle_after))]
    if len(middle_before) * len(middle_after) > MAX_DIFF_CELLS:
        return [("replace", start, start + len(middle_before), start, start + len(middle_after))]
    matcher = difflib.SequenceMatcher(a=middle_before, b=middle_after, autojunk=False)
    return [(tag, start + i1, start + i2, start + j1, start + j2)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]


def describe_change(original: str, text: str) -> str:
    """What differs, in words: the spans inserted, deleted or replaced, or a reordering of the same words."""
    before, after = original.split(), text.split()
    if before == after:
        return UNCHANGED
    if sorted(before) == sorted(after):
        return f"same {len(before)} words, reordered"
    spans = []
    for tag, i1, i2, j1, j2 in _edits(before, after):
        if tag == "insert":
            spans.append(f"inserted {_quoted(after[j1:j2])} at word {i1}")
        elif tag == "delete":
            spans.append(f"deleted {_quoted(before[i1:i2])}")
        else:
            spans.append(f"replaced {_quoted(before[i1:i2])} with {_quoted(after[j1:j2])}")
    more = f"; and {len(spans) - _MAX_SPANS_SHOWN} more" if len(spans) > _MAX_SPANS_SHOWN else ""
    return f"{len(before)} -> {len(after)} words: " + "; ".join(spans[:_MAX_SPANS_SHOWN]) + more


def perturb(caption: str, context: PerturbationContext, perturbation: Perturbation) -> PerturbedCaption:
    if not caption.split():
        raise PerturbationError(f"item {context.item_id!r}: an empty caption cannot be perturbed")
    text = perturbation.apply(caption, context)
    if changes_nothing(caption, text):
        # The original itself, as the judge sees it: one judgment, asked once, and no pair of the shifts.
        return PerturbedCaption(context.item_id, perturbation.name, caption, caption, UNCHANGED,
                                perturbation.expectations)
    return PerturbedCaption(context.item_id, perturbation.name, caption, text, describe_change(caption, text),
                            perturbation.expectations)


def contexts(captions: Iterable[tuple[str, str]], seed: int) -> dict[str, PerturbationContext]:
    """One context per item id, from (item id, caption) pairs (an item may have several candidates); donors
    come from the other items' captions."""
    pairs = [(str(item), caption) for item, caption in captions]
    # Empty captions are no donors (perturb refuses them as originals too).
    pool = tuple(sorted({(item, caption) for item, caption in pairs if caption.split()}))
    return {item: PerturbationContext(item, seed, pool) for item in dict.fromkeys(item for item, _ in pairs)}


def perturb_all(
    captions: Iterable[tuple[str, str]],
    seed: int,
    registry: Iterable[Perturbation] = PERTURBATIONS,
) -> tuple[PerturbedCaption, ...]:
    """Every perturbation of every (item id, caption) pair, in input order, perturbation by perturbation."""
    pairs = [(str(item), caption) for item, caption in captions]
    by_item = contexts(pairs, seed)
    return tuple(perturb(caption, by_item[item], each) for item, caption in pairs for each in registry)


"""Counting words and sentences in captions, for the AnyCapEval length rules.

Both length rules (±tolerance against the reference, and the instruction's "20 to 30 words") are only as
good as the counter behind them, so the counter follows one written rule, in any script:

Words
- A word is a maximal run of letters or numbers (Unicode categories L* and N*: "digits" here means any
  number character, so "m²" and "½" are words), with combining marks (M*) continuing a run, so "é" written
  as e + U+0301 and Devanagari vowel signs do not split a word.
- Runs joined by ONE internal apostrophe (' or ’) or hyphen (-, U+2010, U+2011; also the invisible soft
  hyphen and zero-width (non-)joiners, which only ever sit inside words) are one word: "don't",
  "well-known", "rock'n'roll" = 1 each. A leading or trailing apostrophe is not part of a word, and a double
  hyphen ("well--known") separates two words.
- Each CJK ideograph, kana (including the prolonged-sound mark ー and the iteration marks, which stand for
  a mora of their own) and hangul syllable is one word, and always stands alone: "中文abc" = 3.
- Everything else separates words and is not a word itself: spaces, punctuation, symbols, emoji.
- Numbers follow the rule literally: "3.5" and "1,000" are TWO words (the point and the comma are not
  joiners). This is deliberate: a reader counting "3.5 metres" as two or three words is no less right, and
  a literal rule is the one anybody can reproduce.
- Text is NFC-normalised first, so decomposed hangul jamo and accents count as their composed forms.

Sentences
- A sentence boundary is a run of terminal punctuation: . ! ? … ‼ ⁇ ⁈ ⁉ and the fullwidth/ideographic
  。！？．. A "." between two digits is a decimal point, not a boundary.
- The pieces between boundaries are sentences if they contain at least one word (so "Wow!!!" is one
  sentence, "..." none, and a last sentence without a full stop still counts).
- Known limit, shared with the published code (which splits on [.!?] and counts non-blank pieces):
  abbreviations such as "Mr." end a sentence. Unlike it, decimals do not, and a piece made only of emoji or
  quotes is not a sentence.

The standard library's `re` has no Unicode category classes, so each character is classified with
`unicodedata` into one letter (W word, C CJK, M mark, J joiner, T terminator, D digit-adjacent decimal
point, O other) and `re` runs over that class string.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

WORD, CJK, MARK, JOINER, TERMINATOR, OTHER = "W", "C", "M", "J", "T", "O"

APOSTROPHES = frozenset("'\u2019")
HYPHENS = frozenset("-\u2010\u2011")
# Invisible characters that only occur inside words: soft hyphen, zero-width non-joiner and joiner
# (Persian and Indic spelling). Treating them as joiners keeps "می‌خواهم" one word.
INVISIBLE_JOINERS = frozenset("\u00ad\u200c\u200d")
JOINERS = APOSTROPHES | HYPHENS | INVISIBLE_JOINERS

SENTENCE_TERMINATORS = frozenset(".!?\u2026\u203c\u2047\u2048\u2049\u3002\uff01\uff1f\uff0e")

# Unicode character-name prefixes of the characters counted one word each. Names, not a table of code
# point ranges, so new CJK extension blocks are covered by whichever Unicode version Python ships.
_CJK_NAME_PREFIXES = (
    "CJK UNIFIED IDEOGRAPH",
    "CJK COMPATIBILITY IDEOGRAPH",
    "IDEOGRAPHIC",  # 々 iteration mark, 〇 number zero; punctuation such as 。 is excluded by category
    "HIRAGANA",
    "KATAKANA",  # includes "KATAKANA-HIRAGANA PROLONGED SOUND MARK" (ー)
    "HALFWIDTH KATAKANA",
    "HANGUL SYLLABLE",
)

# A CJK character (with any marks after it, e.g. variation selectors) is one word; otherwise a word is a
# run of word characters and marks, joined across single joiners.
_WORD_PATTERN = re.compile(r"C|W[WM]*(?:JW[WM]*)*")
_SENTENCE_SPLIT = re.compile(r"T+")


@lru_cache(maxsize=8192)
def character_class(char: str) -> str:
    """The one-letter class of a character (see the module docstring)."""
    if char in JOINERS:
        return JOINER
    if char in SENTENCE_TERMINATORS:
        return TERMINATOR
    category = unicodedata.category(char)
    if category[0] in "LN":
        if unicodedata.name(char, "").startswith(_CJK_NAME_PREFIXES):
            return CJK
        return WORD
    if category[0] == "M":
        return MARK
    return OTHER


def _classes(text: str) -> str:
    return "".join(character_class(char) for char in text)


def words(text: str) -> list[str]:
    """The words of `text`, in order (useful to show a reader why a count is what it is)."""
    normalised = unicodedata.normalize("NFC", text)
    return [normalised[m.start() : m.end()] for m in _WORD_PATTERN.finditer(_classes(normalised))]


def count_words(text: str) -> int:
    """Number of words in `text` under the rule in the module docstring."""
    normalised = unicodedata.normalize("NFC", text)
    return sum(1 for _ in _WORD_PATTERN.finditer(_classes(normalised)))


def sentences(text: str) -> list[str]:
    """The sentences of `text` (stripped, terminators kept off), under the rule in the module docstring."""
    normalised = unicodedata.normalize("NFC", text)
    classes = list(_classes(normalised))
    # A point between two digits is a decimal point: not a boundary.
    for index in range(1, len(normalised) - 1):
        if normalised[index] in ".\uff0e" and normalised[index - 1].isdigit() and normalised[index + 1].isdigit():
            classes[index] = OTHER
    pieces: list[str] = []
    start = 0
    for boundary in _SENTENCE_SPLIT.finditer("".join(classes)):
        pieces.append(normalised[start : boundary.start()])
        start = boundary.end()
    pieces.append(normalised[start:])
    return [piece.strip() for piece in pieces if count_words(piece) > 0]


def count_sentences(text: str) -> int:
    """Number of sentences in `text` under the rule in the module docstring."""
    return len(sentences(text))

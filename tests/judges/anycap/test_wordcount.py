"""The word and sentence counter behind both AnyCapEval length rules."""

from __future__ import annotations

import json
import unicodedata

import pytest

from capjudge.judges.anycap.wordcount import count_sentences, count_words, sentences, words
from tests.support.paths import shared_path


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", 0),
        ("   \n\t ", 0),
        ("A dog runs across the field.", 6),
        ("A  dog\nruns\t\tacross", 4),
        ("Hello, world! How are you?", 5),
        ('(parenthesised) "quoted" [bracketed]', 3),
    ],
)
def test_english(text: str, expected: int) -> None:
    assert count_words(text) == expected


@pytest.mark.parametrize(
    "text, expected_words",
    [
        ("don't stop", ["don't", "stop"]),
        ("it\u2019s fine", ["it\u2019s", "fine"]),  # typographic apostrophe joins too
        ("rock'n'roll", ["rock'n'roll"]),
        ("'quoted' words'", ["quoted", "words"]),  # leading/trailing apostrophes are not part of a word
        ("the dogs' bowls", ["the", "dogs", "bowls"]),
        ("well-known fact", ["well-known", "fact"]),
        ("state-of-the-art", ["state-of-the-art"]),
        ("well\u2010known", ["well\u2010known"]),  # U+2010 HYPHEN
        ("well--known", ["well", "known"]),  # a double hyphen separates
        ("self- and peer-review", ["self", "and", "peer-review"]),
        ("1990\u20132000", ["1990", "2000"]),  # an en dash is not a hyphen
        ("snake_case", ["snake", "case"]),  # underscore is punctuation
        ("hy\u00adphen", ["hy\u00adphen"]),  # soft hyphen sits inside a word
    ],
)
def test_apostrophes_and_hyphens(text: str, expected_words: list[str]) -> None:
    assert words(text) == expected_words
    assert count_words(text) == len(expected_words)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3.5 metres", 3),  # literal rule: "." is not a joiner, so "3.5" is two words
        ("1,000 people", 3),
        ("3-4 people", 2),  # a hyphen joins digit runs like letter runs
        ("42", 1),
        ("COVID-19 in 2020", 3),
        ("m\u00b2 and \u00bd", 3),  # other number characters count as digits
        ("\uff11\uff12\uff13 fullwidth", 2),
    ],
)
def test_numbers(text: str, expected: int) -> None:
    assert count_words(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("一只狗在草地上奔跑", 9),  # each ideograph is a word
        ("一只狗，在草地上。", 7),  # ideographic punctuation is not
        ("ねこがすき", 5),  # hiragana
        ("コーヒー", 4),  # katakana; the prolonged-sound mark is a mora of its own
        ("ｺｰﾋｰ", 4),  # halfwidth katakana
        ("人々", 2),  # iteration mark
        ("한국어 텍스트", 6),  # hangul syllables
        ("\u1112\u1161\u11ab", 1),  # decomposed jamo compose to one syllable (NFC)
    ],
)
def test_cjk(text: str, expected: int) -> None:
    assert count_words(text) == expected


@pytest.mark.parametrize(
    "text, expected_words",
    [
        ("中文abc", ["中", "文", "abc"]),
        ("我爱New York", ["我", "爱", "New", "York"]),
        ("iPhone是手机", ["iPhone", "是", "手", "机"]),
        ("3个人", ["3", "个", "人"]),
        ("東京-style", ["東", "京", "style"]),  # a hyphen never joins onto a CJK character
        ("Café crème", ["Café", "crème"]),
        ("Cafe\u0301", ["Café"]),  # combining accent continues the word (and is composed)
        ("नमस्ते दुनिया", ["नमस्ते", "दुनिया"]),  # Devanagari vowel signs are marks inside a word
        ("Привет, мир", ["Привет", "мир"]),
        ("مرحبا بالعالم", ["مرحبا", "بالعالم"]),
    ],
)
def test_mixed_scripts(text: str, expected_words: list[str]) -> None:
    assert words(text) == [unicodedata.normalize("NFC", word) for word in expected_words]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("😀", 0),
        ("👍🏽 great 🎉🎉", 1),
        ("👨\u200d👩\u200d👧 family", 1),  # ZWJ sequence: no letters, no words
        ("🇫🇷 flag", 1),
        ("★ ♥ → © ™", 0),
        ("...!!!???", 0),
    ],
)
def test_emoji_and_symbols_are_not_words(text: str, expected: int) -> None:
    assert count_words(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", 0),
        ("A dog runs.", 1),
        ("A dog runs", 1),  # a last sentence without a full stop counts
        ("A dog runs. A cat sleeps.", 2),
        ("Wow!!! Really?! Yes.", 3),  # a run of terminators is one boundary
        ("It is 3.5 metres tall. It is heavy.", 2),  # a decimal point is not a boundary
        ("Wait... what?", 2),
        ("Dusk falls\u2026 the sea sleeps.", 2),  # the ellipsis character ends a sentence
        ("狗在跑。猫在睡！真的吗？", 3),
        ("One sentence. 😀. ...", 1),  # pieces without words are not sentences
        ("Mr. Smith arrives.", 2),  # documented limit: abbreviations end a sentence
        ("Line one\nline two", 1),  # newlines are not boundaries (poems without punctuation)
    ],
)
def test_sentences(text: str, expected: int) -> None:
    assert count_sentences(text) == expected
    assert len(sentences(text)) == expected


def test_sentences_are_returned_stripped_and_in_order() -> None:
    assert sentences("  First one.  Second one!  Third") == ["First one", "Second one", "Third"]


def test_agrees_with_unicode_property_regex_on_the_shared_references() -> None:
    """On the real captions, the stdlib classifier gives the same words as the rule written with the
    `regex` module's Unicode properties (no CJK in this English data, so the plain rule applies)."""
    regex = pytest.importorskip("regex", reason="the `regex` module is not installed; cross-check skipped")
    rule = regex.compile(
        r"[\p{L}\p{N}][\p{L}\p{N}\p{M}]*(?:['\u2019\-\u2010\u2011\u00ad\u200c\u200d][\p{L}\p{N}][\p{L}\p{N}\p{M}]*)*"
    )
    path = shared_path("data", "anycapeval_video", "anycapeval_video_ref_style.jsonl")
    checked = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        for turn in item["conversations"]:
            text = unicodedata.normalize("NFC", turn["value"])
            assert words(text) == rule.findall(text), item["id"]
            checked += 1
    assert checked == 2 * 189

"""Both AnyCapEval length rules: the ±tolerance word-count rule and the instruction's own restriction."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from capjudge.judges.anycap.length_rule import (
    FLAG_REFERENCE_HAS_NO_WORDS,
    FLAG_RESTRICTION_UNRECOGNISED,
    InvalidTolerance,
    LengthRestriction,
    check_instruction_restriction,
    check_length_tolerance,
    parse_length_restriction,
    parse_tolerance,
    within_tolerance,
)
from capjudge.judges.datasets.anycap_video import UnknownCaptionType, normalise_caption_type
from tests.support.paths import shared_path


def n_words(n: int) -> str:
    return " ".join(f"word{i}" for i in range(n))


def n_sentences(n: int, words_each: int = 4) -> str:
    return " ".join(" ".join(["Birds"] * (words_each - 1) + ["fly."]) for _ in range(n))


# ------------------------------------------------------------------------------------------------------
# Caption types and tolerance values


@pytest.mark.parametrize(
    "given, expected",
    [
        ("brief", "brief"),
        ("detail", "detail"),
        ("poem", "poem"),
        ("narrative", "narrative"),
        ("style", "style"),
        ("theme", "style"),
        (" Brief ", "brief"),
    ],
)
def test_caption_types(given: str, expected: str) -> None:
    assert normalise_caption_type(given) == expected


def test_unknown_caption_type_names_the_item_and_the_choices() -> None:
    with pytest.raises(UnknownCaptionType, match=r"item 340: unknown caption type 'summary'.*brief, detail"):
        normalise_caption_type("summary", item=340)
    with pytest.raises(UnknownCaptionType, match="must be a string"):
        normalise_caption_type(None)


@pytest.mark.parametrize("value, expected", [(10, 10), ("30", 30), (0, 0), (10.0, 10), (" 25 ", 25)])
def test_tolerance_accepts_integer_percents(value: object, expected: int) -> None:
    assert parse_tolerance(value) == expected


@pytest.mark.parametrize("value", [2.5, "2.5", -1, "-10", True, "ten", None, float("nan")])
def test_tolerance_rejects_non_integer_or_negative(value: object) -> None:
    with pytest.raises(InvalidTolerance):
        parse_tolerance(value)


# ------------------------------------------------------------------------------------------------------
# Rule 1: ±tolerance, integer arithmetic, inclusive


@pytest.mark.parametrize(
    "reference_words, output_words, tolerance, within",
    [
        (10, 10, 10, True),
        (10, 11, 10, True),  # exactly +10%
        (10, 9, 10, True),  # exactly -10%
        (10, 12, 10, False),
        (10, 8, 10, False),
        (20, 22, 10, True),
        (20, 23, 10, False),
        (20, 18, 10, True),
        (20, 17, 10, False),
        (15, 16, 10, True),  # +6.7%
        (15, 17, 10, False),  # +13.3%
        (10, 13, 30, True),  # exactly +30%
        (10, 14, 30, False),
        (10, 7, 30, True),  # exactly -30%
        (10, 6, 30, False),
        (30, 39, 30, True),
        (30, 40, 30, False),
        (10, 10, 0, True),  # zero tolerance: only equal counts
        (10, 11, 0, False),
        (1000, 1100, 10, True),
        (1000, 1101, 10, False),
        (7, 0, 100, True),  # -100% is inside ±100%
    ],
)
def test_tolerance_boundaries(reference_words: int, output_words: int, tolerance: int, within: bool) -> None:
    assert within_tolerance(output_words, reference_words, tolerance) is within
    check = check_length_tolerance("brief", n_words(output_words), n_words(reference_words), tolerance)
    assert (check.applies, check.within) == (True, within)
    assert (check.output_words, check.reference_words) == (output_words, reference_words)
    assert check.max_score == (4 if within else 1)


def test_float_percentages_would_get_this_boundary_wrong() -> None:
    # 0.1 * 30 = 3.0000000000000004 in floats; the rule must still accept 33 words against 30.
    assert within_tolerance(33, 30, 10)
    assert within_tolerance(27, 30, 10)


@pytest.mark.parametrize("caption_type", ["brief", "detail"])
def test_rule_applies_to_brief_and_detail(caption_type: str) -> None:
    check = check_length_tolerance(caption_type, n_words(20), n_words(10))
    assert (check.applies, check.within, check.max_score, check.flags) == (True, False, 1, ())


@pytest.mark.parametrize("caption_type", ["poem", "narrative", "style", "theme"])
def test_rule_does_not_apply_to_other_types(caption_type: str) -> None:
    check = check_length_tolerance(caption_type, n_words(50), n_words(10))
    assert check.to_json() == {
        "applies": False,
        "output_words": 50,
        "reference_words": 10,
        "within": None,
        "max_score": 4,
    }


@pytest.mark.parametrize("reference", ["", "   ", "... !!!", "😀🎉"])
def test_reference_without_words_is_flagged_not_capped(reference: str) -> None:
    check = check_length_tolerance("brief", n_words(12), reference)
    assert check.to_json() == {
        "applies": False,
        "output_words": 12,
        "reference_words": 0,
        "within": None,
        "max_score": 4,
    }
    assert check.flags == (FLAG_REFERENCE_HAS_NO_WORDS,)


def test_tolerance_check_rejects_bad_input() -> None:
    with pytest.raises(InvalidTolerance):
        check_length_tolerance("brief", "a", "b", 12.5)
    with pytest.raises(UnknownCaptionType, match="item 7"):
        check_length_tolerance("caption", "a", "b", item=7)


def test_cjk_counts_drive_the_rule() -> None:
    reference = "一只小狗在草地上奔跑"  # 10 words: one per ideograph
    assert check_length_tolerance("brief", "一只狗在草地上奔跑", reference).within is True  # 9: exactly -10%
    assert check_length_tolerance("brief", "一只狗在草地上跑", reference).within is False  # 8: -20%
    assert check_length_tolerance("brief", "一只小狗在 green 草地上奔跑", reference).within is True  # 11


# ------------------------------------------------------------------------------------------------------
# Rule 2: the instruction's restriction

# Every restriction sentence in the shared AnyCapEval video style data, and what it means.
DATASET_FORMS = {
    "The generated caption's length needs to be 10 to 20 words.": ("words", 10, 20),
    "The generated caption's length needs to be 20 to 30 words.": ("words", 20, 30),
    "The generated caption's length needs to be 30 to 120 words.": ("words", 30, 120),
    "The generated caption's length needs to be exactly 50 words.": ("words", 50, 50),
    "The generated caption's length needs to be one sentence.": ("sentences", 1, 1),
    "The generated caption's length needs to be exactly two sentences.": ("sentences", 2, 2),
    "The generated caption's length needs to be exactly three sentences.": ("sentences", 3, 3),
    "The generated caption's length needs to be exactly five sentences.": ("sentences", 5, 5),
    "The generated caption's length cannot exceed two sentences.": ("sentences", 0, 2),
    "The generated caption's length cannot exceed three sentences.": ("sentences", 0, 3),
}


@pytest.fixture(scope="module")
def dataset_items() -> list[dict]:
    path = shared_path("data", "anycapeval_video", "anycapeval_video_ref_style.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_dataset_has_exactly_these_restriction_forms(dataset_items: list[dict]) -> None:
    assert len(dataset_items) == 189
    forms = Counter(item["restriction"][1] for item in dataset_items)
    assert set(forms) == set(DATASET_FORMS)
    types = Counter(item["restriction"][0] for item in dataset_items)
    assert set(types) == {"brief", "detail", "poem", "narrative", "theme"}


def test_every_dataset_restriction_is_recognised(dataset_items: list[dict]) -> None:
    for item in dataset_items:
        caption_type, sentence = item["restriction"]
        normalise_caption_type(caption_type, item=item["id"])  # every type is known
        restriction = parse_length_restriction(sentence)
        assert restriction is not None, (item["id"], sentence)
        assert (restriction.unit, restriction.minimum, restriction.maximum) == DATASET_FORMS[sentence]
        # The full instruction states the same restriction (the sentence is part of it).
        from_instruction = parse_length_restriction(item["conversations"][0]["value"])
        assert (
            from_instruction is not None
            and (from_instruction.unit, from_instruction.minimum, from_instruction.maximum) == DATASET_FORMS[sentence]
        )


def _satisfying_and_violating(unit: str, minimum: int, maximum: int) -> tuple[str, list[str]]:
    make = n_words if unit == "words" else n_sentences
    satisfying = make(maximum)
    violating = [make(maximum + 1)]
    if minimum > 0:
        violating.append(make(minimum - 1))
    return satisfying, violating


@pytest.mark.parametrize("sentence", sorted(DATASET_FORMS))
def test_each_dataset_form_caps_a_violating_caption_only(sentence: str) -> None:
    unit, minimum, maximum = DATASET_FORMS[sentence]
    satisfying, violating = _satisfying_and_violating(unit, minimum, maximum)
    ok = check_instruction_restriction(sentence, satisfying)
    assert (ok.satisfied, ok.max_score, ok.flags) == (True, 4, ())
    if minimum > 0:
        assert check_instruction_restriction(sentence, (n_words if unit == "words" else n_sentences)(minimum)).satisfied
    for caption in violating:
        bad = check_instruction_restriction(sentence, caption)
        assert (bad.satisfied, bad.max_score) == (False, 1), caption


def test_each_dataset_item_with_a_satisfying_and_a_violating_caption(dataset_items: list[dict]) -> None:
    for item in dataset_items:
        instruction = item["conversations"][0]["value"]
        unit, minimum, maximum = DATASET_FORMS[item["restriction"][1]]
        satisfying, violating = _satisfying_and_violating(unit, minimum, maximum)
        assert check_instruction_restriction(instruction, satisfying).max_score == 4, item["id"]
        assert all(check_instruction_restriction(instruction, caption).max_score == 1 for caption in violating), item[
            "id"
        ]


def test_sentence_restriction_counts_sentences_not_lines() -> None:
    sentence = "The generated caption's length needs to be exactly two sentences."
    assert check_instruction_restriction(sentence, "It is 3.5 m tall. It swims!").satisfied is True
    assert check_instruction_restriction(sentence, "Waves roll in\nand out again.").satisfied is False


@pytest.mark.parametrize(
    "text, expected",
    [
        ("needs to be no more than 10 words", ("words", 0, 10)),
        ("needs to be exactly 10 words", ("words", 10, 10)),
        ("should be between 15 and 25 words", ("words", 15, 25)),
        ("keep it to 20-30 words", ("words", 20, 30)),
        ("must not exceed twenty-five words", ("words", 0, 25)),
        ("at least three sentences", ("sentences", 3, None)),
        ("Write a poem. It should be exactly 1 sentence long", ("sentences", 1, 1)),
    ],
)
def test_other_restriction_forms(text: str, expected: tuple) -> None:
    restriction = parse_length_restriction(text)
    assert restriction is not None
    assert (restriction.unit, restriction.minimum, restriction.maximum) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Describe the video in detail.",
        "Describe the two people in the video.",  # a number without a length unit
        "Keep it short.",
        "Use about 20 words.",  # "about" is not a bound: not guessed
        "needs to be 10 to 20 words. cannot exceed three sentences.",  # two different restrictions
    ],
)
def test_unrecognised_restrictions_are_reported_not_guessed(text: str) -> None:
    assert parse_length_restriction(text) is None
    check = check_instruction_restriction(text, n_words(500))
    assert (check.restriction, check.satisfied, check.max_score) == (None, None, 4)
    assert check.flags == (FLAG_RESTRICTION_UNRECOGNISED,)


def test_restriction_allows_is_inclusive() -> None:
    restriction = LengthRestriction("words", 20, 30, "20 to 30 words")
    assert [restriction.allows(n) for n in (19, 20, 30, 31)] == [False, True, True, False]
    unbounded = LengthRestriction("sentences", 3, None, "at least three sentences")
    assert unbounded.allows(1000) and not unbounded.allows(2)

"""Reading the AnyCapEval judge's reply: every accepted shape and every failure kind."""

from __future__ import annotations

import pytest

from capjudge.judges.anycap.parser import AnyCapVerdict, parse_anycap_reply
from capjudge.judges.types import JudgeReply, ParseFailure, Usage


def verdict(text: str | None) -> AnyCapVerdict:
    parsed = parse_anycap_reply(text)
    assert isinstance(parsed, AnyCapVerdict), parsed
    return parsed


def failure(text: str | None) -> ParseFailure:
    parsed = parse_anycap_reply(text)
    assert isinstance(parsed, ParseFailure), parsed
    return parsed


# ------------------------------------------------------------------------------------------------------
# Where the object is


@pytest.mark.parametrize(
    "reply",
    [
        '{"score": 3, "reason": "Accurate and close to the reference."}',
        '  \n{"score": 3, "reason": "Accurate and close to the reference."}\n',
        '```json\n{"score": 3, "reason": "Accurate and close to the reference."}\n```',
        '```\n{"score": 3, "reason": "Accurate and close to the reference."}\n```',
        'Here is my evaluation:\n{"score": 3, "reason": "Accurate and close to the reference."}\nThanks!',
        '{\n  "score": 3,\n  "reason": "Accurate and close to the reference."\n}',
        "{\u201cscore\u201d: 3, \u201creason\u201d: \u201cAccurate and close to the reference.\u201d}",
        "{'score': 3, 'reason': 'Accurate and close to the reference.'}",
        "Result: {'score': 3, 'reason': 'Accurate and close to the reference.',}",  # Python allows the comma
    ],
)
def test_finds_the_object_wherever_it_is(reply: str) -> None:
    assert verdict(reply) == AnyCapVerdict(3, "Accurate and close to the reference.")


def test_accepts_a_judge_reply_object() -> None:
    reply = JudgeReply('{"score": 2, "reason": "Some errors."}', None, "stop", "m", Usage())
    assert parse_anycap_reply(reply) == AnyCapVerdict(2, "Some errors.")
    empty = JudgeReply(None, None, "stop", "m", Usage())
    assert parse_anycap_reply(empty) == ParseFailure("no_json", "the reply is empty")


def test_typographic_apostrophes_inside_a_reason_survive() -> None:
    assert verdict('{"score": 1, "reason": "It\u2019s far too long."}').reason == "It\u2019s far too long."
    assert (
        verdict("{\u201cscore\u201d: 1, \u201creason\u201d: \u201cIt\u2019s far too long.\u201d}").reason
        == "It's far too long."
    )


def test_braces_and_quotes_inside_the_reason() -> None:
    reply = '{"score": 2, "reason": "It writes {braces} and \\"quotes\\" and it\'s fine."}'
    assert verdict(reply) == AnyCapVerdict(2, 'It writes {braces} and "quotes" and it\'s fine.')


def test_prose_apostrophes_before_the_object_do_not_hide_it() -> None:
    assert verdict('I\'d say the caption\'s fine: {"score": 4, "reason": "Better than reference."}').score == 4


# ------------------------------------------------------------------------------------------------------
# Several objects: the last one with a score wins


def test_last_object_with_a_score_wins() -> None:
    reply = (
        'The format is {"score": [0-4], "reason": "..."}. A first draft: {"score": 1, "reason": "draft"}\n'
        'Final answer:\n```json\n{"score": 3, "reason": "final"}\n```'
    )
    assert verdict(reply) == AnyCapVerdict(3, "final")


def test_objects_without_a_score_are_ignored() -> None:
    reply = '{"score": 2, "reason": "answer"} and some metadata {"model": "x", "tokens": 12}'
    assert verdict(reply) == AnyCapVerdict(2, "answer")


def test_a_score_quoted_inside_the_reason_does_not_win() -> None:
    reply = """{"score": 1, "reason": "Too long; without that it would be {'score': 4}."}"""
    assert verdict(reply) == AnyCapVerdict(1, "Too long; without that it would be {'score': 4}.")


def test_a_nested_object_does_not_beat_the_object_around_it() -> None:
    reply = '{"score": 2, "reason": "ok", "details": {"score": 4}}'
    assert verdict(reply).score == 2
    assert verdict('{"result": {"score": 4, "reason": "inner"}}') == AnyCapVerdict(4, "inner")


def test_markdown_table_around_the_object() -> None:
    reply = (
        "| criterion | score |\n|---|---|\n| length | 4 |\n| hallucination | 2 |\n\n"
        '{"score": 2, "reason": "Limited hallucination."}\n\n| total | 2 |'
    )
    assert verdict(reply) == AnyCapVerdict(2, "Limited hallucination.")


def test_a_later_invalid_score_is_reported_not_skipped() -> None:
    assert failure('{"score": 3, "reason": "a"} {"score": 7, "reason": "b"}').kind == "out_of_range"


# ------------------------------------------------------------------------------------------------------
# The score's value


@pytest.mark.parametrize("score_json", ["3", '"3"', "3.0", "[3]", '" 3 "', '["3"]', '"3.0"'])
def test_accepted_score_shapes(score_json: str) -> None:
    assert verdict('{"score": %s, "reason": "r"}' % score_json).score == 3


@pytest.mark.parametrize("score", [0, 4])
def test_range_is_inclusive(score: int) -> None:
    assert verdict('{"score": %d, "reason": "r"}' % score).score == score


@pytest.mark.parametrize(
    "score_json, kind",
    [
        ("2.5", "non_integer"),
        ('"2.5"', "non_integer"),
        ('"three"', "non_integer"),
        ('"3/4"', "non_integer"),
        ("[3, 4]", "non_integer"),
        ("[]", "non_integer"),
        ("true", "non_integer"),
        ('{"value": 3}', "non_integer"),
        ("5", "out_of_range"),
        ("-1", "out_of_range"),
        ('"10"', "out_of_range"),
        ("100", "out_of_range"),
        ("null", "missing"),
    ],
)
def test_rejected_scores(score_json: str, kind: str) -> None:
    assert failure('{"score": %s, "reason": "r"}' % score_json).kind == kind


def test_python_true_is_not_a_score() -> None:
    assert failure("{'score': True, 'reason': 'r'}").kind == "non_integer"


@pytest.mark.parametrize(
    "reply, kind",
    [
        ('{"reason": "no score given"}', "missing"),
        ('{"Score": 3, "reason": "wrong key"}', "missing"),
        ("The caption scores 3 out of 4.", "no_json"),
        ("score: 3\nreason: fine", "no_json"),
        ("", "no_json"),
        ("   ", "no_json"),
        (None, "no_json"),
        ('{"score": 3, "reason": "truncated', "no_json"),
        ("[3]", "no_json"),
    ],
)
def test_reply_level_failures(reply: str | None, kind: str) -> None:
    found = failure(reply)
    assert found.kind == kind
    assert found.detail  # every failure says why


# ------------------------------------------------------------------------------------------------------
# The reason


def test_reason_is_kept_when_present_and_not_required() -> None:
    assert verdict('{"score": 4}') == AnyCapVerdict(4, None)
    assert verdict('{"score": 4, "reason": ""}').reason == ""
    assert verdict('{"score": 4, "reason": ["a", "b"]}').reason == '["a", "b"]'
    assert verdict('{"score": 4, "reason": "r"}').to_json() == {"score": 4, "reason": "r"}

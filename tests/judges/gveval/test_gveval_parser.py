"""Every parser rule, and expected-value scoring from hand-built token logprobs."""

from __future__ import annotations

import math

import pytest

from capjudge.judges.gveval.parser import (
    MARKER_IN_NUMBER_TOKEN,
    NO_INTEGER_ALTERNATIVES,
    NO_LOGPROBS,
    NO_TOP_LOGPROBS,
    NUMBER_SPLIT,
    TOKENS_DO_NOT_MATCH_TEXT,
    GVEvalResult,
    make_reply_parser,
    parse_statements,
    score_reply,
    score_text,
)
from capjudge.judges.types import JudgeReply, ParseFailure, TokenLogprob, Usage

GOOD = (
    "The caption names both people and the harness correctly, but misses the descent.\n"
    "..... The Accuracy score is α85α.\n"
    "..... The Completeness score is β60β.\n"
    "..... The Conciseness score is ψ90ψ.\n"
    "..... The Relevance score is δ80δ."
)


def values(text: str) -> dict[str, float]:
    statements = parse_statements(text)
    assert not isinstance(statements, ParseFailure), statements
    return {name: statement.value for name, statement in statements.items()}


def failure(text: str | None) -> ParseFailure:
    result = parse_statements(text)
    assert isinstance(result, ParseFailure), result
    return result


def test_four_statements_parse():
    assert values(GOOD) == {"accuracy": 85, "completeness": 60, "conciseness": 90, "relevance": 80}


def test_the_last_statement_of_each_dimension_wins():
    revised = GOOD + "\nOn reflection: The Accuracy score is α70α. The Relevance score is δ75δ."
    assert values(revised) == {"accuracy": 70, "completeness": 60, "conciseness": 90, "relevance": 75}


def test_overlapping_statements_still_take_the_last():
    assert values("α85α90α β1β ψ2ψ δ3δ")["accuracy"] == 90


@pytest.mark.parametrize(
    "statement, expected",
    [
        ("α 85 α", 85),
        ("α\t85\u00a0α", 85),
        ("α**85**α", 85),
        ("α __85__ α", 85),
        ("α*85*α", 85),
        ("α_ 85 _α", 85),
        ("α85.5α", 85.5),
        ("α 0 α", 0),
        ("α100α", 100),
        ("α100.0α", 100),
        ("α085α", 85),
    ],
)
def test_spaces_emphasis_and_decimals_inside_markers(statement, expected):
    assert values(f"{statement} β1β ψ2ψ δ3δ")["accuracy"] == expected


def test_emphasis_around_the_whole_statement():
    assert values("**α85α** _β60β_ ***ψ90ψ*** δ80δ")["conciseness"] == 90


@pytest.mark.parametrize("number", ["101", "-5", "100.5", "250"])
def test_values_outside_0_100_fail_that_dimension(number):
    problem = failure(f"α{number}α β60β ψ90ψ δ80δ")
    assert problem.kind == "out_of_range"
    assert problem.data == {"dimensions": {"accuracy": "out_of_range"}}
    assert number in problem.detail


def test_a_missing_dimension_fails_and_is_named():
    problem = failure("α85α β60β δ80δ")
    assert problem.kind == "missing"
    assert problem.data == {"dimensions": {"conciseness": "missing"}}


def test_a_template_echo_is_missing():
    echo = (
        "..... The Accuracy score is α{{accuracy_score}}α.\n..... The Completeness score is β60β.\n"
        "ψ90ψ δ80δ"
    )
    assert failure(echo).data == {"dimensions": {"accuracy": "missing"}}


def test_an_echo_after_a_real_statement_does_not_hide_it():
    text = GOOD + "\n(format: α{{accuracy_score}}α)"
    assert values(text)["accuracy"] == 85


def test_missing_takes_precedence_over_out_of_range_and_all_are_listed():
    problem = failure("α120α β60β")
    assert problem.kind == "missing"
    assert problem.data == {
        "dimensions": {"accuracy": "out_of_range", "conciseness": "missing", "relevance": "missing"}
    }


@pytest.mark.parametrize("text", ["", None, "   \n"])
def test_empty_reply_is_missing_everywhere(text):
    problem = failure(text)
    assert problem.kind == "missing"
    assert set(problem.data["dimensions"]) == {"accuracy", "completeness", "conciseness", "relevance"}
    assert "empty" in problem.detail


def test_markers_without_numbers_and_words_between_do_not_count():
    problem = failure("I use α and β, ψ, δ as markers; α is for accuracy 85 α.")
    assert problem.data["dimensions"] == dict.fromkeys(["accuracy", "completeness", "conciseness", "relevance"], "missing")


def test_a_quoted_caption_with_markers_before_the_verdict():
    text = 'The caption "a man scores α10α and β20β" is odd.\n' + GOOD
    assert values(text) == {"accuracy": 85, "completeness": 60, "conciseness": 90, "relevance": 80}


def test_a_reply_cut_off_at_max_tokens_says_so():
    reply = JudgeReply("α85α β60β ψ9", None, "length", "m", Usage())
    problem = score_reply(reply, "text")
    assert isinstance(problem, ParseFailure) and problem.kind == "missing"
    assert "max_tokens" in problem.detail


# --- result, text scoring, reasoning ----------------------------------------------------------------------


def test_text_scoring_result():
    result = score_text(GOOD)
    assert isinstance(result, GVEvalResult) and result.judged and result.failure is None
    assert (result.accuracy, result.completeness, result.conciseness, result.relevance) == (85, 60, 90, 80)
    assert result.mean == pytest.approx((85 + 60 + 90 + 80) / 4)
    assert result.scoring == "text"
    assert result.raw_reply == GOOD
    assert result.dimensions["accuracy"].text == 85
    assert result.dimensions["accuracy"].expected is None
    assert result.dimensions["accuracy"].fallback_reason == NO_LOGPROBS


def test_reasoning_is_the_reply_without_the_final_statements():
    result = score_text(GOOD)
    assert result.reasoning == (
        "The caption names both people and the harness correctly, but misses the descent."
    )
    inline = "Good caption. Overall fine. The Accuracy score is α85α. The Completeness score is β60β. ψ90ψ. δ80δ."
    assert score_text(inline).reasoning == "Good caption. Overall fine."


def test_unjudged_result_carries_the_failure_kind():
    problem = ParseFailure("request_failed", "HTTP 500 three times")
    result = GVEvalResult.unjudged(problem, "expected", raw_reply=None)
    assert not result.judged and result.failure_kind == "request_failed"
    assert result.scores() == dict.fromkeys(["accuracy", "completeness", "conciseness", "relevance", "mean"])


def test_unknown_scoring_is_rejected():
    with pytest.raises(ValueError, match="scoring"):
        make_reply_parser("mean")


# --- expected-value scoring --------------------------------------------------------------------------------


def tokens(*pieces: str | tuple[str, dict[str, float]]) -> tuple[TokenLogprob, ...]:
    """Tokens in order; a (token, {alternative: probability}) pair carries top alternatives."""
    built = []
    for piece in pieces:
        if isinstance(piece, tuple):
            token, alternatives = piece
            top = tuple((alt, math.log(p)) for alt, p in alternatives.items())
            built.append(TokenLogprob(token, math.log(alternatives.get(token, 0.5)), top))
        else:
            built.append(TokenLogprob(piece, -0.01, ()))
    return tuple(built)


def reply_from(logprobs: tuple[TokenLogprob, ...] | None, content: str | None = None) -> JudgeReply:
    text = content if content is not None else "".join(t.token for t in logprobs or ())
    return JudgeReply(text, logprobs, "stop", "gpt-4o-2024-05-13", Usage())


SCORED = tokens(
    "Fine",
    ".",
    " α",
    ("85", {"85": 0.6, "80": 0.3, "90": 0.05, "abc": 0.05}),
    "α",
    " β",
    ("60", {"60": 0.5, "70": 0.5}),
    "β",
    " ψ",
    ("90", {"90": 1.0}),
    "ψ",
    " δ",
    ("80", {"80": 0.25, " 80": 0.25, "100": 0.5}),
    "δ",
)


def test_expected_value_is_the_probability_weighted_mean_over_integer_alternatives():
    result = score_reply(reply_from(SCORED), "expected")
    assert isinstance(result, GVEvalResult)
    # "abc" is not an integer: the rest are renormalised (0.6, 0.3, 0.05 of 0.95).
    assert result.accuracy == pytest.approx((85 * 0.6 + 80 * 0.3 + 90 * 0.05) / 0.95)
    assert result.completeness == pytest.approx(65)
    assert result.conciseness == pytest.approx(90)
    # "80" and " 80" are the same integer and pool their probability.
    assert result.relevance == pytest.approx(80 * 0.5 + 100 * 0.5)
    assert result.mean == pytest.approx(
        (result.accuracy + result.completeness + result.conciseness + result.relevance) / 4
    )
    assert result.fallback_reason is None
    assert result.dimensions["accuracy"].text == 85
    assert result.dimensions["accuracy"].expected == pytest.approx(result.accuracy)


def test_text_scoring_still_records_the_expected_values():
    result = score_reply(reply_from(SCORED), "text")
    assert (result.accuracy, result.completeness, result.conciseness, result.relevance) == (85, 60, 90, 80)
    assert result.dimensions["completeness"].expected == pytest.approx(65)
    assert result.fallback_reason is None


def test_the_final_statement_is_the_one_scored():
    early = tokens("Draft", " α", ("10", {"10": 1.0}), "α", ". Final")
    result = score_reply(reply_from(early + SCORED), "expected")
    assert result.dimensions["accuracy"].text == 85
    assert result.accuracy == pytest.approx((85 * 0.6 + 80 * 0.3 + 90 * 0.05) / 0.95)


def test_number_token_with_leading_space_and_emphasis_around_it():
    pieces = tokens(
        "α**", (" 85", {" 85": 0.5, " 95": 0.5}), "**α", " β", ("60", {"60": 1.0}), "β",
        " ψ", ("90", {"90": 1.0}), "ψ", " δ", ("80", {"80": 1.0}), "δ",
    )
    result = score_reply(reply_from(pieces), "expected")
    assert result.accuracy == pytest.approx(90)


def test_no_logprobs_falls_back_to_text_and_says_so():
    result = score_reply(reply_from(None, GOOD), "expected")
    assert (result.accuracy, result.completeness, result.conciseness, result.relevance) == (85, 60, 90, 80)
    assert result.fallback_reason == NO_LOGPROBS
    assert all(d.expected is None and d.fallback_reason == NO_LOGPROBS for d in result.dimensions.values())


def test_digit_split_numbers_fall_back_to_text():
    # A tokenizer that emits one digit per token: the token after α is "8", not the number 85.
    split = tokens(
        " α", ("8", {"8": 0.9, "7": 0.1}), "5", "α",
        " β", ("60", {"60": 0.5, "70": 0.5}), "β",
        " ψ", ("9", {"9": 1.0}), "0", "ψ",
        " δ", ("80", {"80": 1.0}), "δ",
    )
    result = score_reply(reply_from(split), "expected")
    assert result.accuracy == 85 and result.conciseness == 90  # text values, not 8.x
    assert result.completeness == pytest.approx(65)  # this one was a whole token
    assert result.dimensions["accuracy"].fallback_reason == NUMBER_SPLIT
    assert result.fallback_reason == "accuracy=number_split, conciseness=number_split"


def test_decimal_number_split_across_tokens_falls_back():
    pieces = tokens(" α", ("85", {"85": 1.0}), ".", "5", "α", " β1β ψ2ψ δ3δ")
    result = score_reply(reply_from(pieces), "expected")
    assert result.accuracy == 85.5
    assert result.dimensions["accuracy"].fallback_reason == NUMBER_SPLIT


def test_marker_merged_into_the_number_token_falls_back():
    pieces = tokens((" α85", {" α85": 1.0}), "α β1β ψ2ψ δ3δ")
    result = score_reply(reply_from(pieces), "expected")
    assert result.accuracy == 85 and result.dimensions["accuracy"].fallback_reason == MARKER_IN_NUMBER_TOKEN


def test_tokens_that_do_not_spell_the_reply_fall_back():
    result = score_reply(reply_from(SCORED, content="Something else entirely. " + GOOD), "expected")
    assert result.accuracy == 85 and result.fallback_reason == TOKENS_DO_NOT_MATCH_TEXT


def test_missing_top_alternatives_and_non_integer_alternatives_fall_back():
    words_only = TokenLogprob("60", -0.1, (("sixty", -0.1), ("六十", -2.0)))
    pieces = tokens(" α", "85", "α", " β") + (words_only,) + tokens("β ψ9ψ δ8δ")
    result = score_reply(reply_from(pieces), "expected")
    assert result.dimensions["accuracy"].fallback_reason == NO_TOP_LOGPROBS
    assert result.dimensions["completeness"].fallback_reason == NO_INTEGER_ALTERNATIVES
    assert (result.accuracy, result.completeness) == (85, 60)


def test_the_client_parser_returns_failures_for_retry():
    parse = make_reply_parser("expected")
    assert isinstance(parse(reply_from(None, "no scores here")), ParseFailure)
    assert isinstance(parse(reply_from(SCORED)), GVEvalResult)

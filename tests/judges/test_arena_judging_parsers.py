"""The pairwise parsers and templates (issue #49 item 2): strict verdicts, the last statement wins, a failed
parse is a typed failure (never a silent tie), and the templates are loaded verbatim after their header."""

from __future__ import annotations

import json

from capjudge.judges.anycap.pairwise import parse_pairwise_reply as parse_anycap
from capjudge.judges.gveval.pairwise import PAIRWISE_DIMENSIONS, parse_pairwise_reply as parse_gveval
from capjudge.judges.gveval.pairwise import render_pairwise_prompt
from capjudge.judges.pairwise.templates import PROMPT_MARKER, load_pairwise_template
from capjudge.judges.pairwise.verdicts import PairwiseResult, for_models
from capjudge.judges.types import JudgeReply, ParseFailure, Usage


def reply(text, finish="stop"):
    return JudgeReply(content=text, logprobs=None, finish_reason=finish, model=None, usage=Usage())


def lines(*verdicts):
    return "\n".join(f"{name.capitalize()}: [[{v}]]" for name, v in zip(PAIRWISE_DIMENSIONS, verdicts))


def test_gveval_verdicts_last_statement_wins_and_failures_are_typed():
    parsed = parse_gveval(reply("Reasons.\n" + lines("A", "B", "tie", "A", "B")))
    assert isinstance(parsed, PairwiseResult) and parsed.reason == "Reasons."
    assert parsed.verdicts == dict(zip(PAIRWISE_DIMENSIONS, ("A", "B", "tie", "A", "B")))
    # The template echoed first, the answer last (with emphasis and another letter case): the answer.
    echoed = lines(*["verdict"] * 5) + "\n**Accuracy**: [[ b ]]\n" + lines("A", "A", "TIE", "A", "A").replace("Overall", "**Overall**")
    assert parse_gveval(reply(echoed)).verdicts["accuracy"] == "A"
    assert parse_gveval(reply(echoed)).verdicts["conciseness"] == "tie"
    invalid = parse_gveval(reply(lines("A", "B", "tie", "A", "verdict")))
    assert isinstance(invalid, ParseFailure) and invalid.kind == "invalid_verdict" and "overall" in invalid.detail
    missing = parse_gveval(reply(lines("A", "B", "tie", "A"), finish="length"))
    assert missing.kind == "missing" and "overall: no verdict" in missing.detail and "cut off" in missing.detail
    assert parse_gveval(reply("")).kind == "missing"


def test_anycap_verdicts_from_the_last_object_and_typed_failures():
    answer = {"quality": "A", "hallucination": "tie", "overall": "B", "reason": "B has no dog."}
    fenced = "```json\n" + json.dumps({"quality": "A, B or tie", "overall": "A, B or tie"}) + "\n```\n" + json.dumps(answer)
    parsed = parse_anycap(reply(fenced))
    assert parsed.verdicts == {"quality": "A", "hallucination": "tie", "overall": "B"} and parsed.reason == "B has no dog."
    assert parse_anycap(reply('{"score": 3}')).kind == "no_json"
    assert parse_anycap(reply("")).kind == "no_json"
    assert parse_anycap(reply(json.dumps({**answer, "overall": 1}))).kind == "invalid_verdict"
    assert parse_anycap(reply(json.dumps({"overall": "A"}))).kind == "missing"


def test_templates_are_versioned_and_sent_verbatim_after_their_header():
    for name in ("gveval_pairwise_v1.txt", "gveval_pairwise_references_v1.txt", "anycap_pairwise_v1.txt"):
        template = load_pairwise_template(name)
        assert template.version == 1 and "capjudge's own" in template.header and "no published pairwise" in template.header
        from capjudge.judges.pairwise import templates

        raw = (templates.resources.files("capjudge.judges") / "templates" / name).read_bytes().decode("utf-8")
        assert raw == template.header + PROMPT_MARKER + template.prompt
        assert "capjudge" not in template.prompt  # the header, never the prompt, talks about capjudge
    prompt = render_pairwise_prompt("first {{CaptionB}}", "second")
    assert "Caption A:\nfirst {{CaptionB}}\n\nCaption B:\nsecond\n" in prompt
    assert prompt.startswith("You will be given two captions")


def test_positional_verdicts_become_verdicts_about_the_models():
    assert [for_models(v, True) for v in ("A", "B", "tie")] == ["A", "B", "tie"]
    assert [for_models(v, False) for v in ("A", "B", "tie")] == ["B", "A", "tie"]

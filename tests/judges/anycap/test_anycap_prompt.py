"""The AnyCapEval request (prompt bytes, substitution, 8 JPEG frames in order) and the judge that uses it."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from capjudge.judges.anycap.judge import (
    JUDGE_VERSION,
    AnyCapJudge,
    AnyCapResult,
    build_request,
    load_template,
    render_prompt,
)
from capjudge.judges.anycap.parser import AnyCapVerdict
from capjudge.judges.anycap.length_rule import check_instruction_restriction, check_length_tolerance
from capjudge.judges.datasets.anycap_video import UnknownCaptionType
from capjudge.judges.types import ImagePart
from capjudge.judges.video import VideoError
from tests.support.paths import shared_path
from tests.support.openai_server import Reply
from tests.support.videos import frame_colour, frame_index_of, make_video

SEED_SHA256 = "5cc8f66d4b57571abbd8ebb5bb464d30ee35ddfd8fb42d470430dcf648d22844"


def images_of(request) -> list[ImagePart]:
    return [part for part in request.parts if isinstance(part, ImagePart)]


def decoded(part: ImagePart) -> Image.Image:
    return Image.open(io.BytesIO(part.data))


# ------------------------------------------------------------------------------------------------------
# Prompt


def test_template_is_the_seed_byte_for_byte() -> None:
    text = load_template()
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == SEED_SHA256
    assert text.encode("utf-8") == shared_path("seeds", "001_73f1842c3c04a976.txt").read_bytes()


def test_substitution_fills_the_three_placeholders_and_nothing_else() -> None:
    template = load_template()
    prompt = render_prompt("brief", "A dog runs.", "A brown dog runs on grass.")
    expected = (
        template.replace("{caption_type}", "brief")
        .replace("{output}", "A dog runs.")
        .replace("{reference}", "A brown dog runs on grass.")
    )
    assert prompt == expected
    assert "Caption Type: brief  \nModel Output: A dog runs.\nReference: A brown dog runs on grass.\n" in prompt
    for placeholder in ("{caption_type}", "{output}", "{reference}"):
        assert placeholder not in prompt
    assert '{"score": [0-4], "reason": "1-2 sentence explanation"}' in prompt  # literal JSON braces kept


def test_substitution_is_one_pass() -> None:
    prompt = render_prompt("detail", "My caption says {reference} and {caption_type}.", "THE REFERENCE")
    assert "Model Output: My caption says {reference} and {caption_type}.\n" in prompt
    assert prompt.count("THE REFERENCE") == 1


def test_theme_is_rendered_as_style() -> None:
    assert "Caption Type: style  \n" in render_prompt("theme", "o", "r")


def test_unknown_caption_type_is_a_clear_error_naming_the_item() -> None:
    with pytest.raises(UnknownCaptionType, match="item 412: unknown caption type 'poetry'"):
        build_request("poetry", "o", "r", item=412)


# ------------------------------------------------------------------------------------------------------
# Request: frames and sampling


def test_video_gives_eight_jpeg_frames_after_the_text_in_sampling_order(tmp_path) -> None:
    video = make_video(tmp_path / "clip.mp4", n_frames=50)
    request = build_request("brief", "A caption.", "A reference.", video=video)
    assert isinstance(request.parts[0], str) and request.parts[0] == render_prompt(
        "brief", "A caption.", "A reference."
    )
    images = images_of(request)
    assert len(request.parts) == 9 and len(images) == 8
    assert all(part.media_type == "image/jpeg" and part.data[:3] == b"\xff\xd8\xff" for part in images)
    assert all(part.detail is None for part in images)
    expected = np.linspace(0, 49, 8).astype(int).tolist()
    assert expected == [0, 7, 14, 21, 28, 35, 42, 49]
    assert [frame_index_of(decoded(part)) for part in images] == expected


def test_short_video_repeats_frames_like_the_published_sampler(tmp_path) -> None:
    video = make_video(tmp_path / "short.mp4", n_frames=3)
    images = images_of(build_request("poem", "o", "r", video=video))
    assert [frame_index_of(decoded(part)) for part in images] == [0, 0, 0, 0, 1, 1, 1, 2]


def test_pre_extracted_frames_are_picked_by_the_same_indices(tmp_path) -> None:
    paths = []
    for index in range(20):
        path = tmp_path / f"frame_{index:03d}.png"
        Image.new("RGB", (32, 24), frame_colour(index)).save(path)
        paths.append(path)
    images = images_of(build_request("detail", "o", "r", frames=paths))
    assert [frame_index_of(decoded(part)) for part in images] == np.linspace(0, 19, 8).astype(int).tolist()
    in_memory = [Image.new("RGB", (32, 24), frame_colour(index)) for index in range(8)]
    assert [frame_index_of(decoded(p)) for p in images_of(build_request("detail", "o", "r", frames=in_memory))] == list(
        range(8)
    )


def test_published_sampling_parameters_and_overrides() -> None:
    request = build_request("brief", "o", "r")
    assert dict(request.params) == {"temperature": 0.7, "max_tokens": 4096}
    assert request.parts == (render_prompt("brief", "o", "r"),)  # no video: text only
    changed = build_request("brief", "o", "r", temperature=0.0, max_tokens=256, model="judge-x")
    assert dict(changed.params) == {"temperature": 0.0, "max_tokens": 256}
    assert changed.body()["model"] == "judge-x"
    assert changed.body("configured")["model"] == "configured"  # the client's model wins
    assert request.body()["model"] == "gpt-4o-2024-08-06"  # the published judge by default


def test_request_body_is_text_then_image_urls(tmp_path) -> None:
    body = build_request("brief", "o", "r", video=make_video(tmp_path / "v.mp4", n_frames=10)).body("gpt-4o-2024-08-06")
    content = body["messages"][0]["content"]
    assert [part["type"] for part in content] == ["text"] + ["image_url"] * 8
    assert all(part["image_url"]["url"].startswith("data:image/jpeg;base64,") for part in content[1:])
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("gpt-4o-2024-08-06", 0.7, 4096)


def test_bad_video_and_conflicting_sources(tmp_path) -> None:
    with pytest.raises(VideoError, match="does not exist"):
        build_request("brief", "o", "r", video=tmp_path / "missing.mp4")
    video = make_video(tmp_path / "v.mp4", n_frames=10)
    with pytest.raises(ValueError, match="either video or frames"):
        build_request("brief", "o", "r", video=video, frames=[Image.new("RGB", (8, 8))])


def test_judge_version_is_a_named_constant() -> None:
    assert JUDGE_VERSION == "anycap-style-video/1"


# ------------------------------------------------------------------------------------------------------
# Result: judge score, final score, which rule capped it


def words(n: int) -> str:
    return " ".join(["word"] * n)


def test_length_violation_caps_and_is_recorded() -> None:
    result = AnyCapResult.from_checks(
        AnyCapVerdict(4, "great"), check_length_tolerance("brief", words(20), words(10)), None
    )
    assert (result.judge_score, result.final_score, result.capped_by) == (4, 1, "length_tolerance")
    assert (result.output_words, result.reference_words, result.length_rule_applied, result.within_tolerance) == (
        20,
        10,
        True,
        False,
    )
    assert result.ok and result.reason == "great" and result.flags == ()


def test_a_score_already_under_the_cap_is_not_attributed_to_the_rule() -> None:
    result = AnyCapResult.from_checks(AnyCapVerdict(0), check_length_tolerance("detail", words(20), words(10)), None)
    assert (result.judge_score, result.final_score, result.capped_by, result.within_tolerance) == (0, 0, None, False)


def test_instruction_restriction_caps_any_type() -> None:
    restriction = check_instruction_restriction(
        "The generated caption's length needs to be 30 to 120 words.", words(10)
    )
    result = AnyCapResult.from_checks(
        AnyCapVerdict(3), check_length_tolerance("poem", words(10), words(40)), restriction
    )
    assert (result.final_score, result.capped_by, result.length_rule_applied) == (1, "instruction_restriction", False)
    assert (result.restriction, result.restriction_satisfied) == ("30 to 120 words", False)


def test_flags_and_unjudged_results() -> None:
    result = AnyCapResult.from_checks(
        None,
        check_length_tolerance("brief", words(3), "..."),
        None,
        failure="request_failed",
        failure_detail="http_500",
    )
    assert not result.ok
    assert (result.judge_score, result.final_score, result.capped_by, result.failure) == (
        None,
        None,
        None,
        "request_failed",
    )
    assert result.flags == ("reference_has_no_words",) and result.output_words == 3
    with pytest.raises(AttributeError):
        result.final_score = 2  # frozen


# ------------------------------------------------------------------------------------------------------
# AnyCapJudge through the real client against the local test server


def test_judge_reasks_until_a_score_then_applies_the_rule(server, make_client, tmp_path) -> None:
    server.script(Reply("I think it is good."), Reply('```json\n{"score": 4, "reason": "Vivid."}\n```'))
    judge = AnyCapJudge(make_client(server), tolerance=10)
    result = judge.judge("brief", words(15), words(10), video=make_video(tmp_path / "v.mp4", n_frames=30))
    assert (result.judge_score, result.final_score, result.capped_by, result.reason) == (
        4,
        1,
        "length_tolerance",
        "Vivid.",
    )
    assert len(server.completions) == 2
    sent = server.completions[-1].body
    assert sent["temperature"] == 0.7 and sent["max_tokens"] == 4096
    assert [part["type"] for part in sent["messages"][0]["content"]] == ["text"] + ["image_url"] * 8


def test_judge_without_a_usable_reply_is_an_unjudged_result(server, make_client) -> None:
    server.script(*[Reply('{"score": 9, "reason": "x"}')] * 3)
    result = AnyCapJudge(make_client(server), max_tries=3).judge("poem", "o", "r")
    assert (result.ok, result.failure, result.judge_score, result.final_score) == (False, "out_of_range", None, None)
    assert len(server.completions) == 3


def test_judge_instruction_rule_and_unreadable_video(server, make_client, tmp_path) -> None:
    server.script(Reply('{"score": 3, "reason": "ok"}'))
    judge = AnyCapJudge(make_client(server), instruction_rule=True)
    result = judge.judge(
        "theme", words(5), words(5), instruction="The generated caption's length needs to be 30 to 120 words."
    )
    assert (result.caption_type, result.final_score, result.capped_by) == ("style", 1, "instruction_restriction")
    missing = judge.judge("brief", words(5), words(5), video=tmp_path / "nope.mp4")
    assert (missing.failure, missing.judge_score) == ("video_unreadable", None)
    assert "nope.mp4" in missing.failure_detail
    with pytest.raises(ValueError):
        AnyCapJudge(make_client(server), tolerance=12.5)

"""The G-VEval request: exact prompt bytes, reference variants, the frame strip, and the judge's wiring."""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from capjudge.judges.gveval import judge as gveval
from capjudge.judges.frame_strip import BAR_HEIGHT, FRAME_HEIGHT, TILE_WIDTH, build_strip
from capjudge.judges.gveval.judge import (
    DEFAULT_SAMPLING,
    JUDGE_VERSION,
    PUBLISHED_MODEL,
    GVEvalJudge,
    build_request,
    load_template,
    render_prompt,
)
from capjudge.judges.gveval.parser import GVEvalResult
from capjudge.judges.types import ChatRequest, ImagePart, JudgeOutcome, JudgeReply, ParseFailure, Usage
from capjudge.judges.video import VideoError, sample_indices
from tests.support.videos import frame_colour, frame_index_of, make_video
from tests.support.paths import REPO_ROOT, SHARED

SEED = SHARED / "seeds" / "000_ae9358ab5d59d215.txt"
EXAMPLE = SHARED / "data" / "gveval_example"
PACKAGED_SEED = REPO_ROOT / "judges" / "templates" / "gveval_accr_video.txt"


def seed_bytes() -> bytes:
    if not SEED.is_file():
        pytest.skip(f"shared seeds not found at {SEED}")
    return SEED.read_bytes()


def strip_of(request: ChatRequest) -> Image.Image:
    (image,) = [part for part in request.parts if isinstance(part, ImagePart)]
    return Image.open(io.BytesIO(image.data))


# --- prompt bytes ------------------------------------------------------------------------------------------


def test_packaged_template_is_the_seed_byte_for_byte():
    seed = seed_bytes()
    assert hashlib.sha256(load_template("gveval_accr_video.txt").encode("utf-8")).digest() == hashlib.sha256(seed).digest()
    assert PACKAGED_SEED.read_bytes() == seed


@pytest.mark.parametrize(
    "caption",
    [
        "Two people put on climbing harnesses on a rooftop.",
        "",
        "a \\1 backslash, a $dollar, α90α inside, {{References}} and {{Caption}} literally",
        "line one\nline two",
    ],
)
def test_frames_prompt_is_the_seed_with_only_the_caption_substituted(caption):
    seed = seed_bytes().decode("utf-8")
    prompt = render_prompt(caption)
    expected = seed.replace("{{Caption}}", caption)
    assert hashlib.sha256(prompt.encode("utf-8")).hexdigest() == hashlib.sha256(expected.encode("utf-8")).hexdigest()
    before, after = seed.split("{{Caption}}")
    assert prompt.startswith(before) and prompt.endswith(after)
    assert "α{{accuracy_score}}α" in prompt  # the example lines stay as the model is meant to see them


def test_frames_mode_refuses_references_rather_than_dropping_them():
    with pytest.raises(ValueError, match="frames\\+references"):
        render_prompt("c", ["a reference"], "frames")


def test_frames_plus_references_inserts_a_marked_block_and_changes_nothing_else():
    prompt = render_prompt("A man climbs.", ["A man abseils down a tower.", "Someone\n climbs a wall."], "frames+references")
    block = load_template("gveval_references_block.txt").replace(
        "{{References}}", "- A man abseils down a tower.\n- Someone climbs a wall."
    )
    assert block.startswith("Reference Captions")
    assert block in prompt
    assert prompt.replace(block, "", 1) == render_prompt("A man climbs.")
    assert prompt.index(block) < prompt.index("Generated Caption:\nA man climbs.")


def test_references_are_inserted_once_and_a_caption_naming_the_placeholder_stays_literal():
    prompt = render_prompt("{{References}}", ["ref"], "frames+references")
    assert prompt.count("- ref") == 1
    assert "Generated Caption:\n{{References}}\n" in prompt


def test_references_mode_is_text_only_with_our_variant_template():
    prompt = render_prompt("A man climbs.", ["A man abseils."], "references")
    template = load_template("gveval_accr_references.txt")
    assert prompt == template.replace("{{References}}", "- A man abseils.").replace("{{Caption}}", "A man climbs.")
    assert "Frame 1" not in prompt and "image" not in prompt
    for marker_line in ("α{{accuracy_score}}α", "β{{completeness_score}}β", "ψ{{conciseness_score}}ψ", "δ{{relevance_score}}δ"):
        assert marker_line in prompt  # same closing format, so the same parser applies
    request = build_request("A man climbs.", references=["A man abseils."], mode="references")
    assert request.parts == (prompt,)


@pytest.mark.parametrize("references", [(), [""], ["ok", "  \n "]])
def test_reference_modes_need_real_references(references):
    with pytest.raises(ValueError):
        render_prompt("c", references, "references")


def test_unknown_mode_is_rejected():
    with pytest.raises(ValueError, match="mode must be one of"):
        render_prompt("c", mode="video")


# --- request -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    return make_video(tmp_path_factory.mktemp("clip") / "clip.mp4", 50, width=96, height=64, gop=10)


def test_request_has_prompt_then_strip_and_the_published_sampling(clip):
    request = build_request("A colour ramp.", video=clip)
    prompt, image = request.parts
    assert prompt == render_prompt("A colour ramp.")
    assert isinstance(image, ImagePart) and image.media_type == "image/png" and image.detail == "high"
    assert dict(request.params) == {"temperature": 1, "top_p": 1, "logprobs": True, "top_logprobs": 5}
    assert request.model == PUBLISHED_MODEL  # the published default; a model configured on the client wins
    body = request.body("gpt-4o-2024-05-13")
    url = body["messages"][0]["content"][1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,") and base64.b64decode(url.split(",", 1)[1]) == image.data


def test_sampling_overrides_are_merged_key_by_key(clip):
    request = build_request("c", video=clip, sampling={"temperature": 0, "max_tokens": 512})
    assert dict(request.params) == {**DEFAULT_SAMPLING, "temperature": 0, "max_tokens": 512}


def test_frame_modes_need_exactly_one_visual_input(clip, tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        build_request("c")
    with pytest.raises(ValueError, match="exactly one"):
        build_request("c", video=clip, image=tmp_path / "x.png")
    with pytest.raises(ValueError, match="text only"):
        build_request("c", video=clip, references=["r"], mode="references")
    with pytest.raises(VideoError, match="does not exist"):
        build_request("c", video=tmp_path / "missing.mp4")


def test_strip_geometry_and_frame_choice_on_a_generated_video(clip):
    strip = strip_of(build_request("c", video=clip))
    assert strip.size == (3 * TILE_WIDTH, FRAME_HEIGHT + BAR_HEIGHT) == (1536, 512)
    pixels = np.asarray(strip.convert("RGB"))
    expected = sample_indices(50, 4)[:3]  # [0, 16, 32]
    for tile, index in enumerate(expected):
        frame_area = pixels[:FRAME_HEIGHT, tile * TILE_WIDTH : (tile + 1) * TILE_WIDTH]
        assert frame_index_of(frame_area) == index
        assert np.abs(frame_area.astype(int) - frame_colour(index)).max() <= 8  # one flat colour to the edges
        bar = pixels[FRAME_HEIGHT:, tile * TILE_WIDTH : (tile + 1) * TILE_WIDTH]
        ink = bar.min(axis=-1) < 128
        rows, cols = np.nonzero(ink)
        # Label: black ink on white, left-aligned, inside the bar like the published one (rows 8..37, x 13..169).
        assert 6 <= rows.min() and rows.max() <= 40
        assert 10 <= cols.min() <= 16 and 140 <= cols.max() <= 175
        assert (bar[..., 0] == bar[..., 1]).all() and (bar[..., 1] == bar[..., 2]).all()  # black on white only
        assert (bar[:, 200:] == 255).all()  # right of the label the bar is pure white


def test_labels_read_frame_1_2_3_in_order(clip):
    pixels = np.asarray(strip_of(build_request("c", video=clip)).convert("L"))
    bars = [pixels[FRAME_HEIGHT:, tile * TILE_WIDTH : (tile + 1) * TILE_WIDTH] for tile in range(3)]
    # "Frame " is identical in all three labels; only the digit differs, and each digit differently.
    word = slice(0, 115)
    assert np.array_equal(bars[0][:, word], bars[1][:, word]) and np.array_equal(bars[1][:, word], bars[2][:, word])
    digits = [bar[:, 130:200] for bar in bars]
    assert not np.array_equal(digits[0], digits[1]) and not np.array_equal(digits[1], digits[2])
    # The same digit glyphs as our own rendering of "Frame 1/2/3" on a blank bar.
    blank = [Image.new("RGB", (1, 1), "white")] * 3
    reference = np.asarray(build_strip(blank).convert("L"))
    assert np.array_equal(reference[FRAME_HEIGHT:], pixels[FRAME_HEIGHT:])


def test_strip_matches_the_published_example():
    """Our strip of G-VEval's example clip against the strip its code produced (numbers in frame_strip.py)."""
    if not EXAMPLE.is_dir():
        pytest.skip(f"shared example data not found at {EXAMPLE}")
    ours = np.asarray(strip_of(build_request("c", video=EXAMPLE / "video1.mp4")).convert("RGB"), dtype=float)
    published = np.asarray(Image.open(EXAMPLE / "video1_frames.png").convert("RGB"), dtype=float)
    assert ours.shape == published.shape == (512, 1536, 3)
    for tile in range(3):
        columns = slice(tile * TILE_WIDTH, (tile + 1) * TILE_WIDTH)
        frame_difference = np.abs(ours[:FRAME_HEIGHT, columns] - published[:FRAME_HEIGHT, columns]).mean()
        bar_difference = np.abs(ours[FRAME_HEIGHT:, columns] - published[FRAME_HEIGHT:, columns]).mean()
        assert frame_difference < 1.5  # measured 0.23-0.61: same frames, slightly different resampling
        assert bar_difference < 14  # measured 8.9-10.1: same place and size, different font
        published_bar = published[FRAME_HEIGHT:, columns]
        assert (published_bar[:, 200:] == 255).all() and (ours[FRAME_HEIGHT:, columns][:, 200:] == 255).all()


def test_pre_extracted_frames_are_sampled_like_a_video(tmp_path):
    paths = []
    for index in range(20):
        path = tmp_path / f"{index:03d}.jpg"
        Image.new("RGB", (32, 24), frame_colour(index)).save(path, quality=95)
        paths.append(path)
    pixels = np.asarray(strip_of(build_request("c", frames=paths)).convert("RGB"))
    chosen = [frame_index_of(pixels[:FRAME_HEIGHT, t * TILE_WIDTH : (t + 1) * TILE_WIDTH]) for t in range(3)]
    assert chosen == sample_indices(20, 4)[:3] == [0, 6, 12]


def test_a_ready_made_image_is_sent_as_its_own_bytes(tmp_path):
    png, jpeg, bmp = tmp_path / "s.png", tmp_path / "s.jpg", tmp_path / "s.bmp"
    for path, fmt in ((png, "PNG"), (jpeg, "JPEG"), (bmp, "BMP")):
        Image.new("RGB", (60, 20), (10, 200, 30)).save(path, format=fmt)
    assert build_request("c", image=png).parts[1] == ImagePart(png.read_bytes(), "image/png", "high")
    assert build_request("c", image=jpeg).parts[1] == ImagePart(jpeg.read_bytes(), "image/jpeg", "high")
    converted = build_request("c", image=bmp).parts[1]
    assert converted.media_type == "image/png" and Image.open(io.BytesIO(converted.data)).size == (60, 20)
    (tmp_path / "bad.png").write_text("nope")
    with pytest.raises(VideoError, match="not a readable image"):
        build_request("c", image=tmp_path / "bad.png")


# --- the judge's wiring to the client ----------------------------------------------------------------------


@dataclass
class ScriptedClient:
    """Stands in for the judge client: applies the judge's own parse to scripted replies, like
    JudgeClient.judge does, and records what it was asked."""

    replies: list[str]
    calls: list = None

    def judge(self, request, parse, *, judge_version, max_tries=1):
        self.calls = (self.calls or []) + [(request, judge_version, max_tries)]
        seen = []
        for text in self.replies[:max_tries]:
            reply = JudgeReply(text, None, "stop", "scripted", Usage(requests=1))
            seen.append(reply)
            value = parse(reply)
            if not isinstance(value, ParseFailure):
                return JudgeOutcome(value, None, tuple(seen), (), Usage())
        return JudgeOutcome(None, value, tuple(seen), (), Usage())


GOOD_REPLY = "Fine. The Accuracy score is α80α. β70β ψ90ψ δ60δ"


def test_judge_returns_a_judged_result_and_passes_the_version(clip):
    client = ScriptedClient(["no scores", GOOD_REPLY])
    result = GVEvalJudge(client, scoring="expected", max_tries=3).judge("A colour ramp.", video=clip)
    assert isinstance(result, GVEvalResult) and result.judged
    assert result.mean == pytest.approx(75) and result.fallback_reason == "no_logprobs"
    ((request, version, tries),) = client.calls
    assert version == JUDGE_VERSION == gveval.JUDGE_VERSION and tries == 3
    assert request.parts[0] == render_prompt("A colour ramp.")


def test_judge_reports_unparsable_replies_and_bad_videos_as_unjudged(clip, tmp_path):
    result = GVEvalJudge(ScriptedClient(["α80α only"]), max_tries=1).judge("c", video=clip)
    assert not result.judged and result.failure_kind == "missing" and result.raw_reply == "α80α only"
    assert result.failure.data["dimensions"] == {"completeness": "missing", "conciseness": "missing", "relevance": "missing"}
    broken = GVEvalJudge(ScriptedClient([GOOD_REPLY])).judge("c", video=tmp_path / "missing.mp4")
    assert not broken.judged and broken.failure_kind == "video_unreadable" and "missing.mp4" in broken.failure.detail


def test_judge_uses_references_only_in_modes_that_take_them(clip):
    client = ScriptedClient([GOOD_REPLY])
    GVEvalJudge(client, mode="frames").judge("c", video=clip, references=["r1"])
    assert "- r1" not in client.calls[0][0].parts[0]
    client = ScriptedClient([GOOD_REPLY])
    GVEvalJudge(client, mode="references").judge("c", video=clip, references=["r1"])
    assert client.calls[0][0].parts == (render_prompt("c", ["r1"], "references"),)

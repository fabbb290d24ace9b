"""The demo split: regenerated into tmp_path, decoded for real with PyAV, and compared with what is committed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from capjudge.judges.anycap.length_rule import (
    check_instruction_restriction,
    check_length_tolerance,
)
from tests.support import demo_data
from tests.support.demo_data import (
    ANYCAP_ITEMS,
    CAPTION_SETS,
    CLIPS,
    FPS,
    FRAME_SIZE,
    GVEVAL_ITEMS,
)
from tests.support.paths import REPO_ROOT

COMMITTED = REPO_ROOT / "tasks" / "demo"
JSONL_FILES = (
    "gveval_demo.jsonl", "anycap_demo.jsonl", "captions_good.jsonl", "captions_fair.jsonl", "captions_poor.jsonl",
)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    assert demo_data.main(["--out", str(out)]) == 0
    return out


def decode(path: Path) -> tuple[str, list[np.ndarray], float]:
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
        duration = float(stream.duration * stream.time_base) if stream.duration else len(frames) / FPS
        return stream.codec_context.name, frames, duration


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_every_clip_is_real_h264_with_the_expected_frames_and_size(generated):
    total_bytes = 0
    for clip in CLIPS:
        path = generated / clip.name
        codec, frames, duration = decode(path)
        assert codec == "h264", clip.name
        assert len(frames) == clip.n_frames == clip.seconds * FPS, clip.name
        assert all(frame.shape == (FRAME_SIZE[1], FRAME_SIZE[0], 3) for frame in frames), clip.name
        assert 2.0 <= duration <= 4.0, (clip.name, duration)
        assert not np.array_equal(frames[0], frames[-1]), f"{clip.name} does not change over time"
        total_bytes += path.stat().st_size
    assert total_bytes < 2 * 1024 * 1024


def test_the_committed_demo_is_the_generators_output(generated):
    for name in JSONL_FILES:
        assert (COMMITTED / name).read_bytes() == (generated / name).read_bytes(), f"tasks/demo/{name} is stale"
    for clip in CLIPS:
        committed, fresh = COMMITTED / clip.name, generated / clip.name
        assert committed.exists(), f"tasks/demo/{clip.name} is missing"
        if committed.read_bytes() == fresh.read_bytes():
            continue
        # Another FFmpeg build may write other bytes; the pictures must still be the same.
        _, old_frames, _ = decode(committed)
        _, new_frames, _ = decode(fresh)
        assert len(old_frames) == len(new_frames), clip.name
        pairs = zip(old_frames, new_frames, strict=True)
        difference = np.mean([np.abs(a.astype(int) - b.astype(int)).mean() for a, b in pairs])
        assert difference < 2.0, (clip.name, difference)
    expected = {clip.name for clip in CLIPS} | set(JSONL_FILES)
    assert {path.name for path in COMMITTED.iterdir()} == expected


def test_two_runs_draw_identical_frames():
    for clip in CLIPS:
        first = [np.asarray(image) for image in demo_data.frames_of(clip)]
        second = [np.asarray(image) for image in demo_data.frames_of(clip)]
        assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True)), clip.name


def _centroid(frame: np.ndarray, colour_test) -> tuple[float, float, int]:
    mask = colour_test(frame.astype(int))
    ys, xs = np.nonzero(mask)
    return float(xs.mean()), float(ys.mean()), int(mask.sum())


def test_the_clips_show_what_their_references_say(generated):
    """Spot checks on decoded frames (after lossy coding), so the references are true of the videos."""
    def frames(name: str) -> list[np.ndarray]:
        return decode(generated / name)[1]

    def red(f):
        return (f[..., 0] > 180) & (f[..., 1] < 90) & (f[..., 2] < 90)

    ball = frames("red_ball.mp4")
    assert _centroid(ball[0], red)[0] < 60 and _centroid(ball[-1], red)[0] > 260  # left to right

    def blue(f):
        return (f[..., 2] > 150) & (f[..., 0] < 90)

    square = frames("blue_square.mp4")
    assert _centroid(square[-1], blue)[2] > 20 * _centroid(square[0], blue)[2]  # grows

    light = frames("traffic_light.mp4")

    def green(f):
        return (f[..., 1] > 160) & (f[..., 0] < 100) & (f[..., 2] < 130)

    assert red(light[0]).sum() > 500 and green(light[0]).sum() < 50  # red first
    assert green(light[-1]).sum() > 500 and red(light[-1]).sum() < 50  # green last

    def orange(f):
        return (f[..., 0] > 200) & (f[..., 1] > 90) & (f[..., 1] < 170) & (f[..., 2] < 80)

    triangle = frames("sliding_triangle.mp4")
    assert _centroid(triangle[-1], orange)[1] - _centroid(triangle[0], orange)[1] > 120  # slides down

    def yellow(f):
        return (f[..., 0] > 200) & (f[..., 1] > 170) & (f[..., 2] < 90)

    sun = frames("sunrise.mp4")
    assert yellow(sun[0]).sum() < 50  # hidden behind the hills ...
    assert yellow(sun[-1]).sum() > 1000  # ... then up in the sky


def test_items_cover_the_caption_types_and_every_id_has_a_caption_in_every_set(generated):
    gveval = read_jsonl(generated / "gveval_demo.jsonl")
    anycap = read_jsonl(generated / "anycap_demo.jsonl")
    assert 8 <= len(gveval) <= 12 and 8 <= len(anycap) <= 12
    clip_names = {clip.name for clip in CLIPS}
    for row in gveval:
        assert set(row) == {"id", "video", "references", "caption_prompt"}
        assert row["video"] in clip_names and 3 <= len(row["references"]) <= 5
    for row in anycap:
        assert set(row) == {"id", "video", "instruction", "reference", "caption_type"}
        assert row["video"] in clip_names
    assert {row["caption_type"] for row in anycap} == {"brief", "detail", "poem", "narrative", "theme"}
    ids = [row["id"] for row in gveval + anycap]
    assert len(ids) == len(set(ids)), "ids must be unique across the two tasks"
    for set_name in ("good", "fair", "poor"):
        rows = read_jsonl(generated / f"captions_{set_name}.jsonl")
        assert [row["id"] for row in rows] == ids, set_name
        assert all(isinstance(row["caption"], str) and row["caption"].strip() for row in rows), set_name


def test_every_instruction_states_a_length_the_length_rule_recognises_and_the_references_keep_it():
    for item in ANYCAP_ITEMS:
        check = check_instruction_restriction(item.instruction, item.reference)
        assert check.restriction is not None, f"{item.id}: no recognised length instruction"
        assert check.satisfied, f"{item.id}: the reference breaks its own instruction"


def test_good_captions_keep_every_length_rule_and_poor_ones_break_some():
    for item in ANYCAP_ITEMS:
        good = CAPTION_SETS["good"][item.id]
        assert check_instruction_restriction(item.instruction, good).satisfied, item.id
        tolerance = check_length_tolerance(item.caption_type, good, item.reference)
        assert tolerance.within in (True, None), (item.id, tolerance.output_words, tolerance.reference_words)
    broken = [
        item.id for item in ANYCAP_ITEMS
        if not check_instruction_restriction(item.instruction, CAPTION_SETS["poor"][item.id]).satisfied
    ]
    assert len(broken) >= len(ANYCAP_ITEMS) // 2


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def _best_f1(caption: str, references) -> float:
    best = 0.0
    for reference in references:
        shared = len(_words(caption) & _words(reference))
        if shared:
            precision, recall = shared / len(_words(caption)), shared / len(_words(reference))
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def test_the_three_caption_sets_differ_visibly_in_quality():
    """Word overlap with the references (a crude proxy, but one a judge of any quality should agree with)."""
    references = {item.id: item.references for item in GVEVAL_ITEMS}
    references |= {item.id: (item.reference,) for item in ANYCAP_ITEMS}
    overlap = {
        name: {item_id: _best_f1(captions[item_id], references[item_id]) for item_id in references}
        for name, captions in CAPTION_SETS.items()
    }
    means = {name: float(np.mean(list(values.values()))) for name, values in overlap.items()}
    assert means["good"] > means["fair"] + 0.15 and means["fair"] > means["poor"] + 0.15, means
    assert all(overlap["good"][item_id] > overlap["poor"][item_id] for item_id in references)


def test_inconsistent_data_is_refused_with_the_item_named():
    with pytest.raises(ValueError, match="missing ids \\['g01'"):
        without_g01 = {item_id: text for item_id, text in CAPTION_SETS["good"].items() if item_id != "g01"}
        demo_data.check_consistency(caption_sets={"broken": without_g01})
    moved = [demo_data.GVEvalItem("g01", "nowhere.mp4", ("a", "b", "c"))]
    with pytest.raises(ValueError, match="g01: video 'nowhere.mp4'"):
        demo_data.check_consistency(gveval=moved, anycap=(), caption_sets={})

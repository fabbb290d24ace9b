"""Frame sampling: which frames are picked, that only they are decoded, and every way a video can be bad."""

from __future__ import annotations

import os
import wave
from pathlib import Path

import av
import numpy as np
import pytest
from PIL import Image

from capjudge.judges.video import (
    DecodeStats,
    VideoError,
    load_frames,
    probe_video,
    sample_frames,
    sample_indices,
)
from tests.support.videos import frame_colour, frame_index_of, make_video
from tests.support.paths import SHARED

SHARED_EXAMPLE = SHARED / "data" / "gveval_example"


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("videos")
    make_video(folder / "x264.mp4", 120, codec="libx264", gop=12)
    make_video(folder / "mpeg4.mp4", 120, codec="mpeg4", gop=12)
    make_video(folder / "x264.mkv", 120, codec="libx264", gop=12)
    make_video(folder / "x264.avi", 60, codec="libx264", gop=12)
    make_video(folder / "x264.h264", 60, codec="libx264", gop=12)
    make_video(folder / "one.mp4", 1)
    make_video(folder / "two.mp4", 2)
    return folder


# --- index selection ---------------------------------------------------------------------------------------


def test_sample_indices_follow_the_published_linspace_rule():
    assert sample_indices(217, 4) == [0, 72, 144, 216]  # the example clip: G-VEval shows 0, 72, 144
    assert sample_indices(100, 8) == [0, 14, 28, 42, 56, 70, 84, 99]  # truncation, not rounding (14.14 -> 14)
    assert sample_indices(10, 4) == [0, 3, 6, 9]
    assert sample_indices(2, 4) == [0, 0, 0, 1]
    assert sample_indices(1, 4) == [0, 0, 0, 0]
    assert sample_indices(7, 1) == [0]


@pytest.mark.parametrize("n_frames, points", [(0, 4), (10, 0), (-3, 4)])
def test_sample_indices_reject_impossible_requests(n_frames, points):
    with pytest.raises(ValueError):
        sample_indices(n_frames, points)


def test_test_videos_encode_their_frame_index(videos):
    # The helper's promise, checked on a decode of every frame: frame i reads back as i.
    with av.open(str(videos / "x264.mp4")) as container:
        read_back = [frame_index_of(frame.to_image()) for frame in container.decode(video=0)]
    assert read_back == list(range(120))


@pytest.mark.parametrize(
    "name, n_frames, count_source",
    [
        ("x264.mp4", 120, "header"),
        ("mpeg4.mp4", 120, "header"),
        ("x264.mkv", 120, "duration"),  # Matroska carries a duration but no frame count
        ("x264.avi", 60, "header"),
        ("x264.h264", 60, "counted"),  # a raw elementary stream carries neither
    ],
)
def test_the_frames_at_the_sampled_indices_are_returned(videos, name, n_frames, count_source):
    info = probe_video(videos / name)
    assert (info.n_frames, info.count_source) == (n_frames, count_source)
    assert (info.width, info.height) == (64, 48)
    frames = sample_frames(videos / name, 8)
    assert [frame_index_of(frame) for frame in frames] == sample_indices(n_frames, 8)
    assert all(frame.mode == "RGB" and frame.size == (64, 48) for frame in frames)


def test_keep_takes_the_first_points_like_gveval(videos):
    frames = sample_frames(videos / "x264.mp4", 4, keep=3)
    assert [frame_index_of(frame) for frame in frames] == [0, 39, 79]  # linspace(0, 119, 4) = 0, 39.7, 79.3, 119


def test_keep_must_fit_within_points(videos):
    with pytest.raises(ValueError, match="keep"):
        sample_frames(videos / "x264.mp4", 4, keep=5)


def test_short_clips_repeat_frames_instead_of_failing(videos):
    assert [frame_index_of(f) for f in sample_frames(videos / "one.mp4", 4, keep=3)] == [0, 0, 0]
    assert [frame_index_of(f) for f in sample_frames(videos / "two.mp4", 4)] == [0, 0, 0, 1]


# --- seeking, not decoding everything ----------------------------------------------------------------------


def test_only_frames_near_the_targets_are_decoded(tmp_path):
    path = make_video(tmp_path / "long.mp4", 600, gop=10)
    stats = DecodeStats()
    frames = sample_frames(path, 4, keep=3, stats=stats)
    assert [frame_index_of(f) for f in frames] == [0, 199, 399]
    assert stats.seeks == 3
    # Each target costs at most one GOP from its keyframe (plus codec delay), never the 600-frame file.
    assert 3 <= stats.decoded_frames <= 3 * 10 + 6


def test_seek_decoding_matches_a_full_decode(videos):
    path = videos / "mpeg4.mp4"
    with av.open(str(path)) as container:
        everything = [np.asarray(frame.to_image()) for frame in container.decode(video=0)]
    stats = DecodeStats()
    picked = sample_frames(path, 8, stats=stats)
    for index, frame in zip(sample_indices(len(everything), 8), picked):
        assert np.array_equal(np.asarray(frame), everything[index])
    assert stats.decoded_frames < len(everything)


def test_the_published_example_gives_the_published_frames():
    """G-VEval's own strip of video1.mp4 shows frames 0, 72 and 144; ours must be those frames, and must be
    closer to the published tiles than the neighbouring frames are."""
    if not SHARED_EXAMPLE.is_dir():
        pytest.skip(f"shared example data not found at {SHARED_EXAMPLE}")
    published = np.asarray(Image.open(SHARED_EXAMPLE / "video1_frames.png").convert("RGB"), dtype=float)
    frames = sample_frames(SHARED_EXAMPLE / "video1.mp4", 4, keep=3)
    assert len(frames) == 3 and frames[0].size == (1280, 720)

    def tile_difference(image: Image.Image, tile: int) -> float:
        resized = np.asarray(image.resize((512, 462), Image.Resampling.BICUBIC), dtype=float)
        return float(np.abs(resized - published[:462, tile * 512 : (tile + 1) * 512]).mean())

    off_by_six = _decode_indices(SHARED_EXAMPLE / "video1.mp4", [6, 78, 150])
    for tile, (frame, other) in enumerate(zip(frames, off_by_six)):
        assert tile_difference(frame, tile) < 1.5
        assert tile_difference(other, tile) > tile_difference(frame, tile) + 1.0


def _decode_indices(path: Path, indices: list[int]) -> list[Image.Image]:
    wanted = set(indices)
    picked = []
    with av.open(str(path)) as container:
        for index, frame in enumerate(container.decode(video=0)):
            if index in wanted:
                picked.append(frame.to_image())
            if index >= max(indices):
                break
    return picked


# --- pre-extracted frames ----------------------------------------------------------------------------------


def test_load_frames_picks_by_the_same_indices_and_opens_only_those(tmp_path):
    paths = []
    for index in range(10):
        path = tmp_path / f"frame_{index:02d}.png"
        if index in (0, 3, 6):  # only the picked ones exist: opening any other would raise
            Image.new("RGB", (8, 8), frame_colour(index)).save(path)
        paths.append(path)
    frames = load_frames(paths, 4, keep=3)
    assert [frame_index_of(f) for f in frames] == [0, 3, 6]


def test_load_frames_accepts_pil_images_and_rejects_bad_sources(tmp_path):
    images = [Image.new("RGB", (8, 8), frame_colour(index)) for index in range(5)]
    assert [frame_index_of(f) for f in load_frames(images, 4)] == [0, 1, 2, 4]
    with pytest.raises(ValueError, match="no frames"):
        load_frames([], 4)
    with pytest.raises(VideoError, match="does not exist"):
        load_frames([tmp_path / "gone.png"], 4)
    (tmp_path / "text.png").write_text("not an image")
    with pytest.raises(VideoError, match="not a readable image"):
        load_frames([tmp_path / "text.png"], 1)


# --- every way a video can be unusable ---------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(VideoError, match="does not exist") as caught:
        sample_frames(tmp_path / "nope.mp4", 4)
    assert caught.value.path.endswith("nope.mp4")


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(VideoError, match="not a regular file"):
        sample_frames(tmp_path, 4)


def test_zero_length_file(tmp_path):
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(VideoError, match="empty"):
        sample_frames(tmp_path / "empty.mp4", 4)


def test_file_that_is_not_a_video(tmp_path):
    (tmp_path / "junk.mp4").write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(VideoError, match="not a readable video file"):
        sample_frames(tmp_path / "junk.mp4", 4)


def test_truncated_mp4_is_unreadable(videos, tmp_path):
    data = (videos / "x264.mp4").read_bytes()
    (tmp_path / "cut.mp4").write_bytes(data[: len(data) // 2])  # the index (moov) is written last: lost
    with pytest.raises(VideoError, match="not a readable video file"):
        sample_frames(tmp_path / "cut.mp4", 4)


def test_truncated_mkv_is_reported_as_truncated(videos, tmp_path):
    data = (videos / "x264.mkv").read_bytes()
    (tmp_path / "cut.mkv").write_bytes(data[: len(data) // 2])  # header intact, second half of frames gone
    with pytest.raises(VideoError, match="truncated or corrupt"):
        sample_frames(tmp_path / "cut.mkv", 4)


def test_corrupt_frame_data(videos, tmp_path):
    data = bytearray((videos / "x264.mp4").read_bytes())
    noise = np.random.default_rng(1).integers(0, 256, len(data) - 4000, dtype=np.uint8).tobytes()
    data[2000:-2000] = noise  # keep the container's head and tail, scramble the coded frames
    (tmp_path / "noisy.mp4").write_bytes(bytes(data))
    with pytest.raises(VideoError, match="corrupt|not a readable"):
        sample_frames(tmp_path / "noisy.mp4", 4)


def test_audio_only_file_has_no_video_stream(tmp_path):
    with wave.open(str(tmp_path / "tone.wav"), "wb") as audio:
        audio.setnchannels(1)
        audio.setsampwidth(2)
        audio.setframerate(8000)
        audio.writeframes(np.zeros(8000, dtype=np.int16).tobytes())
    with pytest.raises(VideoError, match="no video stream"):
        sample_frames(tmp_path / "tone.wav", 4)


def test_stream_with_no_decodable_frame(tmp_path):
    # A real H.264 stream with its only keyframe removed: packets exist, but no frame can be decoded.
    source = make_video(tmp_path / "source.mkv", 24, gop=100)
    broken = tmp_path / "no_keyframe.mkv"
    with av.open(str(source)) as reader, av.open(str(broken), "w") as writer:
        stream_in = reader.streams.video[0]
        stream_out = writer.add_stream_from_template(stream_in)
        for packet in reader.demux(stream_in):
            if packet.dts is None or packet.is_keyframe:
                continue
            packet.stream = stream_out
            writer.mux(packet)
    assert probe_video(broken).n_frames > 0  # the container still claims frames
    with pytest.raises(VideoError, match="no decodable video frames"):
        sample_frames(broken, 4)


def test_error_message_names_file_and_problem(tmp_path):
    error = VideoError(tmp_path / "clip.mp4", "file does not exist")
    assert str(error) == f"{tmp_path / 'clip.mp4'}: file does not exist"
    assert error.problem == "file does not exist"
    assert os.fspath(tmp_path / "clip.mp4") == error.path


def test_exactly_the_shown_number_of_frames_is_taken_as_it_is():
    three = [Image.new("RGB", (32, 24), frame_colour(i)) for i in (5, 9, 13)]
    assert [frame_index_of(f) for f in load_frames(three, 4, keep=3)] == [5, 9, 13]
    eight = [Image.new("RGB", (32, 24), frame_colour(i)) for i in range(8)]
    assert [frame_index_of(f) for f in load_frames(eight, 8)] == list(range(8))
    # Any other count is a sequence to sample, as a video would be: int(linspace(0, 4, 4))[:3] = 0, 1, 2.
    five = [Image.new("RGB", (32, 24), frame_colour(i)) for i in range(5)]
    assert [frame_index_of(f) for f in load_frames(five, 4, keep=3)] == [0, 1, 2]

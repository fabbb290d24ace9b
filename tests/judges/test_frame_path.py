"""Forward or seek: `sample_frames` picks, per sampled frame, between decoding on and seeking to the keyframe
before it. Whatever it picks, the frames are the same pixels; what it picks is checked on the decode work done
(DecodeStats), never on time."""

from __future__ import annotations

import av
import numpy as np
import pytest

from capjudge.judges import video
from capjudge.judges.video import DecodeStats, sample_frames, sample_indices
from tests.support.videos import frame_index_of, make_video

SAMPLINGS = [(4, 3), (8, None)]  # G-VEval's 3 of 4 points, AnyCap's 8


def _full_decode(path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [np.asarray(frame.to_image()) for frame in container.decode(video=0)]


@pytest.mark.parametrize(
    "n_frames, gop, codec",
    [(7, 12, "libx264"), (60, 12, "libx264"), (150, 25, "libx264"), (400, 30, "libx264"), (240, 20, "mpeg4")],
)
def test_forward_and_seeking_give_the_same_pixels(tmp_path, monkeypatch, n_frames, gop, codec):
    path = make_video(tmp_path / f"clip_{n_frames}.mp4", n_frames, gop=gop, codec=codec)
    everything = _full_decode(path)
    assert len(everything) == n_frames
    for points, keep in SAMPLINGS:
        wanted = sample_indices(n_frames, points)[:keep]
        by_path = {}
        # A seek costing more than any file: never seek after the first frame. Costing less than nothing:
        # seek to every target. The real cost: whatever the chooser picks.
        for name, seek_cost in (("forward", 10**9), ("seeking", -(10**9)), ("chosen", video._SEEK_COST_FRAMES)):
            monkeypatch.setattr(video, "_SEEK_COST_FRAMES", seek_cost)
            stats = DecodeStats()
            by_path[name] = (sample_frames(path, points, keep, stats=stats), stats)
        assert by_path["forward"][1].seeks == 1  # only the one to the start
        assert by_path["forward"][1].decoded_frames == wanted[-1] + 1  # one pass, nothing decoded twice
        assert by_path["seeking"][1].seeks == len(set(wanted))
        for name, (frames, _) in by_path.items():
            assert [frame_index_of(frame) for frame in frames] == wanted, name
            for index, frame in zip(wanted, frames):
                assert frame.mode == "RGB"
                assert np.array_equal(np.asarray(frame), everything[index]), (name, index)


def test_a_short_clip_within_one_keyframe_interval_is_one_forward_pass(tmp_path):
    # 10 s at 25 fps with a keyframe only at the start (shorter than x264's default 250-frame interval). The
    # targets are 35 frames apart, more than a second: a planner that seeks on a long gap would land on frame 0
    # every time and decode the start again and again (1,000+ frames for 8 samples).
    path = make_video(tmp_path / "short.mp4", 250, gop=300)
    for points, keep in SAMPLINGS:
        stats = DecodeStats()
        frames = sample_frames(path, points, keep, stats=stats)
        wanted = sample_indices(250, points)[:keep]
        assert [frame_index_of(frame) for frame in frames] == wanted
        assert stats.seeks == 1  # to the start only
        assert stats.decoded_frames == wanted[-1] + 1


def test_a_long_clip_with_sparse_keyframes_seeks_to_each_target(tmp_path):
    # 60 s at 25 fps, a keyframe every 10 s (x264's default interval): the 3 G-VEval targets 0, 499, 999 each
    # get a seek, and each costs at most one keyframe interval instead of the 1,000 frames of a forward pass.
    path = make_video(tmp_path / "long.mp4", 1500, gop=250)
    stats = DecodeStats()
    frames = sample_frames(path, 4, keep=3, stats=stats)
    assert [frame_index_of(frame) for frame in frames] == [0, 499, 999]
    assert stats.seeks == 3
    assert stats.decoded_frames <= 1 + 250 + 250
    # AnyCap's 8 targets, 214 frames apart: a seek wherever a keyframe lies well after the previous target.
    stats = DecodeStats()
    frames = sample_frames(path, 8, stats=stats)
    assert [frame_index_of(frame) for frame in frames] == sample_indices(1500, 8)
    assert stats.seeks >= 6
    assert stats.decoded_frames < 1500 * 2 // 3

"""Small deterministic test videos, encoded for real with PyAV, whose frames say which frame they are.

Frame i is one solid colour that encodes i in 16-level steps (R: i % 16, G: (i // 16) % 16, B: i // 256), so
`frame_index_of(image)` recovers i after lossy compression (codec error on a flat colour is a few levels, far
below the 16-level step). Supports up to 4096 distinct frames.
"""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path

import numpy as np

_STEP = 16
_OFFSET = 8  # centre of each 16-level band, so rounding tolerates +-7 levels of codec error


def frame_colour(index: int) -> tuple[int, int, int]:
    """The RGB colour of frame `index`."""
    if not 0 <= index < 4096:
        raise ValueError(f"frame index {index} outside 0..4095")
    return (
        _OFFSET + _STEP * (index % 16),
        _OFFSET + _STEP * ((index // 16) % 16),
        _OFFSET + _STEP * (index // 256),
    )


def frame_index_of(image) -> int:
    """Which frame a decoded image (PIL image or HxWx3 array) shows, read from its mean colour."""
    pixels = np.asarray(image.convert("RGB") if hasattr(image, "convert") else image, dtype=float)
    r, g, b = (int(round((pixels[..., channel].mean() - _OFFSET) / _STEP)) for channel in range(3))
    return r + 16 * g + 256 * b


def make_video(
    path: str | os.PathLike[str],
    n_frames: int,
    width: int = 64,
    height: int = 48,
    fps: int | Fraction = 25,
    codec: str = "libx264",
    gop: int = 12,
) -> Path:
    """Encode `n_frames` frames (frame i has colour `frame_colour(i)`) into `path`; the container follows the
    file extension (.mp4, .mkv, .avi, .h264 for a raw elementary stream).

    `codec` is "libx264" or "mpeg4". A keyframe every `gop` frames and no scene-cut keyframes (every frame is a
    "scene cut" here), so seeking really has to decode forward from a keyframe.
    """
    import av

    if codec not in ("libx264", "mpeg4"):
        raise ValueError(f"codec must be 'libx264' or 'mpeg4', got {codec!r}")
    path = Path(path)
    with av.open(os.fspath(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.gop_size = gop
        if codec == "libx264":
            # Single thread and fixed settings: the same bytes on every run.
            stream.options = {"x264-params": f"keyint={gop}:min-keyint={gop}:scenecut=0:threads=1", "crf": "18"}
        else:
            stream.options = {"sc_threshold": "1000000000", "qscale": "2"}
            stream.codec_context.qscale = 2
        for index in range(n_frames):
            pixels = np.empty((height, width, 3), dtype=np.uint8)
            pixels[...] = frame_colour(index)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts = index
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path

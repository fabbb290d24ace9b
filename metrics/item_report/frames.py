"""The visual input a judge got for one item, re-rendered from the logged video for the item report.

The images are made by the judges' own frame code (`judges/video.py` sampling, `judges/frame_strip.py` for
G-VEval's strip, AnyCap's JPEG encoding at its quality), so the bytes written are the bytes the request
carried: G-VEval sees one PNG strip of three labelled frames, AnyCap eight JPEG frames.

Nothing is kept at judge time: the run logs only the video's path. When that file is gone (runs copied to
another machine, clips deleted), `--videos DIR` finds a clip of the same file name under DIR; otherwise the
item says, in the page, which file it needed and why it cannot be shown. An item the judge saw no frames for
(its video was already missing at judge time, or the judge was text-only) says that instead.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GVEVAL = "gveval"
ANYCAP = "anycap"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# Failure kinds of an item whose judge got no frames at all.
VIDEO_FAILURES = ("video_missing", "video_unreadable")


@dataclass(frozen=True)
class VisualInput:
    """What the page shows for the judge's visual input: image files (relative to the page) and/or why not."""

    description: str  # what the judge was sent, e.g. "3 frames in one labelled PNG strip"
    images: tuple[str, ...] = ()
    problem: str | None = None  # shown in the page when the images cannot be (or were never) shown


@dataclass(frozen=True)
class FrameRequest:
    """Which frames one item's judge saw: the judge, its mode, and the logged video."""

    judge: str | None
    mode: str | None  # G-VEval's mode ("frames", "frames+references", "references"); None for other judges
    video: str | None
    failure: str | None  # the judgment's failure kind (video_missing/video_unreadable: the judge saw nothing)


def describe(request: FrameRequest) -> str:
    from capjudge.judges.anycap import judge as anycap
    from capjudge.judges.gveval import judge as gveval

    if request.judge == GVEVAL:
        if request.mode == "references":
            return "no image: G-VEval in 'references' mode is text only"
        return (f"one PNG strip of {gveval.FRAMES_SHOWN} labelled frames (the first {gveval.FRAMES_SHOWN} of "
                f"{gveval.SAMPLE_POINTS} evenly spaced sample points), G-VEval mode '{request.mode}'")
    if request.judge == ANYCAP:
        return f"{anycap.FRAME_POINTS} evenly spaced frames, each a JPEG (quality {anycap.JPEG_QUALITY})"
    if request.judge is None:
        return "not known: the run logged no judge for this item"
    return f"not known: the report does not know judge {request.judge!r}'s visual input"


class FrameRenderer:
    """Writes each distinct visual input once under `out/frames/` and says how the page should show it."""

    def __init__(self, out: Path, videos_dir: Path | None = None) -> None:
        self.out = out
        self.videos_dir = videos_dir
        self._done: dict[tuple[Any, ...], VisualInput] = {}

    def render(self, task: str, item_id: str, request: FrameRequest) -> VisualInput:
        key = (task, item_id, request.judge, request.mode, request.video)
        if key not in self._done:
            self._done[key] = self._render(task, item_id, request)
        return self._done[key]

    def render_all(self, wanted: Sequence[tuple[str, str, FrameRequest]]) -> None:
        """Render many items ahead of `render`, on every core: decoding (PyAV) and resizing (Pillow) release
        the GIL, and the judges' own frame-building bound keeps memory in check, as when judging."""
        todo = {(task, item_id, r.judge, r.mode, r.video): (task, item_id, r) for task, item_id, r in wanted}
        todo = {key: args for key, args in todo.items() if key not in self._done}
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for key, visual in zip(todo, pool.map(lambda args: self._render(*args), todo.values())):
                self._done[key] = visual

    def _render(self, task: str, item_id: str, request: FrameRequest) -> VisualInput:
        from capjudge.judges.video import VideoError

        description = describe(request)
        if request.judge not in (GVEVAL, ANYCAP) or (request.judge == GVEVAL and request.mode == "references"):
            return VisualInput(description)
        if request.failure in VIDEO_FAILURES:
            return VisualInput(description, problem=f"the judge saw no frames: the item failed at judge time "
                                                    f"({request.failure}), so there is nothing to show")
        if not request.video:
            return VisualInput(description, problem="the run logged no video path for this item")
        video = self._find_video(Path(request.video))
        if video is None:
            hint = (f" nor under --videos {self.videos_dir}" if self.videos_dir
                    else "; pass --videos DIR (a folder holding the clips) to show them")
            return VisualInput(description, problem=f"frames not shown: the video {request.video} is no longer "
                                                    f"there{hint}")
        try:
            images = self._write(task, item_id, request.judge, video)
        except VideoError as error:
            return VisualInput(description, problem=f"frames not shown: {error}")
        return VisualInput(description, images=images)

    def _find_video(self, logged: Path) -> Path | None:
        if logged.is_file():
            return logged
        if self.videos_dir is not None:
            for candidate in (self.videos_dir / logged.name, *sorted(self.videos_dir.rglob(logged.name))):
                if candidate.is_file():
                    return candidate
        return None

    def _write(self, task: str, item_id: str, judge: str | None, video: Path) -> tuple[str, ...]:
        from capjudge.judges.anycap import judge as anycap
        from capjudge.judges.gveval import judge as gveval
        from capjudge.judges.gveval.frame_strip import build_strip, strip_image_part
        from capjudge.judges.types import ImagePart
        from capjudge.judges.video import frame_building_slot, sample_frames

        with frame_building_slot():
            if judge == GVEVAL:
                strip = build_strip(sample_frames(video, gveval.SAMPLE_POINTS, gveval.FRAMES_SHOWN))
                parts = [strip_image_part(strip)]
            else:
                parts = [ImagePart.from_pil(frame, "JPEG", quality=anycap.JPEG_QUALITY)
                         for frame in sample_frames(video, anycap.FRAME_POINTS)]
        folder = self.out / "frames" / _safe(task)
        folder.mkdir(parents=True, exist_ok=True)
        stem = _safe(item_id) + "-" + hashlib.sha1(f"{judge}|{video}".encode()).hexdigest()[:8]
        written = []
        for number, part in enumerate(parts, start=1):
            suffix = ".png" if part.media_type == "image/png" else ".jpg"
            path = folder / f"{stem}-{number}{suffix}"
            path.write_bytes(part.data)  # exactly the bytes the judge request carried
            written.append(path.relative_to(self.out).as_posix())
        return tuple(written)


def frame_request(judge: Mapping[str, Any], judgment: Mapping[str, Any]) -> FrameRequest:
    settings = judge.get("settings") if isinstance(judge.get("settings"), Mapping) else {}
    return FrameRequest(
        judge=judge.get("name") if isinstance(judge.get("name"), str) else None,
        mode=settings.get("mode") if isinstance(settings.get("mode"), str) else None,
        video=judgment.get("video") if isinstance(judgment.get("video"), str) else None,
        failure=judgment.get("failure") if isinstance(judgment.get("failure"), str) else None,
    )


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name)[:60] or "_"

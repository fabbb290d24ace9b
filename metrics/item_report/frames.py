"""The visual input a judge got for one item, re-rendered from the logged video for the item report.

The images are made by the judge's own frame geometry (`JudgeDescriptor.frames`, which its requests are built
with too), so the bytes written are the bytes the request carried: G-VEval sees one PNG strip of three
labelled frames, AnyCap eight JPEG frames, a judge from elsewhere what its logged geometry says.

Nothing is kept at judge time: the run logs only the video's path. When that file is gone (runs copied to
another machine, clips deleted), `--videos DIR` finds a clip of the same file name under DIR; otherwise the
item says, in the page, which file it needed and why it cannot be shown. An item the judge saw no frames for
(its video was already missing at judge time, or the judge was text-only) says that instead.

What the judge saw is read from the record, never assumed from the judge's name alone: a text-only judge or
mode ("text only: ... mode 'references' sends no frames"), and a judge model that cannot see images although
its judge sent frames: capjudge's embedded local judge (`judge.model` EMBEDDED_JUDGE_MODEL), whose server drops
the image parts of every request. Its frames are still shown, as what the request carried, under a description
that says the judge read the text alone.
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

from capjudge.judges.atomic_files import write_replacing
from capjudge.judges.descriptor import FrameGeometry
from capjudge.judges.known_judges import SHIPPED_JUDGES, judge_descriptor
from capjudge.judges.record import Judgment, LoggedJudge
from capjudge.judges.text import EMBEDDED_JUDGE_MODEL

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
    """Which frames one item's judge saw: the judge, its mode, the logged video, the judge's frame geometry
    (None: the shipped judge of that name's, or none known), and the judge model that read the request."""

    judge: str | None
    mode: str | None  # the judge's logged `mode` setting (G-VEval: "frames", "frames+references", "references")
    video: str | None  # None: the judge was given no video (a text-only mode)
    failure: str | None  # the judgment's failure kind (video_missing/video_unreadable: the judge saw nothing)
    frames: FrameGeometry | None = None
    model: str | None = None  # the logged `judge.model`

    def geometry(self) -> FrameGeometry | None:
        if self.frames is not None:
            return self.frames
        shipped = SHIPPED_JUDGES.get(self.judge or "")
        return shipped.frames if shipped is not None else None

    @property
    def text_only(self) -> bool:
        """The judge saw no image: it reads text only, or its mode gave it no video."""
        return self.judge_known and (self.geometry() is None or self.mode == "references" or
                                     (self.video is None and self.failure not in VIDEO_FAILURES))

    @property
    def judge_known(self) -> bool:
        return self.frames is not None or (self.judge or "") in SHIPPED_JUDGES

    @property
    def images_dropped(self) -> bool:
        """The request carried frames, but its judge model reads text only: the embedded judge's server drops
        every image part (judges/local/llama_server.py), so the model judged the text alone."""
        return self.model == EMBEDDED_JUDGE_MODEL and self.judge_known and not self.text_only and \
            self.failure not in VIDEO_FAILURES


def describe(request: FrameRequest) -> str:
    """What the judge was sent, as the page's "The judge saw:" line says it: the frames, or "text only" and why."""
    if request.judge is None:
        return "not known: the run logged no judge for this item"
    if not request.judge_known:
        return f"not known: the report does not know judge {request.judge!r}'s visual input"
    mode = f", mode '{request.mode}'" if request.mode else ""
    geometry = request.geometry()
    if geometry is None:
        return f"text only: judge {request.judge!r} sends no images{mode}"
    if request.mode == "references":
        return f"text only: judge {request.judge!r} in mode 'references' sends no frames (the references instead)"
    if request.text_only:
        return f"text only: judge {request.judge!r} was given no video{mode}"
    if request.images_dropped:
        return (f"text only: the request carried {geometry.describe()}{mode}, but the judge model "
                f"{request.model!r} is capjudge's embedded local judge, which reads text only: its server dropped "
                "the images, so it judged the text alone")
    return geometry.describe() + mode


class FrameRenderer:
    """Writes each distinct visual input once under `out/frames/` and says how the page should show it."""

    def __init__(self, out: Path, videos_dir: Path | None = None) -> None:
        self.out = out
        self.videos_dir = videos_dir
        self._done: dict[tuple[Any, ...], VisualInput] = {}

    def render(self, task: str, item_id: str, request: FrameRequest) -> VisualInput:
        key = (task, item_id, request.judge, request.mode, request.video, request.geometry(), request.model)
        if key not in self._done:
            self._done[key] = self._render(task, item_id, request)
        return self._done[key]

    def render_all(self, wanted: Sequence[tuple[str, str, FrameRequest]]) -> None:
        """Render many items ahead of `render`, on every core: decoding (PyAV) and resizing (Pillow) release
        the GIL, and the judges' own frame-building bound keeps memory in check, as when judging."""
        todo = {(task, item_id, r.judge, r.mode, r.video, r.geometry(), r.model): (task, item_id, r)
                for task, item_id, r in wanted}
        todo = {key: args for key, args in todo.items() if key not in self._done}
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            for key, visual in zip(todo, pool.map(lambda args: self._render(*args), todo.values())):
                self._done[key] = visual

    def _render(self, task: str, item_id: str, request: FrameRequest) -> VisualInput:
        from capjudge.judges.video import VideoError

        description = describe(request)
        geometry = request.geometry()
        if geometry is None or request.text_only:
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
            images = self._write(task, item_id, request.judge, geometry, video)
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

    def _write(self, task: str, item_id: str, judge: str | None, geometry: FrameGeometry, video: Path) -> tuple[str, ...]:
        parts = geometry.render(video=video)  # the judge's own frame code: the bytes its request carried
        folder = self.out / "frames" / _safe(task)
        folder.mkdir(parents=True, exist_ok=True)
        stem = _safe(item_id) + "-" + hashlib.sha1(f"{judge}|{video}".encode()).hexdigest()[:8]
        written = []
        for number, part in enumerate(parts, start=1):
            suffix = ".png" if part.media_type == "image/png" else ".jpg"
            path = folder / f"{stem}-{number}{suffix}"
            write_replacing(path, part.data)  # exactly the bytes the judge request carried
            written.append(path.relative_to(self.out).as_posix())
        return tuple(written)


def frame_request(judge: LoggedJudge | None, judgment: Judgment | None) -> FrameRequest:
    """What the item's judge saw, from its logged record (the judge's frame geometry from its descriptor).
    Raises DescriptorError for malformed logged judge facts."""
    settings = judge.settings if judge is not None and isinstance(judge.settings, Mapping) else {}
    descriptor = judge_descriptor(judge)
    return FrameRequest(
        judge=judge.name if judge is not None else None,
        mode=settings.get("mode") if isinstance(settings.get("mode"), str) else None,
        video=judgment.video if judgment is not None else None,
        failure=judgment.failure if judgment is not None else None,
        frames=descriptor.frames if descriptor is not None else None,
        model=judge.model if judge is not None else None,
    )


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name)[:60] or "_"

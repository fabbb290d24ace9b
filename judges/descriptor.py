"""What a judge is, declared once in its own module: name, version, published model, scores, frames, grammar.

Every other part of capjudge asks the descriptor instead of knowing judges by name: the task writes the
descriptor's facts into each item's record (`JudgeDescriptor.facts()`), and the readers (leaderboard,
item report, `capjudge reliability`) take what they need from those logged facts, so a run stays readable
without the judge's code and a new judge needs no edit outside its own files.

- `reply_fields`: where a logged reply keeps each value, which are the judge's scores, which per-item metric
  each value backs, and the main score (`capjudge.judges.record.ReplyFields`).
- `frames`: how the judge sees a video (which frames, one strip or separate images, which encoding) as data;
  `FrameGeometry.render` makes the exact image parts, for the request and again for the item report.
- `reply_grammar`: one line saying what a valid reply looks like (shown in reports and errors).
- `view_reply`: how the item report lays out one of its replies (code, so not logged: a judge read back from
  its logged facts alone is shown by `capjudge.judges.reply_view.generic_reply_view`).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from capjudge.judges.record import RecordError, ReplyFields, ReplySample
from capjudge.judges.reply_view import ReplyView

if TYPE_CHECKING:
    from capjudge.judges.types import ImagePart
    from capjudge.judges.video import FrameSource, PathLike

FrameLayout = Literal["separate", "strip"]
ScoreLevel = Literal["interval", "ordinal"]


def _file_identity(path: PathLike) -> tuple[int, ...] | None:
    """What tells one state of a file from another (device, inode, size, modification and change times);
    None where it cannot be read (the render then raises its own error naming the file)."""
    try:
        stat = os.stat(path)
    except (OSError, TypeError, ValueError):
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


# A video's image parts are the same for every caption judged against it, and every request needs them, if only
# for its reply-cache key: the arena asks each pair of captions in both orders, `capjudge sensitivity` asks an
# item's original and each variant, a panel asks each member, a rerun asks again of the cache. Rendering them
# (decoding, drawing, PNG-encoding) once per video and geometry in a process, instead of once per request, took
# a fifth of the test suite's CPU away. The key is the file's identity, not only its name: a video rewritten or
# replaced is rendered again. Bounded: a G-VEval strip of a full-size video is about a megabyte.
@functools.lru_cache(maxsize=32)
def _rendered_video(geometry: FrameGeometry, path: str, identity: tuple[int, ...]) -> tuple[ImagePart, ...]:
    return geometry._render_now(path, None)


class DescriptorError(RecordError):
    """A descriptor that cannot be, or logged judge facts that cannot be read back; the message names the
    field. A RecordError: wherever a malformed record is reported in one line, so are its judge facts."""


@dataclass(frozen=True)
class FrameGeometry:
    """Evenly spaced frames of a video as a judge receives them.

    `sample_points` frames are picked evenly over the video and the first `shown` of them are sent (G-VEval
    picks 4 and shows 3), either as `separate` images or as one labelled `strip` (G-VEval's layout: PNG).
    """

    sample_points: int
    shown: int | None = None  # None: every sampled frame
    layout: FrameLayout = "separate"
    image_format: Literal["JPEG", "PNG"] = "JPEG"
    jpeg_quality: int = 75

    def __post_init__(self) -> None:
        if self.sample_points < 1 or (self.shown is not None and not 1 <= self.shown <= self.sample_points):
            raise DescriptorError(f"frames: {self.shown} shown of {self.sample_points} sample points is not a geometry")
        if self.layout == "strip" and self.image_format != "PNG":
            raise DescriptorError("frames: a strip is one PNG image")

    @property
    def frames_sent(self) -> int:
        return self.sample_points if self.shown is None else self.shown

    def describe(self) -> str:
        picked = (f"the first {self.shown} of {self.sample_points} evenly spaced sample points"
                  if self.shown is not None and self.shown < self.sample_points else "evenly spaced")
        if self.layout == "strip":
            return f"one PNG strip of {self.frames_sent} labelled frames ({picked})"
        encoding = f"JPEG (quality {self.jpeg_quality})" if self.image_format == "JPEG" else "PNG"
        return f"{self.frames_sent} frames ({picked}), each a {encoding}"

    def render(self, video: PathLike | None = None, frames: Sequence[FrameSource] | None = None) -> tuple[ImagePart, ...]:
        """The image parts of one request, from a video (sampled by seeking) or pre-extracted frames."""
        if (video is None) == (frames is None):
            raise ValueError("give exactly one of video or frames")
        identity = _file_identity(video) if video is not None else None
        if identity is not None:
            return _rendered_video(self, os.fspath(video), identity)  # type: ignore[arg-type]
        return self._render_now(video, frames)

    def _render_now(self, video: PathLike | None, frames: Sequence[FrameSource] | None) -> tuple[ImagePart, ...]:
        from capjudge.judges.types import ImagePart
        from capjudge.judges.video import frame_building_slot, load_frames, sample_frames

        with frame_building_slot():
            images = (sample_frames(video, self.sample_points, self.shown) if video is not None
                      else load_frames(frames, self.sample_points, self.shown))  # type: ignore[arg-type]
            if self.layout == "strip":
                from capjudge.judges.frame_strip import build_strip, strip_image_part

                return (strip_image_part(build_strip(images)),)
            if self.image_format == "PNG":
                return tuple(ImagePart.from_pil(image, "PNG") for image in images)
            return tuple(ImagePart.from_pil(image, "JPEG", quality=self.jpeg_quality) for image in images)

    def facts(self) -> dict[str, Any]:
        return {"sample_points": self.sample_points, "shown": self.shown, "layout": self.layout,
                "image_format": self.image_format, "jpeg_quality": self.jpeg_quality}

    @classmethod
    def from_facts(cls, facts: Mapping[str, Any]) -> FrameGeometry:
        try:
            return cls(int(facts["sample_points"]), None if facts.get("shown") is None else int(facts["shown"]),
                       facts.get("layout", "separate"), facts.get("image_format", "JPEG"), int(facts.get("jpeg_quality", 75)))
        except (KeyError, TypeError, ValueError) as error:
            raise DescriptorError(f"frames: {error}") from error


@dataclass(frozen=True)
class JudgeDescriptor:
    name: str  # the name every record of this judge logs (`judge.name`)
    version: str  # part of every cache key: bump when a reply's meaning changes
    published_model: str
    reply_fields: ReplyFields
    frames: FrameGeometry | None  # None: the judge reads text only
    reply_grammar: str
    view_reply: Callable[[ReplySample], ReplyView] | None = field(default=None, compare=False)
    # What the scores are, for statistics that need it (a panel's Krippendorff alpha): "interval" for a
    # 0-100 scale, "ordinal" for a few ranked grades (AnyCap's 0-4).
    score_level: ScoreLevel = "interval"
    # The range every score of the judge lies in (G-VEval 0-100, AnyCap 0-4), for readers that flag a figure
    # beyond it (a length-controlled score extrapolated past the scale); None: not declared, nothing flagged.
    score_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        fields = self.reply_fields
        unknown = [name for name in (*fields.scores, *fields.metrics.values()) if name not in fields.values]
        if unknown or (fields.main is not None and fields.main not in fields.scores):
            raise DescriptorError(f"judge {self.name!r}: reply fields name values it does not declare: "
                                  f"{unknown or [fields.main]}")
        if self.score_level not in ("interval", "ordinal"):
            raise DescriptorError(f"judge {self.name!r}: score_level must be 'interval' or 'ordinal', "
                                  f"got {self.score_level!r}")
        low, high = self.score_range if self.score_range is not None else (0.0, 1.0)
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise DescriptorError(f"judge {self.name!r}: score_range must run from a finite low to a higher "
                                  f"finite high, got {self.score_range!r}")

    def metric_scales(self, metrics: Sequence[str]) -> dict[str, tuple[float, float]]:
        """metric -> the declared score range, for the metrics one of the judge's scores backs (a panel member's
        `metric@member` as its metric); none without a declared range."""
        from capjudge.judges.client.panel import MEMBER_SEPARATOR

        if self.score_range is None:
            return {}
        fields = self.reply_fields
        return {metric: self.score_range for metric in metrics
                if fields.metrics.get(metric.split(MEMBER_SEPARATOR, 1)[0]) in fields.scores}

    @property
    def main_metric(self) -> str | None:
        """The per-item metric backed by the main score (the first one declared, e.g. `gveval_mean`)."""
        fields = self.reply_fields
        return next((metric for metric, value in fields.metrics.items() if value == fields.main), None)

    def facts(self) -> dict[str, Any]:
        """What readers need, as JSON data: logged with every item so runs read without the judge's code."""
        fields = self.reply_fields
        return {
            "name": self.name, "version": self.version, "published_model": self.published_model,
            "reply_fields": {"values": dict(fields.values), "metrics": dict(fields.metrics),
                             "scores": list(fields.scores), "main": fields.main},
            "frames": self.frames.facts() if self.frames else None,
            "reply_grammar": self.reply_grammar,
            "score_level": self.score_level,
            "score_range": None if self.score_range is None else list(self.score_range),
        }

    @classmethod
    def from_facts(cls, facts: Any) -> JudgeDescriptor:
        if not isinstance(facts, Mapping):
            raise DescriptorError(f"judge facts must be an object, got {type(facts).__name__}")
        try:
            fields = facts["reply_fields"]
            reply_fields = ReplyFields(
                values={str(k): str(v) for k, v in fields["values"].items()},
                metrics={str(k): str(v) for k, v in fields["metrics"].items()},
                scores=tuple(str(name) for name in fields["scores"]),
                main=None if fields.get("main") is None else str(fields["main"]),
            )
            frames = facts.get("frames")
            score_range = facts.get("score_range")
            return cls(str(facts["name"]), str(facts["version"]), str(facts.get("published_model") or ""),
                       reply_fields, FrameGeometry.from_facts(frames) if frames is not None else None,
                       str(facts.get("reply_grammar") or ""), score_level=facts.get("score_level", "interval"),
                       score_range=None if score_range is None else _range(score_range))
        except (KeyError, TypeError, AttributeError) as error:
            raise DescriptorError(f"judge facts: missing or malformed {error}") from error


def _range(logged: Any) -> tuple[float, float]:
    """A logged `score_range`: two numbers (a bool is not one)."""
    if (not isinstance(logged, (list, tuple)) or len(logged) != 2
            or not all(isinstance(end, (int, float)) and not isinstance(end, bool) for end in logged)):
        raise DescriptorError(f"judge facts: score_range must be two numbers, got {logged!r}")
    return float(logged[0]), float(logged[1])

"""A third judge, for tests only: it proves a judge with its own dataset needs no edit outside its own files
(this folder: this module, which lmms-eval loads for toy.yaml's `!function utils.<name>`, toy.yaml and its
items, toy_items.jsonl).

The toy judge shows the model 2 frames of the clip and asks for two 1-10 scores in a one-line grammar,
`overall=N fluency=N`. Everything capjudge needs to know about it is its descriptor; the rest is its request,
its parser, its typed result and its task class, as for the shipped judges; its items are its own too (their
format here, the file beside it), read by capjudge's one loader.
"""

# No `from __future__ import annotations` here: lmms-eval runs this file without registering it in sys.modules,
# and dataclasses look the module up to read string annotations.
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from capjudge.judges.datasets.items import DatasetError, ItemFormat, read_json_lines, record_id
from capjudge.judges.descriptor import FrameGeometry, JudgeDescriptor
from capjudge.judges.record import ReplyFields
from capjudge.judges.types import ChatRequest, JudgeReply, ParseFailure
from capjudge.tasks import TASKS_DIR
from capjudge.tasks.harness.aggregations import count_failed, count_judged, mean_of_judged
from capjudge.tasks.harness.judged_task import JudgedTask, JudgeSettings, resolve_samples
from capjudge.tasks.harness.settings import parse_positive_int, setting
from capjudge.tasks.harness.sources import doc_to_video

__all__ = ["DESCRIPTOR", "TOY_ITEMS", "ToyTask", "count_failed", "count_judged", "doc_to_video", "mean_of_judged"]

SCORE_NAMES = ("overall", "fluency")
DESCRIPTOR = JudgeDescriptor(
    name="toy",
    version="toy-judge/1",
    published_model="toy-model",
    reply_fields=ReplyFields(values={name: f"scores.{name}" for name in SCORE_NAMES},
                             metrics={f"toy_{name}": name for name in SCORE_NAMES}, scores=SCORE_NAMES, main="overall"),
    frames=FrameGeometry(sample_points=2, image_format="JPEG", jpeg_quality=60),
    reply_grammar="one line: overall=N fluency=N (integers 1-10)",
)
PROMPT = "TOY JUDGE. Rate the caption 1-10 for overall quality and fluency.\nCaption: {caption}\nAnswer: overall=N fluency=N"
_REPLY = re.compile(r"overall=(\d+)\s+fluency=(\d+)")
HERE = Path(__file__).resolve().parent
# The toy's items name a clip of capjudge's packaged demo (tasks/demo/) rather than ship videos of their own.
DEMO_CLIPS = TASKS_DIR / "demo"


def parse_toy_item(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One line of toy_items.jsonl, `{"id", "clip": <demo clip name>, "reference"}` -> a task row: id, video,
    reference (lmms-eval's target; the toy judge does not read it)."""
    item_id = record_id(record, position)
    clip, reference = record.get("clip"), record.get("reference")
    if not isinstance(clip, str) or not clip.isidentifier():
        raise DatasetError(f"item {item_id!r}: 'clip' must name a demo clip, got {clip!r}")
    if not isinstance(reference, str) or not reference.strip():
        raise DatasetError(f"item {item_id!r}: 'reference' must be a caption, got {reference!r}")
    return {"id": item_id, "video": str(DEMO_CLIPS / f"{clip}.mp4"), "reference": reference}


TOY_ITEMS = ItemFormat("toy items", read_json_lines, parse_toy_item)


@dataclass(frozen=True)
class ToyResult:
    overall: float | None = None
    fluency: float | None = None
    failure: ParseFailure | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def failure_kind(self) -> str | None:
        return self.failure.kind if self.failure else None

    @property
    def failure_detail(self) -> str:
        return self.failure.detail if self.failure else ""

    @property
    def explanation(self) -> str | None:
        return None

    def scores(self) -> Mapping[str, float | None]:
        return {"overall": self.overall, "fluency": self.fluency}

    def log_fields(self) -> dict[str, Any]:
        return {"scores": dict(self.scores()), "failure": self.failure_kind, "failure_detail": self.failure_detail or None}


def parse_reply(reply: JudgeReply) -> tuple[float, float] | ParseFailure:
    found = _REPLY.search(reply.content or "")
    if found is None:
        return ParseFailure("no_scores", f"expected {DESCRIPTOR.reply_grammar!r}, got {(reply.content or '')[:80]!r}")
    overall, fluency = (float(found.group(i)) for i in (1, 2))
    if not (1 <= overall <= 10 and 1 <= fluency <= 10):
        return ParseFailure("out_of_range", f"scores {overall:g}, {fluency:g} outside 1-10")
    return overall, fluency


@dataclass(frozen=True)
class ToySettings(JudgeSettings):
    max_tries: int
    samples: int = 1

    descriptor: ClassVar[JudgeDescriptor] = DESCRIPTOR

    @classmethod
    def resolve(cls, metadata: Mapping[str, Any], env: Mapping[str, str] | None = None) -> "ToySettings":
        return cls(max_tries=setting(metadata, "max_tries", 2, parse_positive_int), samples=resolve_samples(metadata, env))

    def local_reply_constraint(self) -> dict[str, Any]:
        return {}

    def logged_settings(self) -> dict[str, Any]:
        return {"max_tries": self.max_tries, **({"samples": self.samples} if self.samples > 1 else {})}


class ToyTask(JudgedTask):
    settings_type = ToySettings
    own_datasets = {"toy_items": TOY_ITEMS}
    data_folder = HERE

    @classmethod
    def run_judge(cls, doc: Mapping[str, Any], caption: str, settings: ToySettings, client: Any, video: Any) -> ToyResult:
        request = ChatRequest((PROMPT.format(caption=caption), *DESCRIPTOR.frames.render(video=video)),
                              {"temperature": 0.7, "max_tokens": 20})
        outcome = client.judge(request, parse_reply, judge_version=DESCRIPTOR.version, max_tries=settings.max_tries)
        return ToyResult(*outcome.value) if outcome.ok else ToyResult(failure=outcome.failure)

    @classmethod
    def unjudged(cls, doc: Mapping[str, Any], caption: str, settings: ToySettings, failure: ParseFailure) -> ToyResult:
        return ToyResult(failure=failure)

    @classmethod
    def combine(cls, results: list[ToyResult]) -> ToyResult:
        judged = [r for r in results if r.ok]
        if not judged:
            return results[0]
        return ToyResult(statistics.fmean(r.overall for r in judged), statistics.fmean(r.fluency for r in judged))

    @classmethod
    def metric_values(cls, doc: Mapping[str, Any], result: ToyResult) -> dict[str, Any]:
        return {"toy_overall": result.overall, "toy_fluency": result.fluency, "toy_failed": int(not result.ok)}

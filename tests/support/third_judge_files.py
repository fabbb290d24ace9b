"""The files of the judge tests/installed/test_third_judge_from_readme.py builds by the README's "A third judge" list
(steps 1-9): `refmatch`, a caption beside its reference and 2 frames, one score 1-5, with its own dataset,
`refmatch_items`. Kept as text, not modules: they are written into a copy of the package, and import
`capjudge.*` modules that exist only there.
"""

from __future__ import annotations

import json

NAME, DATASET = "refmatch", "refmatch_items"
# Its items: id -> (the packaged demo clip it shows, its reference). The ids are the demo captions files'.
ITEMS = {"g01": ("red_ball", "A red ball rolls from the left side of the screen to the right side."),
         "g02": ("blue_square", "A blue square grows larger in the middle of a white screen."),
         "g04": ("bouncing_ball", "A green ball bounces up and down on a brown floor."),
         "g06": ("traffic_light", "A traffic light changes from red to yellow to green.")}


JUDGE_PACKAGE = '"""The reference-match judge: a caption beside its reference and 2 frames, one score 1-5."""\n'

TEMPLATE = """REFERENCE MATCH JUDGE. Rate how well the caption says what the reference says about the frames.
Reference: {reference}
Caption: {caption}
Answer with one line: match=N (an integer 1-5)
"""

JUDGE = '''"""The reference-match judge: its prompt (templates/refmatch.txt), its request and its descriptor."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from capjudge.judges.descriptor import FrameGeometry, JudgeDescriptor
from capjudge.judges.record import ReplyFields
from capjudge.judges.types import ChatRequest

TEMPLATE_NAME = "refmatch.txt"
DESCRIPTOR = JudgeDescriptor(
    name="refmatch",
    version="refmatch/1",
    published_model="refmatch-model",
    reply_fields=ReplyFields(values={"match": "match"}, metrics={"refmatch_match": "match"}, scores=("match",), main="match"),
    frames=FrameGeometry(sample_points=2, image_format="JPEG", jpeg_quality=60),
    reply_grammar="one line: match=N (an integer 1-5)",
    score_level="ordinal",
    score_range=(1.0, 5.0),
)


@lru_cache(maxsize=1)
def load_template() -> str:
    return (resources.files("capjudge.judges") / "templates" / TEMPLATE_NAME).read_bytes().decode("utf-8")


def render_prompt(caption: str, reference: str) -> str:
    return load_template().replace("{reference}", reference).replace("{caption}", caption)


def build_request(caption: str, reference: str, video: Any) -> ChatRequest:
    return ChatRequest((render_prompt(caption, reference), *DESCRIPTOR.frames.render(video=video)),
                       {"temperature": 0.0, "max_tokens": 16})


def local_reply_constraint() -> dict[str, Any]:
    return {}
'''

PARSER = '''"""The reference-match judge's reply: `match=N`, N an integer 1-5, or a typed failure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from capjudge.judges.types import JudgeReply, ParseFailure

_MATCH = re.compile(r"match=(\\d+)")


@dataclass(frozen=True)
class RefMatchResult:
    match: float | None = None
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
        return {"match": self.match}

    def log_fields(self) -> dict[str, Any]:
        return {"match": self.match, "failure": self.failure_kind, "failure_detail": self.failure_detail or None}


def parse_refmatch_reply(reply: JudgeReply) -> float | ParseFailure:
    found = _MATCH.search(reply.content or "")
    if found is None:
        return ParseFailure("no_score", f"expected match=N, got {(reply.content or '')[:80]!r}")
    score = float(found.group(1))
    return score if 1 <= score <= 5 else ParseFailure("out_of_range", f"match {score:g} outside 1-5")
'''

DATASET_MODULE = '''"""The reference-match items: one JSON object a line, {"id", "video", "reference"}; no human ratings."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capjudge.judges.datasets.items import DatasetError, ItemFormat, read_json_lines, record_id


def parse_refmatch_record(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    item_id = record_id(record, position)
    for field in ("video", "reference"):
        if not isinstance(record.get(field), str) or not record[field].strip():
            raise DatasetError(f"item {item_id!r}: {field!r} must be a non-empty string, got {record.get(field)!r}")
    return {"id": item_id, "video": record["video"], "reference": record["reference"]}


REFMATCH_ITEMS_FORMAT = ItemFormat("reference-match items", read_json_lines, parse_refmatch_record)
'''

TASK_MODULE = '''"""The reference-match task (tasks/refmatch/): each caption judged against its item's reference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from capjudge.judges.descriptor import JudgeDescriptor
from capjudge.judges.refmatch.judge import DESCRIPTOR, build_request, local_reply_constraint
from capjudge.judges.refmatch.parser import RefMatchResult, parse_refmatch_reply
from capjudge.judges.types import ParseFailure
from capjudge.tasks.harness.judged_task import JudgedTask, JudgeSettings, resolve_samples
from capjudge.tasks.harness.settings import MAX_TRIES_LIMIT, parse_count, setting


@dataclass(frozen=True)
class RefMatchSettings(JudgeSettings):
    max_tries: int
    samples: int = 1

    descriptor: ClassVar[JudgeDescriptor] = DESCRIPTOR

    @classmethod
    def resolve(cls, metadata: Mapping[str, Any], env: Mapping[str, str] | None = None) -> RefMatchSettings:
        return cls(max_tries=setting(metadata, "max_tries", 2, parse_count(MAX_TRIES_LIMIT)),
                   samples=resolve_samples(metadata, env))

    def local_reply_constraint(self) -> dict[str, Any]:
        return local_reply_constraint()

    def logged_settings(self) -> dict[str, Any]:
        return {"max_tries": self.max_tries}


class RefMatchTask(JudgedTask):
    settings_type = RefMatchSettings

    @classmethod
    def run_judge(cls, doc: Mapping[str, Any], caption: str, settings: RefMatchSettings, client: Any, video: Any) -> RefMatchResult:
        outcome = client.judge(build_request(caption, doc["reference"], video), parse_refmatch_reply,
                               judge_version=DESCRIPTOR.version, max_tries=settings.max_tries)
        return RefMatchResult(outcome.value) if outcome.ok else RefMatchResult(failure=outcome.failure)

    @classmethod
    def unjudged(cls, doc: Mapping[str, Any], caption: str, settings: RefMatchSettings, failure: ParseFailure) -> RefMatchResult:
        return RefMatchResult(failure=failure)

    @classmethod
    def combine(cls, results: list[RefMatchResult]) -> RefMatchResult:
        judged = [result.match for result in results if result.ok]
        return RefMatchResult(sum(judged) / len(judged)) if judged else results[0]

    @classmethod
    def metric_values(cls, doc: Mapping[str, Any], result: RefMatchResult) -> dict[str, Any]:
        return {"refmatch_match": result.match, "refmatch_failed": int(not result.ok)}
'''

TASK_YAML = """# The reference-match judge on its packaged items (refmatch_items.jsonl, beside this file).
task: refmatch
class: !function utils.RefMatchTask
output_type: generate_until
test_split: test
doc_to_visual: !function utils.doc_to_video
doc_to_text: "Describe what happens in this video in one sentence."
doc_to_target: reference
generation_kwargs:
  max_new_tokens: 64
metric_list:
  - metric: refmatch_match
    aggregation: !function utils.mean_of_judged
    higher_is_better: true
  - metric: refmatch_failed
    aggregation: !function utils.count_failed
    higher_is_better: false
  - metric: judged
    aggregation: !function utils.count_judged
    higher_is_better: true
metadata:
  version: 1
  dataset: refmatch_items
  default_data: refmatch/refmatch_items.jsonl
  id_field: id
  max_tries: 2
"""

TASK_UTILS = '''"""lmms-eval resolves `!function utils.<name>` in this folder's YAML against this file."""

from capjudge.tasks.harness.aggregations import count_failed, count_judged, mean_of_judged
from capjudge.tasks.harness.refmatch_task import RefMatchTask
from capjudge.tasks.harness.sources import doc_to_video

__all__ = ["RefMatchTask", "count_failed", "count_judged", "doc_to_video", "mean_of_judged"]
'''

# The items name the packaged demo's clips, relative to this task folder.
ITEMS_FILE = "".join(json.dumps({"id": item, "video": f"../demo/{clip}.mp4", "reference": reference}) + "\n"
                     for item, (clip, reference) in ITEMS.items())

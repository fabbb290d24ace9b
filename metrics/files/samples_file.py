"""The one reader of a task's samples file (`<date>_samples_<task>.jsonl`: one line per item, as lmms-eval's
`--log_samples` and `capjudge judge` write it). Every command that reads a run's items reads them here: the
leaderboard, the item report and `vatex` (through `capjudge.metrics.files.task_run`), `reliability`,
`correlate --run`, and `capjudge judge`, `sensitivity` and `estimate`, which judge the logged responses. One
reader, so one rule:

- every line is a JSON object with no key twice, and its logged record (if any) reads back;
- no item is logged twice. lmms-eval logs each document once; a file that holds an item twice (logs merged by
  hand, an edit) has two versions of it and nothing says which one is the run's, while a mapping by item keeps
  the last without a word. Two lines are the same item when they log the same item id (capjudge's record) or
  the same `doc_id` (lmms-eval's document number);
- a command that needs the model's response gets text (`SampleLine.response`): lmms-eval logs
  `filtered_resps` as a list holding one response per request, and a number, null, an object or an empty
  list is refused rather than turned into a caption (a captions file with a number for a caption is refused
  too: `capjudge.models.captions_file`).

Every refusal is a `RunFileError` naming the file, the line (both lines for a repeat) and the item.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.judges.jsonl import numbered_objects
from capjudge.judges.known_judges import judge_descriptor
from capjudge.judges.record import JudgedRecord, RecordError
from capjudge.metrics.files.run_file_error import RunFileError

# Where lmms-eval logs the model's output (after the task's filters) and the document's number in the task.
RESPONSE_FIELD = "filtered_resps"
DOC_ID_FIELD = "doc_id"


@dataclass(frozen=True)
class SampleLine:
    """One item's line of a samples file, with its logged record (None: the line logs none)."""

    path: Path
    number: int  # 1-based line number in the file
    line: Mapping[str, Any]
    record: JudgedRecord | None

    @property
    def where(self) -> str:
        return f"{self.path}, line {self.number}"

    @property
    def label(self) -> str:
        """How a message names the item: its logged id, else its doc_id (with the document's own id when
        lmms-eval logged the document)."""
        if self.record is not None and self.record.item_id is not None:
            return f"item {self.record.item_id}"
        doc = self.line.get("doc")
        own_id = doc.get("id") if isinstance(doc, Mapping) else None
        shown = f" (item {own_id})" if isinstance(own_id, (str, int)) and not isinstance(own_id, bool) else ""
        return f"doc_id {_short(self.line.get(DOC_ID_FIELD))}{shown}"

    def document_number(self) -> int:
        """The line's `doc_id`: the item's position in the task's documents, a whole number >= 0."""
        value = self.line.get(DOC_ID_FIELD)
        if DOC_ID_FIELD not in self.line or isinstance(value, bool) or not isinstance(value, int) or value < 0:
            found = "no doc_id" if DOC_ID_FIELD not in self.line else f"doc_id {_short(value)} is not a document number"
            raise RunFileError(f"{self.where}: {found} (lmms-eval logs each item's position in the task, 0, 1, 2, ...)")
        return value

    def response(self) -> str:
        """The model's caption as lmms-eval logged it (`filtered_resps`: a list holding one response per
        request, the first judged; `capjudge judge` logs the text itself)."""
        if RESPONSE_FIELD not in self.line:
            raise RunFileError(f"{self.where} ({self.label}): no {RESPONSE_FIELD} (not an lmms-eval sample, or "
                               "logged without the model's output)")
        value = self.line[RESPONSE_FIELD]
        first = value[0] if isinstance(value, list) and value else value
        if isinstance(first, str):
            return first
        problem = "an empty list (no response)" if value == [] else f"{_described(first)}, not text"
        raise RunFileError(f"{self.where} ({self.label}): the logged response ({RESPONSE_FIELD}) is {problem}; "
                           "a caption is text")


def read_samples(path: Path) -> tuple[SampleLine, ...]:
    """Every line of a samples file, in file order; RunFileError for a line that is not an object, a key twice
    on a line, a record that does not read back, or an item logged twice."""
    path = Path(path)
    samples = tuple(SampleLine(path, number, line, logged_record(line, f"{path}, line {number}"))
                    for number, line in numbered_objects(path, RunFileError, unique_keys=True))
    first_line: dict[tuple[str, str], SampleLine] = {}
    for sample in samples:
        for identity in _identities(sample):
            earlier = first_line.setdefault(identity, sample)
            if earlier is not sample:
                raise RunFileError(
                    f"{path}: {earlier.label} is logged twice (lines {earlier.number} and {sample.number}): a run "
                    "logs each item once, and which copy is the run's cannot be told")
    return samples


def logged_record(line: Mapping[str, Any], where: str) -> JudgedRecord | None:
    """The item's logged record (None: the line logs none); a malformed one is a RunFileError naming
    `where` (the samples file and line) and what is wrong."""
    try:
        record = JudgedRecord.in_line(line)
        if record is not None:
            judge_descriptor(record.judge)  # its logged judge facts must read back too, or the record is refused
        return record
    except RecordError as problem:
        raise RunFileError(f"{where}: the logged record: {problem}") from None


def _identities(sample: SampleLine) -> list[tuple[str, str]]:
    """What makes two lines the same item: the logged item id, the doc_id; a line with neither is known by
    its logged target (as the leaderboard pairs such items across runs)."""
    found = []
    if sample.record is not None and sample.record.item_id is not None:
        found.append(("item", sample.record.item_id))
    if sample.line.get(DOC_ID_FIELD) is not None:
        found.append(("doc_id", json.dumps(sample.line[DOC_ID_FIELD], sort_keys=True, default=str)))
    if not found:
        found.append(("target", json.dumps(sample.line.get("target"), sort_keys=True, default=str)))
    return found


def _described(value: Any) -> str:
    if value is None:
        return "null"
    kind = {bool: "the boolean", int: "the number", float: "the number", dict: "an object", list: "a list"}
    return f"{kind.get(type(value), type(value).__name__)} {_short(value)}"


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."

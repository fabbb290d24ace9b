"""The packaged demo splits (`tasks/demo/`, written by `tests/support/demo_data.py`): ten drawn clips, G-VEval's split
with true-by-construction references and AnyCap's with one instruction and reference per item. Their item
formats; no human ratings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capjudge.judges.datasets.anycap_video import task_row
from capjudge.judges.datasets.items import DatasetError, ItemFormat, read_json_lines, record_id


def parse_gveval_demo_record(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One row of `gveval_demo.jsonl`: id, video, references, already in the task's shape; no candidate, no
    human scores."""
    item_id = record_id(record, position)
    video = record.get("video")
    if not isinstance(video, str) or not video.strip():
        raise DatasetError(f"item {item_id!r}: 'video' must be a file name, got {video!r}")
    references = record.get("references")
    if not isinstance(references, list) or not references or not all(isinstance(r, str) and r.strip() for r in references):
        raise DatasetError(f"item {item_id!r}: 'references' must be a non-empty list of captions")
    return {"id": item_id, "video": video, "references": list(references), "candidate": None, "human_scores": []}


def parse_anycap_demo_record(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One row of `anycap_demo.jsonl`: id, video, instruction, reference, caption_type, already flat. Its
    length instruction is part of the instruction text."""
    item_id = record_id(record, position)
    return task_row(
        item_id, record.get("video"), record.get("instruction"), record.get("reference"), record.get("caption_type"), ""
    )


GVEVAL_DEMO_FORMAT = ItemFormat("G-VEval demo split", read_json_lines, parse_gveval_demo_record)
ANYCAP_DEMO_FORMAT = ItemFormat("AnyCap demo split", read_json_lines, parse_anycap_demo_record)

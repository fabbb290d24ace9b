"""AnyCapEval's video split in its "style" shape (the published `anycapeval_video_ref_style.jsonl`): each item
asks for one caption type with an instruction (`conversations[0]`) and gives a reference caption
(`conversations[1]`); `restriction` is [caption type, the instruction's length sentence]. Its item format, and
the task row both AnyCap item formats (this one and the demo split's) produce. No human ratings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capjudge.judges.datasets.items import DatasetError, ItemFormat, read_json_lines, record_id

# The caption types an item may ask for. The AnyCap judge's rubric and length rules are written for these
# five and take them from here (capjudge.judges.anycap.length_rule): one definition, so the rows and the
# prompt cannot name them differently.
CAPTION_TYPES = ("brief", "detail", "poem", "narrative", "style")
# The published file calls the style type "theme"; the prompt calls it "style".
CAPTION_TYPE_ALIASES = {"theme": "style"}


class UnknownCaptionType(DatasetError):
    """A caption type that is none of the five (nor the file's alias "theme")."""


def normalise_caption_type(value: object, *, item: object = None) -> str:
    """The prompt's name for a caption type: "theme" becomes "style"; anything unknown is an error."""
    where = f"item {item}: " if item is not None else ""
    if not isinstance(value, str):
        raise UnknownCaptionType(f"{where}caption type must be a string, got {value!r}")
    name = value.strip().lower()
    name = CAPTION_TYPE_ALIASES.get(name, name)
    if name not in CAPTION_TYPES:
        raise UnknownCaptionType(
            f"{where}unknown caption type {value!r}; expected one of {', '.join(CAPTION_TYPES)} "
            f"(the dataset's 'theme' means 'style')"
        )
    return name


def parse_anycap_record(record: Mapping[str, Any], position: int) -> dict[str, Any]:
    """One AnyCapEval row (the published shape: conversations, restriction) -> a task row."""
    item_id = record_id(record, position)
    where = f"item {item_id}"
    conversations = record.get("conversations")
    if not isinstance(conversations, list) or len(conversations) < 2:
        raise DatasetError(f"{where}: 'conversations' must hold the instruction and the reference (2 turns)")
    instruction, reference = (_turn_text(conversations[index], where, index) for index in (0, 1))
    restriction = record.get("restriction")
    if not isinstance(restriction, list) or not restriction:
        raise DatasetError(f"{where}: 'restriction' must be [caption_type, length instruction], got {restriction!r}")
    length_restriction = restriction[1] if len(restriction) > 1 else ""
    if not isinstance(length_restriction, str):
        raise DatasetError(f"{where}: restriction[1] must be the length instruction text, got {length_restriction!r}")
    return task_row(item_id, record.get("video"), instruction, reference, restriction[0], length_restriction)


def task_row(
    item_id: str, video: Any, instruction: Any, reference: Any, caption_type: Any, length_restriction: str
) -> dict[str, Any]:
    """The row the task works on: id, video, instruction, reference, caption_type (one of CAPTION_TYPES),
    dataset_caption_type (as written), length_restriction (the instruction's length sentence, or "")."""
    where = f"item {item_id}"
    if not isinstance(video, str) or not video.strip():
        raise DatasetError(f"{where}: 'video' must be a file name, got {video!r}")
    for name, text in (("instruction", instruction), ("reference", reference)):
        if not isinstance(text, str) or not text.strip():
            raise DatasetError(f"{where}: the {name} must be non-empty text, got {text!r}")
    return {
        "id": item_id,
        "video": video,
        "instruction": instruction,
        "reference": reference,
        "caption_type": normalise_caption_type(caption_type, item=item_id),
        "dataset_caption_type": caption_type,
        "length_restriction": length_restriction,
    }


def _turn_text(turn: Any, where: str, index: int) -> str:
    value = turn.get("value") if isinstance(turn, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: conversations[{index}] has no text 'value'")
    return value


ANYCAP_FORMAT = ItemFormat("AnyCapEval video style", read_json_lines, parse_anycap_record)

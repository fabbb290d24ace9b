"""AnyCapEval's video split in its "style" shape (the published `anycapeval_video_ref_style.jsonl`): each item
asks for one caption type with an instruction (`conversations[0]`) and gives a reference caption
(`conversations[1]`); `restriction` is [caption type, the instruction's length sentence]. Its item format, and
the task row both AnyCap item formats (this one and the demo split's) produce. No human ratings.

Every field it reads is checked, naming the item: two turns, the human's instruction then the reference; a
caption type among the five (or "theme"); a length instruction that states one restriction the judge's
length rule can read (`capjudge.judges.datasets.anycap_length`) and that the instruction does not
contradict. An empty length instruction is allowed: the rule then reads the instruction itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from capjudge.judges.datasets.anycap_length import LengthRestriction, parse_length_restriction
from capjudge.judges.datasets.items import DatasetError, ItemFormat, read_json_lines, record_id

# The caption types an item may ask for. The AnyCap judge's rubric and length rules are written for these
# five and take them from here (capjudge.judges.anycap.length_rule): one definition, so the rows and the
# prompt cannot name them differently.
CAPTION_TYPES = ("brief", "detail", "poem", "narrative", "style")
# The published file calls the style type "theme"; the prompt calls it "style".
CAPTION_TYPE_ALIASES = {"theme": "style"}
# The roles of the published file's two turns: the instruction is the human's, the reference the model's.
# Turns the other way round would swap instruction and reference without a word.
_INSTRUCTION_ROLES = frozenset({"human", "user"})
_REFERENCE_ROLES = frozenset({"gpt", "assistant"})


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
    if not isinstance(conversations, list) or len(conversations) != 2:
        raise DatasetError(f"{where}: 'conversations' must hold the instruction and the reference (2 turns)")
    instruction = _turn_text(conversations[0], where, 0, _INSTRUCTION_ROLES)
    reference = _turn_text(conversations[1], where, 1, _REFERENCE_ROLES)
    restriction = record.get("restriction")
    if not isinstance(restriction, list) or not restriction:
        raise DatasetError(f"{where}: 'restriction' must be [caption_type, length instruction], got {_short(restriction)}")
    normalise_caption_type(restriction[0], item=item_id)  # an unknown type is named before the rest of the list
    if len(restriction) != 2:
        raise DatasetError(f"{where}: 'restriction' must be [caption_type, length instruction], got {_short(restriction)}")
    length_restriction = restriction[1]
    if not isinstance(length_restriction, str):
        raise DatasetError(f"{where}: restriction[1] must be the length instruction text, got {_short(length_restriction)}")
    row = task_row(item_id, record.get("video"), instruction, reference, restriction[0], length_restriction)
    _check_length_instruction(where, instruction, length_restriction)
    return row


def _check_length_instruction(where: str, instruction: str, length_instruction: str) -> None:
    """A length instruction states one restriction the judge's rule can read, and the instruction the model is
    given asks for no other: otherwise the rule would cap (or never cap) captions by a length nobody asked
    for, without a word. An empty one is the fallback the task documents: the rule reads the instruction."""
    if not length_instruction.strip():
        return
    stated = parse_length_restriction(length_instruction)
    if stated is None:
        raise DatasetError(
            f"{where}: restriction[1] {_short(length_instruction)} states no length restriction capjudge can read "
            "(e.g. \"needs to be 20 to 30 words\", \"exactly two sentences\", \"cannot exceed three sentences\")")
    asked = parse_length_restriction(instruction)
    if asked is not None and _bounds(asked) != _bounds(stated):
        raise DatasetError(f"{where}: restriction[1] says {stated.text!r}, but the instruction (conversations[0]) asks "
                           f"for {asked.text!r}: which length the model was asked for cannot be told")


def _bounds(restriction: LengthRestriction) -> tuple[str, int, int | None]:
    return restriction.unit, restriction.minimum, restriction.maximum


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


def _turn_text(turn: Any, where: str, index: int, roles: frozenset[str]) -> str:
    value = turn.get("value") if isinstance(turn, Mapping) else None
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{where}: conversations[{index}] has no text 'value'")
    role = turn.get("from")
    if role is not None and role not in roles:
        raise DatasetError(f"{where}: conversations[{index}] is from {_short(role)}, expected one of "
                           f"{', '.join(sorted(roles))} (instruction first, then the reference)")
    return value


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


ANYCAP_FORMAT = ItemFormat("AnyCapEval video style", read_json_lines, parse_anycap_record)

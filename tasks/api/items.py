"""An item as `capjudge.api` takes it, checked, and turned into the document a judge's task reads.

An item is a mapping: `id` (text or a whole number), `caption` (the text to judge), `video` (a file path, taken
relative to the current folder) and whatever else the judge reads (G-VEval's `references`; AnyCap's
`caption_type`, `reference` and optional `instruction`): the fields of a row of the judge's dataset, as its
task works on them. What cannot be judged as given is an `ItemError` naming the item and the problem, before any
request: every field capjudge's judges read is type-checked here (`JUDGE_FIELDS`), whichever judge, and None is
an absent field; a field the judge reads that the item lacks is one as soon as the judge reads it (`ItemFields`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from capjudge.api.errors import ItemError, JudgeInputError
from capjudge.judges.datasets.items import VIDEOS_DIR_KEY

CAPTION = "caption"
ID = "id"
VIDEO = "video"
# A whole-number id is kept as its text, and Python refuses to write an int of more than 4,300 digits (a
# ValueError naming no item): ids of databases and dataset files are at most 64-bit numbers, 20 digits.
MAX_ID_DIGITS = 20
TEXT = "text"
TEXTS = "a list of texts"
# The fields capjudge's judges read beside id, caption and video, and what each must be (README "Python API"):
# a value of another type failed deep inside a judge, naming neither the item nor the field (G-VEval's
# `references=[1, 2]` an AttributeError, `references="a caption"` judged as one reference per letter; AnyCap's
# `reference=7` a TypeError). What a well-typed value means (an unknown caption type, an empty reference list)
# stays the judge's to say, in its typed result, as in a run.
JUDGE_FIELDS = {
    "references": TEXTS,  # G-VEval's reference captions (modes frames+references, references)
    "reference": TEXT,  # AnyCap's reference caption
    "caption_type": TEXT,  # AnyCap's caption type (brief, detailed, ...)
    "instruction": TEXT,  # AnyCap's instruction, optional
    "length_restriction": TEXT,  # AnyCap's length sentence of the instruction, optional (a dataset row's)
    VIDEOS_DIR_KEY: TEXT,  # a dataset row's videos folder, which its relative `video` is read against
}


class ItemFields(dict):
    """An item's fields as its judge's task reads them. A field the task reads with `doc[name]` and the item
    lacks is an ItemError naming the item and the field (a bare KeyError from inside a judge would name neither);
    fields read with `doc.get(name)` stay optional, as in a run."""

    def __init__(self, fields: Mapping[str, Any], item: str, judge: str):
        super().__init__(fields)
        self.item = item
        self.judge = judge

    def __missing__(self, key: str) -> Any:
        raise ItemError(self.item, f"has no field {key!r}, which the {self.judge} judge reads")


def checked_item(judge: str, item: Any, position: int) -> tuple[ItemFields, str]:
    """(the document the judge's task reads, the caption) of one item; ItemError for one that cannot be judged.
    `position` names an item with no usable id (`#position`)."""
    if not isinstance(item, Mapping):
        raise ItemError(f"#{position}", f"is {_kind(item)}, not a mapping of fields (id, caption, video, ...)")
    item_id = item.get(ID)
    if isinstance(item_id, int) and not isinstance(item_id, bool) and abs(item_id) >= 10**MAX_ID_DIGITS:
        raise ItemError(f"#{position}", f"has no usable {ID!r} (a whole number of {item_id.bit_length():,} bits): "
                                        f"a numeric id has at most {MAX_ID_DIGITS} digits; give a longer one as text")
    if item_id is None or isinstance(item_id, bool) or not isinstance(item_id, (str, int)) or not str(item_id).strip():
        raise ItemError(f"#{position}", f"has no usable {ID!r} (got {_kind(item_id)}): an id is text or a whole number")
    item_id = str(item_id)
    if CAPTION not in item:
        raise ItemError(item_id, f"has no field {CAPTION!r} (the caption to judge)")
    caption = item[CAPTION]
    if not isinstance(caption, str):
        raise ItemError(item_id, f"{CAPTION!r} is {_kind(caption)}, not text")
    # None is an absent field, as for `video`: a judge reading it with `doc[name]` then names the item and the field.
    fields = {name: value for name, value in item.items()
              if name != CAPTION and not (name in JUDGE_FIELDS and value is None)}
    for name, value in fields.items():
        problem = _field_problem(JUDGE_FIELDS.get(name), value)
        if problem:
            raise ItemError(item_id, f"{name!r} is {_kind(value)}, not {problem}")
    fields[ID] = item_id
    video = fields.get(VIDEO)
    if video is not None and video != "":  # none or "": the item names no video (unjudged where the judge needs one)
        if not isinstance(video, (str, os.PathLike)):
            raise ItemError(item_id, f"{VIDEO!r} is {_kind(video)}, not a file path")
        # A notebook means a relative path from where it runs; a dataset's row carries its videos folder instead.
        fields[VIDEO] = os.fspath(video) if fields.get(VIDEOS_DIR_KEY) else str(Path(video).expanduser().absolute())
    return ItemFields(fields, item_id, judge), caption


def checked_items(judge: str, items: Any) -> list[tuple[ItemFields, str]]:
    """Every item checked (`checked_item`), in order. One id given twice with different fields is an ItemError:
    a judgment is known by its item id and caption, so one item would silently take the other's judgment."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Iterable):
        raise JudgeInputError(f"judge_captions takes a list of items (mappings), got {_kind(items)}; "
                              "for one item use judge_caption")
    checked = [checked_item(judge, item, position) for position, item in enumerate(items)]
    first: dict[str, ItemFields] = {}
    for fields, _ in checked:
        earlier = first.setdefault(fields[ID], fields)
        if earlier is not fields and not _same(earlier, fields):
            raise ItemError(fields[ID], "is given twice with different fields: give each item one id")
    return checked


def _field_problem(kind: str | None, value: Any) -> str | None:
    """What `value` should be instead (`kind`), or None when it is that or the field is not one judges read."""
    if kind == TEXT and not isinstance(value, str):
        return TEXT
    if kind == TEXTS and (not isinstance(value, (list, tuple)) or not all(isinstance(each, str) for each in value)):
        return TEXTS
    return None


def _same(one: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    try:
        return bool(dict(one) == dict(other))
    except (TypeError, ValueError):  # values that compare as arrays: not provably the same item
        return False


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    name = type(value).__name__
    try:
        shown = repr(value)
    except ValueError:  # Python writes no int of more than 4,300 digits (one inside a list too)
        shown = "too large to show"
    article = "an" if name[0].lower() in "aeiou" else "a"
    return f"{article} {name} ({shown if len(shown) <= 40 else shown[:37] + '...'})"

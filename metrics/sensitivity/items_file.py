"""sensitivity_<task>.json read back (what `capjudge sensitivity` wrote, `report.sensitivity_json`), as typed
data for the per-item page. The file is input like any other: it may have been edited, cut short, or written
by someone else, so every field the page uses is checked here and anything wrong is one SensitivityFileError
naming the file, the item (and caption and scorer) and the problem; nothing unchecked reaches the page.

Format 1 files (before replies were logged) are read too: their judgments say the reply is not in the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from capjudge.judges.jsonl import DuplicateKey, decode_json
from capjudge.metrics.files.values import NotANumber, item_number
from capjudge.metrics.sensitivity.perturbations import EVERY_DIMENSION, Direction

READABLE_VERSIONS = (1, 2)
# A file above this is refused before it is read: json.loads holds several times its size in memory, and a
# page embedding it could not be opened anyway. A VATEX-EVAL run (18,000 candidates x 6 texts, replies of
# about 1 KB) is about a quarter of it.
MAX_FILE_BYTES = 512 * 2**20
DIRECTIONS: tuple[Direction, ...] = ("down", "not_up", "up", "not_down")


class SensitivityFileError(ValueError):
    """The file is not a sensitivity report the page can show; the message names the file and the problem."""


@dataclass(frozen=True)
class FilePerturbation:
    name: str
    describe: str
    expectations: tuple[tuple[str, Direction], ...]  # (dimension or "*", direction), as perturbations.py has them

    def expected(self, dimension: str) -> Direction | None:
        named = dict(self.expectations)
        return named.get(dimension, named.get(EVERY_DIMENSION))


@dataclass(frozen=True)
class FileJudgment:
    """One scorer's judgment of one caption, as the file logs it."""

    scores: tuple[tuple[str, float | None], ...]  # in the file's order; None: no value (unjudged)
    failure: str | None
    failure_detail: str | None
    reply: str | None
    reply_logged: bool  # False: a format 1 file, which did not log replies
    cache_hit: bool
    pooled: tuple[str, ...] | None  # a panel's judgment: the members it pooled (None: not a panel's)
    not_pooled: tuple[tuple[str, str], ...] = ()  # (member, failure kind) the panel left out


@dataclass(frozen=True)
class FileCaption:
    perturbation: str | None  # None: the original
    text: str
    change: str
    judgments: Mapping[str, FileJudgment]  # by scorer


@dataclass(frozen=True)
class FileItem:
    item_id: str
    cluster: str
    original: FileCaption
    variants: tuple[FileCaption, ...]  # one per perturbation, in the file's perturbation order


@dataclass(frozen=True)
class FileShift:
    """One row of the file's shift table (not measured: `expected` and the figures are None)."""

    scorer: str
    perturbation: str
    dimension: str
    expected: str | None
    mean_shift: float | None
    ci: tuple[float | None, float | None]
    share_wrong_way: float | None
    verdict: str | None
    passed: bool | None
    n_candidates: int | None
    n_left_out: int | None
    n_unchanged: int | None = None  # pairs whose variant changed nothing (None: a file from before they were counted)
    not_measured: str | None = None  # why a row has no figures, as the file says


@dataclass(frozen=True)
class SensitivityFile:
    path: Path
    format_version: int
    task: str
    judge: str
    command: str
    scorers: tuple[str, ...]
    seed: int | None
    n_resamples: int | None
    confidence: float | None
    perturbations: tuple[FilePerturbation, ...]
    shifts: tuple[FileShift, ...]
    items: tuple[FileItem, ...]


def read_sensitivity_file(path: Path) -> SensitivityFile:
    """The file at `path`, checked whole; SensitivityFileError (naming `path`) for anything else."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise SensitivityFileError(f"{path}: not a file")
        if size > MAX_FILE_BYTES:
            raise SensitivityFileError(f"{path}: {size:,} bytes, over the {MAX_FILE_BYTES:,} a sensitivity report "
                                       "may have (it is not one capjudge sensitivity wrote, or far too large to show)")
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise SensitivityFileError(f"{path}: cannot be read ({error.strerror or error})") from None
    except UnicodeDecodeError as error:
        raise SensitivityFileError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    try:
        # A key twice (a second "items": [] after the real one) is refused: json.loads would keep the last copy.
        document = decode_json(text, unique_keys=True)
    except DuplicateKey as duplicate:
        raise SensitivityFileError(f"{path}: {duplicate.describe('key')}") from None
    except json.JSONDecodeError as error:
        raise SensitivityFileError(f"{path}: not JSON ({error.msg} at line {error.lineno}, column {error.colno})") from None
    except RecursionError:
        raise SensitivityFileError(f"{path}: not JSON that can be read (nested too deeply)") from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise SensitivityFileError(f"{path}: not JSON that can be read ({error})") from None
    return parse_sensitivity(document, path)


def parse_sensitivity(document: Any, path: Path) -> SensitivityFile:
    top = _Where(str(path))
    fields = top.mapping(document, "the file")
    version = fields.get("format_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise top.error(f"format_version {_short(version)}: not a sensitivity report this capjudge reads "
                        f"(it reads {' and '.join(map(str, READABLE_VERSIONS))})")
    scorers = top.strings(top.field(fields, "scorers", list), "scorers")
    if not scorers or len(set(scorers)) != len(scorers):
        raise top.error("scorers: " + ("empty" if not scorers else "a scorer named twice"))
    perturbations = tuple(_perturbation(top.within(f"perturbations[{i}]"), raw)
                          for i, raw in enumerate(top.field(fields, "perturbations", list)))
    names = [p.name for p in perturbations]
    if len(set(names)) != len(names):
        raise top.error(f"perturbations: {sorted(n for n in names if names.count(n) > 1)[0]!r} named twice")
    items, seen = [], set()
    for index, raw in enumerate(top.field(fields, "items", list)):
        item = _item(top, index, raw, perturbations, scorers, version)
        if item.item_id in seen:
            raise top.error(f"item {item.item_id!r} is in the file twice (items[{index}])")
        seen.add(item.item_id)
        items.append(item)
    return SensitivityFile(
        path=path, format_version=version, task=top.field(fields, "task", str), judge=top.field(fields, "judge", str),
        command=top.optional(fields, "command", str) or "", scorers=tuple(scorers),
        seed=top.optional(fields, "seed", int), n_resamples=top.optional(fields, "n_resamples", int),
        confidence=top.number(fields.get("confidence"), "confidence"), perturbations=perturbations,
        shifts=tuple(_shift(top.within(f"shifts[{i}]"), raw, scorers, names)
                     for i, raw in enumerate(top.field(fields, "shifts", list))),
        items=tuple(items))


# ---------------------------------------------------------------------------------------------------------


class _Where:
    """A place in the file, for messages: the file, then the item, caption and scorer."""

    def __init__(self, where: str) -> None:
        self.where = where

    def within(self, part: str) -> _Where:
        return _Where(f"{self.where}, {part}")

    def error(self, problem: str) -> SensitivityFileError:
        return SensitivityFileError(f"{self.where}: {problem}")

    def mapping(self, value: Any, what: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.error(f"{what} is {_kind(value)}, not an object")
        return value

    def field(self, fields: Mapping[str, Any], name: str, kind: type) -> Any:
        if name not in fields:
            raise self.error(f"no field {name!r}")
        value = fields[name]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise self.error(f"{name} is {_kind(value)}, not {_kind_name(kind)}")
        return value

    def optional(self, fields: Mapping[str, Any], name: str, kind: type) -> Any:
        return None if fields.get(name) is None else self.field(fields, name, kind)

    def count(self, fields: Mapping[str, Any], name: str) -> int | None:
        """An optional count of pairs: an integer, 0 or more."""
        value = self.optional(fields, name, int)
        if value is not None and value < 0:
            raise self.error(f"{name} is {value}, not a count (0 or more)")
        return value

    def strings(self, values: list[Any], what: str) -> list[str]:
        for value in values:
            if not isinstance(value, str):
                raise self.error(f"{what} holds {_kind(value)}, not only texts")
        return values

    def number(self, value: Any, what: str) -> float | None:
        if isinstance(value, bool):
            raise self.error(f"{what} is {_kind(value)}, not a number")
        try:
            return item_number(value)
        except NotANumber as problem:
            raise self.error(f"{what}: {problem}") from None


def _perturbation(where: _Where, raw: Any) -> FilePerturbation:
    fields = where.mapping(raw, "a perturbation")
    expectations = []
    for pair in where.field(fields, "expectations", list):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and pair[1] in DIRECTIONS):
            raise where.error(f"expectation {_short(pair)}: not [dimension, one of {', '.join(DIRECTIONS)}]")
        expectations.append((pair[0], pair[1]))
    return FilePerturbation(where.field(fields, "name", str), where.field(fields, "describe", str), tuple(expectations))


def _item(top: _Where, index: int, raw: Any, perturbations: tuple[FilePerturbation, ...], scorers: list[str],
          version: int) -> FileItem:
    fields = top.within(f"items[{index}]").mapping(raw, "an item")
    item_id = top.within(f"items[{index}]").field(fields, "item_id", str)
    where = top.within(f"item {item_id!r}")
    original = _caption(where.within("original"), where.field(fields, "original", dict), None, scorers, version)
    variants = where.field(fields, "variants", list)
    if len(variants) != len(perturbations):
        raise where.error(f"{len(variants)} perturbed captions, but the file names {len(perturbations)} perturbations")
    return FileItem(item_id, where.field(fields, "cluster", str), original, tuple(
        _caption(where.within(p.name), v, p.name, scorers, version) for p, v in zip(perturbations, variants)))


def _caption(where: _Where, raw: Any, perturbation: str | None, scorers: list[str], version: int) -> FileCaption:
    fields = where.mapping(raw, "a caption")
    named = fields.get("perturbation")
    if named != perturbation:
        raise where.error(f"names perturbation {_short(named)}, expected {_short(perturbation)} in this place")
    judgments = where.field(fields, "judgments", dict)
    missing = [scorer for scorer in scorers if scorer not in judgments]
    extra = [scorer for scorer in judgments if scorer not in scorers]
    if missing or extra:
        raise where.error(f"no judgment by scorer {missing[0]!r}" if missing else f"a judgment by {extra[0]!r}, "
                          "which is not one of the file's scorers")
    return FileCaption(perturbation, where.field(fields, "text", str), where.field(fields, "change", str),
                       {scorer: _judgment(where.within(f"scorer {scorer!r}"), judgments[scorer], version)
                        for scorer in scorers})


def _judgment(where: _Where, raw: Any, version: int) -> FileJudgment:
    fields = where.mapping(raw, "a judgment")
    scores = where.field(fields, "scores", dict)
    values = tuple((name, where.number(value, f"score {name!r}")) for name, value in scores.items())
    if fields.get("failure") is not None and any(value is not None for _, value in values):
        raise where.error("a judgment that failed carries scores (a failed judgment's are null: its shifts are not measured)")
    pooling = where.optional(fields, "panel", dict)  # only a panel's judgment has it
    pooled, not_pooled = None, ()
    if pooling:
        panel_where = where.within("panel")
        pooled = tuple(panel_where.strings(panel_where.field(pooling, "judged_by", list), "judged_by"))
        left = panel_where.field(pooling, "not_judged", dict)
        not_pooled = tuple((name, kind) for name, kind in left.items() if isinstance(kind, str))
        if len(not_pooled) != len(left):
            raise panel_where.error("not_judged holds a failure kind that is not a text")
    return FileJudgment(values, where.optional(fields, "failure", str), where.optional(fields, "failure_detail", str),
                        where.optional(fields, "reply", str), version >= 2, bool(where.field(fields, "cache_hit", bool)),
                        pooled, not_pooled)


def _shift(where: _Where, raw: Any, scorers: list[str], perturbations: list[str]) -> FileShift:
    fields = where.mapping(raw, "a shift")
    scorer, perturbation = where.field(fields, "scorer", str), where.field(fields, "perturbation", str)
    if scorer not in scorers or perturbation not in perturbations:
        raise where.error(f"scorer {scorer!r} or perturbation {perturbation!r} is not one the file names")
    measured = where.field(fields, "measured", bool)
    ci = where.field(fields, "ci", list) if measured else [None, None]
    if len(ci) != 2:
        raise where.error(f"ci has {len(ci)} ends, not 2")
    return FileShift(
        scorer, perturbation, where.field(fields, "dimension", str),
        where.field(fields, "expected", str) if measured else None,
        where.number(fields.get("mean_shift"), "mean_shift"),
        (where.number(ci[0], "ci"), where.number(ci[1], "ci")),
        where.number(fields.get("share_wrong_way"), "share_wrong_way"),
        where.optional(fields, "verdict", str), where.optional(fields, "passed", bool),
        where.count(fields, "n_candidates"), where.count(fields, "n_left_out"), where.count(fields, "n_unchanged"),
        where.optional(fields, "not_measured", str))


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return {str: "a text", list: "a list", dict: "an object", int: "a number", float: "a number"}.get(
        type(value), f"a {type(value).__name__}")


def _kind_name(kind: type) -> str:
    return {str: "a text", list: "a list", dict: "an object", int: "an integer", bool: "true/false"}.get(kind, kind.__name__)


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
